"""Which compiled kernel a call runs: numba's (:mod:`mrope.core.compiled`) where numba imports and
``MROPE_NUMBA`` allows it, else ``None`` and the caller keeps its numpy path.

numba is optional and slow to import, so the backend is imported on first need, once per process, and
each kernel handed out is remembered by name: a short call pays one dict read.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from .._backends import numba_allowed

#: the module of mrope's numba backend (its kernels: :func:`compiled_kernel`)
COMPILED_MODULE = "mrope.core.compiled"
#: the kernels :func:`compiled_kernel` has handed out, by name
_kernels: dict[str, Any] = {}


@functools.cache
def _compiled_backend() -> ModuleType | None:
    try:
        from . import compiled
    except ImportError:  # numba missing, or not built for this numpy
        return None
    return compiled


def compiled_kernel(name: str, *, load: bool = True) -> Any:
    """The kernel ``name`` of mrope's numba backend (:mod:`mrope.core.compiled`), or ``None`` where numba
    does not import or ``MROPE_NUMBA`` is off (the import is tried once per process). ``load=False``:
    ``None`` too while nothing has loaded that backend yet, so a short call never pays numba's import
    (a long render, a compiled serving step or an integration's ``enable`` loads it)."""
    kernel = _kernels.get(name)
    if kernel is not None:
        return kernel
    if not numba_allowed() or (not load and COMPILED_MODULE not in sys.modules):
        return None
    backend = _compiled_backend()
    if backend is None:
        return None
    kernel = _kernels[name] = getattr(backend, name)
    return kernel


def read_numba_env_again() -> None:
    """Have mrope read ``MROPE_NUMBA`` again (it reads it once per process), for a caller that changed it:
    the kernels handed out so far are chosen anew."""
    numba_allowed.cache_clear()
    _kernels.clear()
