"""Input checks of :class:`mrope.serving.PositionTable`'s numpy path: each raises :class:`MRopeError`
naming the value and what was expected, before anything is written."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from .._arrays import check_int64_range, is_torch_tensor, overlapping, refuse_non_integers, to_numpy
from .._errors import MRopeError
from ._pool import MAX_CAPACITY
from ._state import DEAD, MAX_INDEX, PLEN, SlotState

SIGN = -(1 << 63)  # ``x ^ SIGN`` orders int64 values as unsigned: negative ones after every bound
INT64 = np.dtype(np.int64)
INT32 = np.dtype(np.int32)
INDEX_DTYPES = frozenset({INT64, INT32})  # slots and counts read as they are (no copy)
FLOAT32 = np.dtype(np.float32)
INT64_MAX = (1 << 63) - 1


def is_int(value: Any) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_sizes(max_requests: Any, max_position: Any, pool_capacity: Any) -> int:
    """A table's sizes checked (:class:`mrope.PositionTable`'s arguments); returns its pool's capacity
    (``pool_capacity``, default ``8 * max_requests + 64``)."""
    if not is_int(max_requests) or max_requests <= 0:
        raise MRopeError(f"max_requests must be a positive int, got {max_requests!r}")
    if max_requests > MAX_CAPACITY:
        raise MRopeError(
            f"max_requests must be at most {MAX_CAPACITY} (2**31: each live request takes a segment "
            f"entry, and the pool indexes at most that many), got {max_requests}"
        )
    if max_position is not None and (not is_int(max_position) or max_position <= 0):
        raise MRopeError(f"max_position must be a positive int or None, got {max_position!r}")
    if max_position is not None and max_position > INT64_MAX:
        raise MRopeError(f"max_position must be below 2**63 (positions are int64), got {max_position}")
    if pool_capacity is not None and (not is_int(pool_capacity) or pool_capacity <= 0):
        raise MRopeError(f"pool_capacity must be a positive int or None, got {pool_capacity!r}")
    if pool_capacity is not None and pool_capacity > MAX_CAPACITY:
        raise MRopeError(
            f"pool_capacity must be at most {MAX_CAPACITY} (2**31, the entries the pool's keys "
            f"index), got {pool_capacity}"
        )
    if pool_capacity is None:
        return min(8 * int(max_requests) + 64, MAX_CAPACITY)
    return int(pool_capacity)


def table_dtype(dtype: Any) -> np.dtype:
    """``int64`` or ``float32`` from a numpy, torch or string dtype."""
    name = str(dtype).removeprefix("torch.")
    try:
        found = np.dtype(name if name in ("int64", "float32") else dtype)
    except TypeError:
        found = None
    if found not in (INT64, FLOAT32):
        raise MRopeError(
            f"dtype must be int64 (integer positions) or float32 (Qwen3-Omni's fractional positions), "
            f"got {dtype!r}"
        )
    return found


def validate(
    max_slots: int,
    slots: np.ndarray,
    nc: np.ndarray,
    ns: np.ndarray,
    info: np.ndarray,
    max_index: int = MAX_INDEX,
    seq_lens: np.ndarray | None = None,
) -> int:
    """Checks of the general path; returns N. ``seq_lens``: the caller's lengths of a decode step
    (``nc`` is ``seq_lens - 1``, which wraps for the most negative int64), named in the messages."""
    dead = info[PLEN] == DEAD
    if dead.any():
        i = int(np.argmax(dead))
        if not 0 <= slots[i] < max_slots:
            raise MRopeError(f"slots[{i}] = {slots[i]} is out of range [0, {max_slots})")
        raise MRopeError(f"slots[{i}] = {slots[i]} holds no request (never added, or removed)")
    if seq_lens is not None:
        if seq_lens.min() < 1:
            i = int(np.argmin(seq_lens))
            raise MRopeError(
                f"seq_lens[{i}] = {seq_lens[i]} (slot {slots[i]}): a length counts the new token, so it "
                "must be >= 1"
            )
        over = seq_lens > max_index
        if over.any():
            i = int(np.argmax(over))
            raise MRopeError(
                f"slot {slots[i]}: sequence index {int(seq_lens[i]) - 1} (seq_lens[{i}] = {seq_lens[i]}) "
                f"is beyond {max_index - 1}"
            )
    if ns.min() < 0:
        i = int(np.argmin(ns))
        raise MRopeError(f"num_scheduled[{i}] = {ns[i]} (slot {slots[i]}): counts must be >= 0")
    if nc.min() < 0:
        i = int(np.argmin(nc))
        raise MRopeError(f"num_computed[{i}] = {nc[i]} (slot {slots[i]}): counts must be >= 0")
    # the last index ``nc + ns - 1`` below ``max_index``; ``max_index - ns`` cannot wrap (ns >= 0)
    over = nc > np.subtract(max_index, ns, dtype=np.int64)
    if over.any():
        i = int(np.argmax(over))
        raise MRopeError(
            f"slot {slots[i]}: sequence index {int(nc[i]) + int(ns[i]) - 1} is beyond {max_index - 1}"
        )
    return int(ns.sum())


def check_out(out: np.ndarray, num: int, num_tokens: int | None, dtype: np.dtype = INT64) -> int:
    """``out`` is a writable (3, >= num) array of the table's ``dtype``."""
    if (out.dtype is not dtype and out.dtype != dtype) or out.ndim != 2 or out.shape[0] != 3:
        raise MRopeError(
            f"out must be a (3, n) {dtype} array (the table's dtype), got shape {out.shape} dtype {out.dtype}"
        )
    if out.shape[1] < num:
        raise MRopeError(f"out has {out.shape[1]} columns, the step needs {num}")
    if num_tokens is not None and num_tokens != num:
        raise MRopeError(f"num_tokens = {num_tokens}, but num_scheduled sums to {num}")
    if not out.flags.writeable:
        raise MRopeError("out is read-only")
    if out_overlaps(out, num):
        raise MRopeError(
            f"out has elements sharing memory (strides {out.strides} bytes, e.g. a broadcast or "
            "as_strided view): pass an array that can hold one position per element"
        )
    return num


