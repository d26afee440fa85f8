"""The vLLM integration's process-wide state: the enabled mode, the counters and the patch records.

One module holds them so that the runners' modules (:mod:`.v1`, :mod:`.v2`) and the lifecycle
(:mod:`.lifecycle`) share them without importing each other.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..._errors import MRopeError

logger = logging.getLogger("mrope.integrations.vllm")

MODES = ("mrope", "check")

STAT_NAMES = (
    "admitted",  # requests registered in a table
    "removed",  # requests whose slot was freed (finished)
    "steps",  # steps whose positions mrope wrote
    "checked_steps",  # check mode: steps compared with vLLM's own path
    "fallback_requests",  # requests mrope refused (served from vLLM's positions, or by vLLM's path)
    "fallback_steps",  # steps written by vLLM's own path in a patched runner
    "fallback_runners",  # V2 model runners kept on vLLM's path (vLLM's RopeState)
    "positions_runners",  # model runners in positions mode (vLLM's prompt positions, mrope's steps)
    "positions_requests",  # requests registered from vLLM's positions by a runner in positions mode
    "pruning_reads",  # video token pruning: a request's prompt positions rendered from the table
    "pruning_updates",  # video token pruning: a request's recomputed positions registered in the table
)
#: this process's counters (see :func:`mrope.integrations.vllm.stats`)
STATS: dict[str, Any] = dict.fromkeys(STAT_NAMES, 0)
STATS["runner"] = None  # the model runner served last: "v1", "v2", "v2-cpu" (None before any)
_enabled: dict[str, str] = {}  # "mode"


def mode() -> str | None:
    """The mode enabled in this process (``"mrope"``, ``"check"``), or None."""
    return _enabled.get("mode")


def set_mode(value: str | None) -> None:
    """Record the enabled mode (None: disabled)."""
    if value is None:
        _enabled.clear()
    else:
        _enabled["mode"] = value


def reset_stats() -> None:
    """Zero the counters (``runner`` stays)."""
    for name in STAT_NAMES:
        STATS[name] = 0


@dataclass(frozen=True)
class Patch:
    """One patched attribute: ``owner.name`` was ``original`` (a class's method or a module's function)."""

    owner: Any
    name: str
    original: Callable[..., Any]


class Patches:
    """mrope's patches as records keyed by (owner's qualified name, attribute name), each found again from
    mrope's replacement: two owners with a method of the same name never share a record."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], Patch] = {}
        self._keys: dict[Callable[..., Any], tuple[str, str]] = {}  # mrope's replacement -> its record

    def apply(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        """Set ``owner.name`` to ``replacement`` (with the original's name and docstring), recording it."""
        key = (qualified_name(owner), name)
        if key in self._records or replacement in self._keys:
            raise MRopeError(f"mrope patches {key[0]}.{name} twice, or one replacement in two places")
        original = vars(owner)[name]
        self._records[key] = Patch(owner, name, original)
        self._keys[replacement] = key
        setattr(owner, name, functools.wraps(original)(replacement))

    def original(self, replacement: Callable[..., Any]) -> Callable[..., Any]:
        """vLLM's original of one of mrope's replacements."""
        return self._records[self._keys[replacement]].original

    def patched(self, replacement: Callable[..., Any]) -> bool:
        """Whether ``replacement`` is in place."""
        return replacement in self._keys

    def restore(self) -> None:
        """Put every original back (the last patched first) and forget the records."""
        for patch in reversed(self._records.values()):
            setattr(patch.owner, patch.name, patch.original)
        self._records.clear()
        self._keys.clear()


def qualified_name(owner: Any) -> str:
    """``module.Class`` of a class, the name of a module."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return owner.__name__


#: every patch mrope has applied in this process
PATCHES = Patches()


def original(replacement: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's original of one of mrope's replacements."""
    return PATCHES.original(replacement)
