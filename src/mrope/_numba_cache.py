"""numba's ``njit`` with its on-disk cache keyed on a digest of what a function compiles, computed, not typed.

numba keys a cached function on its own file (size and time stamp) and bytecode only: a constant it
bakes in from another module, or a function it calls (compiled into it), can change while that file
does not, and numba then loads stale machine code. :func:`cached_njit` names the cache entry (the
function's ``__qualname__``, which numba's index and data file names carry) after
:func:`compiled_digest`: the source of the function, of every function it calls (recursively, through
numba dispatchers too) and the values of the globals they read. A change anywhere makes a new entry;
the same code finds the same entry in every process. Entries of older digests stay beside (small).

Where numba cannot keep its cache (no writable directory for it: a read-only install whose ``HOME``
is not writable either, where ``cache=True`` raises "no locator available"), :func:`cached_njit`
compiles without a cache and says so once in a log (:func:`mrope._errors.note_once`). Where numba's
JIT is disabled (``NUMBA_DISABLE_JIT=1``, numba's debugging switch: ``njit`` then returns the Python
function, which neither compiles nor runs at a compiled speed), this module raises ``ImportError``, as
where numba is missing, and says so once: mrope runs its numpy paths.

Imported only by the modules that compile (numba is optional): :mod:`mrope.render.numba`,
:mod:`mrope.serving.compiled_step`.
"""

from __future__ import annotations

import hashlib
import inspect
import marshal
import types
from collections.abc import Callable, Iterator
from typing import Any

import numba
import numpy as np

from ._errors import note_once

if numba.config.DISABLE_JIT:
    note_once(
        "numba-jit",
        "mrope: numba's JIT is disabled (NUMBA_DISABLE_JIT=1): mrope runs its numpy paths, not its "
        "compiled ones",
    )
    raise ImportError("numba's JIT is disabled (NUMBA_DISABLE_JIT=1): mrope's compiled paths are off")

#: hex digits of the digest in a cache entry's name
DIGEST_CHARS = 16
_SCALARS = (bool, int, float, complex, str, bytes, slice, type(None), np.generic)


def compiled_digest(py_func: types.FunctionType) -> str:
    """The digest of ``py_func``'s source, the functions it calls and the constants it reads (globals and
    closure cells), recursively: the same code gives the same digest in every process."""
    parts: list[str] = []
    _describe_function(py_func, parts, set())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:DIGEST_CHARS]


def cached_njit(**options: Any) -> Callable[[types.FunctionType], Any]:
    """``numba.njit(cache=True, **options)``, its cache entry named ``<qualname>_<compiled_digest>``, so a
    changed constant or callee compiles anew instead of loading stale code. Where numba finds no
    directory it can write its cache to, ``numba.njit(**options)``: compiled in each process, said once
    in a log."""

    def decorate(py_func: types.FunctionType) -> Any:
        py_func.__qualname__ = f"{py_func.__qualname__}_{compiled_digest(py_func)}"
        try:
            return numba.njit(cache=True, **options)(py_func)
        except RuntimeError as error:  # "cannot cache function ...: no locator available for file ..."
            if "no locator available" not in str(error):
                raise
            note_once("numba-cache", _NO_CACHE)
            return numba.njit(**options)(py_func)

    return decorate


_NO_CACHE = (
    "mrope: numba finds no writable directory for its cache (the package's __pycache__ and the user's "
    "cache directory: a read-only install, HOME not writable): mrope compiles its numba code in each "
    "process instead of loading it from disk; set NUMBA_CACHE_DIR to a writable directory to keep it"
)


def _describe_function(func: types.FunctionType, parts: list[str], seen: set[int]) -> None:
    """Append ``func``'s source and what its code reads from its globals and closure (once per function)."""
    if id(func) in seen:
        return
    seen.add(id(func))
    parts.append(f"def {func.__module__}:{func.__name__}")
    try:
        parts.append(inspect.getsource(func))
    except (OSError, TypeError):  # no source file (a frozen or zipped install): the bytecode
        parts.append(marshal.dumps(func.__code__).hex())
    parts.append(f"defaults {_value_text(func.__defaults__)}")
    namespace = func.__globals__
    for name in sorted(set(_global_names(func.__code__))):
        if name in namespace:
            _describe_value(name, namespace[name], parts, seen)
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=True):
        _describe_value(name, cell.cell_contents, parts, seen)


def _global_names(code: types.CodeType) -> Iterator[str]:
    """The names ``code`` and the code objects nested in it load (globals, and attributes: extra names
    only widen the digest)."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _describe_value(name: str, value: Any, parts: list[str], seen: set[int]) -> None:
    py_func = getattr(value, "py_func", None)  # a numba dispatcher: what it compiles
    if isinstance(py_func, types.FunctionType):
        _describe_function(py_func, parts, seen)
    elif isinstance(value, types.FunctionType):
        _describe_function(value, parts, seen)
    else:
        parts.append(f"{name} = {_value_text(value)}")


def _value_text(value: Any) -> str:
    """A text of ``value`` that is the same in every process: constants by value, anything else by type."""
    if isinstance(value, _SCALARS):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(_value_text(v) for v in value)})"
    if isinstance(value, np.ndarray):
        data = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return f"ndarray({value.dtype}, {value.shape}, {data})"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__} {getattr(value, '__version__', '')}"
    if isinstance(value, type):
        return f"class {value.__module__}.{value.__qualname__}"
    return f"object {type(value).__module__}.{type(value).__qualname__}"


__all__ = ["DIGEST_CHARS", "cached_njit", "compiled_digest"]
