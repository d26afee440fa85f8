"""Run an action right after a module is imported, or now where it already is: :func:`when_imported`.

The engine plugins patch classes of an engine's model runner. A plugin is loaded in every process the
engine starts, also in those that never run a model (vLLM's API server): importing the runner there to
patch it would load hundreds of modules and numba into a process that only serves HTTP (+20% objects
for its garbage collector to walk). Deferred to the runner module's own import, the patch is applied in
the processes that run one, before any runner is made (its class is defined by that import).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

logger = logging.getLogger("mrope.integrations")


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder first on ``sys.meta_path`` that finds nothing itself: for a watched module it takes the
    spec the other finders give and wraps its loader so that the actions run after the module's code."""

    def __init__(self) -> None:
        self.actions: dict[str, list[Callable[[ModuleType], None]]] = {}
        self.lock = threading.Lock()

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.actions:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RunAfter(spec.loader, self, name)
        return spec

    def run(self, name: str, module: ModuleType) -> None:
        with self.lock:
            actions = self.actions.pop(name, [])
        for action in actions:
            try:
                action(module)
            except Exception as error:  # an engine's import never fails for mrope
                logger.warning("mrope: the action after importing %s failed (%s); it is skipped", name, error)


class _RunAfter(importlib.abc.Loader):
    """A module's own loader, then the actions waiting for that module."""

    def __init__(self, loader: Any, finder: _AfterImport, name: str) -> None:
        self.loader, self.finder, self.name = loader, finder, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.finder.run(self.name, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the module's own loader
        return getattr(self.loader, name)


_FINDER = _AfterImport()


def when_imported(name: str, action: Callable[[ModuleType], None]) -> None:
    """Call ``action(module)`` once module ``name`` is imported: now where it is, else right after its
    import (by whoever imports it). An exception of ``action`` is logged, never raised into an import."""
    module = sys.modules.get(name)
    if module is not None:
        action(module)
        return
    with _FINDER.lock:
        _FINDER.actions.setdefault(name, []).append(action)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def cancel(name: str | None = None) -> None:
    """Drop the actions waiting for module ``name`` (every module's where None)."""
    with _FINDER.lock:
        if name is None:
            _FINDER.actions.clear()
        else:
            _FINDER.actions.pop(name, None)


def waiting() -> list[str]:
    """The modules whose import actions wait for."""
    with _FINDER.lock:
        return sorted(_FINDER.actions)