def out_overlaps(out: np.ndarray, num: int) -> bool:
    """Whether two elements of ``out[:, :num]`` (a (3, n) array) share memory. O(1): the common
    layout (columns one element apart, rows at least ``num`` apart) is one comparison."""
    row, column = out.strides
    if column == out.itemsize and row >= column * num:
        return False
    return overlapping((3, num), (row, column), out.itemsize)


def as_index(x: Any, name: str) -> np.ndarray:
    """A 1-D int64 or int32 numpy array, without a copy when ``x`` already is one (or a CPU tensor of
    one: an engine's per-step index tensors are viewed directly, the common case checked first)."""
    view = x
    if type(x) is not np.ndarray and is_torch_tensor(x):
        with contextlib.suppress(RuntimeError, TypeError):  # a device tensor, or one with grad
            view = x.numpy()  # a CPU tensor: a view
    if type(view) is np.ndarray and view.dtype in INDEX_DTYPES and view.ndim == 1:
        return view
    arr = to_numpy(x, name=name)
    if arr.ndim != 1:
        raise MRopeError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype == np.float64):
        refuse_non_integers(arr, x, name)
    check_int64_range(arr, name)
    return arr if arr.dtype in INDEX_DTYPES else arr.astype(np.int64)


def check_max(last: np.ndarray, state: SlotState) -> None:
    """``last``: per request, the position of its last index (see :meth:`PositionTable.fill`), below the
    state's bound (its ``max_position``, named by its ``bound_text``)."""
    if last.max() >= state.max_position:
        i = int(np.argmax(last))
        raise MRopeError(f"request {i} of the step reaches position {last[i]}, beyond {state.bound_text}")


def refuse_prompt_decode(slots: np.ndarray, index: np.ndarray, length: np.ndarray) -> None:
    """Raise for the first request whose decode index lies inside its prompt: :meth:`decode` serves
    indices past the prompt only (on every path)."""
    i = int(np.argmax(index < length))
    raise MRopeError(
        f"decode: slots[{i}] = {slots[i]} is at index {index[i]}, inside its prompt of {length[i]} "
        "tokens; decode() serves indices past the prompt, fill() any index"
    )
