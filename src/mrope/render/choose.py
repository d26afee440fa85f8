"""Which backend renders: the one place that chooses between numba's compiled code and numpy.

numba is optional and slow to import: :mod:`mrope.render.numba` is imported on first need, once per
process, and each kernel handed out is remembered by name (a short call pays one dict read).
``MROPE_NUMBA=0`` keeps numpy everywhere (:func:`numba_allowed`, which a :class:`mrope.PositionTable`
of ``backend="auto"`` reads too).
"""

from __future__ import annotations

import functools
import os
import sys
from types import ModuleType
from typing import Any

from .._env import OFF_VALUES
from .._errors import MRopeError

#: the environment variable that turns off mrope's compiled (numba) paths: ``MROPE_NUMBA=0`` (or
#: ``false``, ``off``, ``no``, in any case, as ``MROPE_VLLM`` reads them)
NUMBA_ENV = "MROPE_NUMBA"
#: the values of ``MROPE_NUMBA`` that mean "on" (as does unset or empty)
NUMBA_ON_VALUES = ("1", "true", "on", "yes")
#: the module of mrope's numba backend (its kernels: :func:`compiled_kernel`)
COMPILED_MODULE = "mrope.render.numba"
#: the kernels :func:`compiled_kernel` has handed out, by name
_kernels: dict[str, Any] = {}


@functools.cache
def numba_allowed() -> bool:
    """Whether mrope may use its compiled paths where numba imports: ``MROPE_NUMBA`` unset, empty, ``1``,
    ``true``, ``on`` or ``yes`` (in any case); not where it is ``0``, ``false``, ``off`` or ``no``. Any
    other value (``maybe``, a typo) raises :class:`MRopeError` naming it, at every call that chooses a
    path, rather than count silently as one or the other. Read once per process (reading the
    environment costs some 10 us in a cold cache); :func:`read_numba_env_again` reads it again."""
    given = os.environ.get(NUMBA_ENV, "")
    value = given.strip().lower()
    if value in OFF_VALUES:
        return False
    if value in ("", *NUMBA_ON_VALUES):
        return True
    raise MRopeError(
        f"{NUMBA_ENV}={given!r} is neither off ({', '.join(OFF_VALUES)}: mrope keeps numpy) nor on "
        f"({', '.join(NUMBA_ON_VALUES)}, or unset: mrope compiles with numba where it imports)"
    )


@functools.cache
def _compiled_backend() -> ModuleType | None:
    try:
        from . import numba
    except ImportError:  # numba missing, not built for this numpy, or its JIT disabled
        return None
    return numba


def compiled_kernel(name: str, *, load: bool = True) -> Any:
    """The kernel ``name`` of mrope's numba backend (:mod:`mrope.render.numba`), or ``None`` where numba
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
