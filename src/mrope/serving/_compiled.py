"""The compiled step of an int64 :class:`mrope.serving.PositionTable`: one pass over the step's tokens.

vLLM calls ``fill`` every engine step; its numpy path costs ~20 numpy calls (~1 us each, whatever
the batch), which is most of a step of a few hundred decodes. This module's kernel, compiled once by
numba (``cache=True``: later processes load it from disk), does the whole step in one call:

1. validation: the index arrays of one length, ``out`` of three rows; for every request: the slot is
   in range and live, ``num_computed >= 0``, ``num_scheduled >= 0``, the last index below the
   table's bound, (decode) that index past the prompt, the last index's position below
   ``max_position``, and ``out`` has the columns, no two of its elements sharing memory (and
   ``num_tokens`` is N). A bad step returns -1 before anything is written: :class:`PositionTable`
   then runs the numpy step (:mod:`._numpy_step`), whose checks (:mod:`._checks`) raise the error,
   so both paths refuse the same input with the same message;
2. the positions: a request's tokens past its prompt get ``index + delta``; its prompt tokens walk
   its segments in order from the one a binary search over the pool's keys finds
   (:func:`mrope.core.compiled.find_segment`, the numba lookup of :mod:`mrope.core.renderer`).

Two renders exist, this one and the numpy step's (:mod:`._numpy_step`), because they find segments
differently: numpy searches every token's key at once (``searchsorted``) and divides every
offset (``divmod``), this kernel walks the few segments a request's tokens cross and keeps the
quotient and remainder by counting: the segment walk of the compiled render
(:func:`mrope.core.compiled.write_run`, the formula of :mod:`mrope.core.segments` compiled over
scalars), inlined. The tests check that both paths write the same positions. float32 tables
(Qwen3-Omni) keep the numpy path.

numba's on-disk cache entry is named after a digest of what the kernel compiles
(:func:`mrope._numba_cache.cached_njit`): its source, the segment walk and formula it calls, and the
values it bakes in from other modules (the info and field rows, ``DEAD``), so a change to any of them
compiles anew instead of loading stale code.

numba is optional (every vLLM install has it): this module imports it, and is imported only by
:func:`mrope.serving.table.compiled_step`, which returns ``None`` where numba is missing (or the
environment variable ``MROPE_NUMBA`` is ``0``) so that the table uses numpy. ``slots``,
``num_computed`` and ``num_scheduled`` may be int32 or int64 (vLLM's are int32): they are read as
they are, not copied.

The table calls :func:`step_for`'s compiled function directly, not through numba's dispatcher: the
dispatcher resolves the types of the ten arguments at every call, which with an engine's cold
caches (a model's forward pass ran between two steps) costs more than the step itself. One
compilation per kind of index arrays serves every array of any strides (layout ``A``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import from_dtype, types

from .._numba_cache import cached_njit
from ..core.compiled import find_segment, write_run, write_tail
from ._pool import FHW0, FIELDS, FIS_TEXT, FT0, FWIDTH, KEYS, OKEY
from ._state import DEAD, DELTA, KEY, PLEN


@cached_njit(nogil=True, boundscheck=False)
def fill(out, slots, first, count, decode, info, data, max_position, max_index, num_tokens):  # noqa: ANN001, ANN201
    """Positions of one step into ``out``; returns N, or -1 (nothing written) for bad input.

    ``info``, ``data``: the table's per-request info and its pool's entries (:mod:`._pool`: row ``KEYS``
    the keys, rows ``FIELDS`` the fields; one array handed over, not two views: each array argument
    costs a step about a microsecond of unboxing in an engine's cold caches).
    ``decode``: ``first`` holds seq_lens (index ``first - 1``, one token each), ``count`` is unused.
    ``max_position``, ``num_tokens``: -1 for none."""
    n = slots.shape[0]
    if first.shape[0] != n or count.shape[0] != n or out.shape[0] != 3:
        return -1
    keys, fields = data[KEYS], data[FIELDS]
    max_slots = info.shape[1] - 2
    num = 0
    beyond = False  # a last index's position reaches max_position (an error only if N > 0)
    for i in range(n):
        slot = np.int64(slots[i])
        if slot < 0 or slot >= max_slots or info[PLEN, slot + 1] == DEAD:
            return -1
        if decode:
            start, size = np.int64(first[i]) - 1, np.int64(1)
        else:
            start, size = np.int64(first[i]), np.int64(count[i])
        # the last index below max_index (``max_index - size`` cannot wrap: size >= 0)
        if start < 0 or size < 0 or start > max_index - size:
            return -1
        if decode and start < info[PLEN, slot + 1]:  # decode serves indices past the prompt only
            return -1
        if max_position >= 0 and start + size - 1 + info[DELTA, slot + 1] >= max_position:
            beyond = True  # every request's last index, scheduled tokens or not (the numpy rule)
        num += size
    if num > out.shape[1] or (num_tokens >= 0 and num_tokens != num) or beyond:
        return -1
    # no two elements of out[:, :num] share memory (the rule of mrope._backends.overlapping)
    row, column, item = abs(out.strides[0]), abs(out.strides[1]), out.itemsize
    if num == 1:
        if row < item:
            return -1
    elif num > 1:
        if column <= row:
            if column < item or row < column * (num - 1) + item:
                return -1
        elif row < item or column < 2 * row + item:
            return -1
    col = 0
    for i in range(n):
        column = np.int64(slots[i]) + 1
        if decode:
            index = np.int64(first[i]) - 1
            end = index + 1
        else:
            index = np.int64(first[i])
            end = index + np.int64(count[i])
        length = info[PLEN, column]
        if index < length:  # prompt tokens: walk the segments from the first index's
            base = info[KEY, column]
            key = base + index
            seg = find_segment(keys, key)  # the keys are sorted, keys[0] = 0
            stop = min(end, length)
            while index < stop:
                seg_end = min(stop, keys[seg + 1] - base)  # the decode tail follows the last one
                o = base + index - fields[OKEY, seg]
                col = write_run(
                    out,
                    col,
                    seg_end - index,
                    o,
                    fields[FWIDTH, seg],
                    fields[FT0, seg],
                    fields[FHW0, seg],
                    fields[FIS_TEXT, seg],
                )
                index = seg_end
                seg += 1
        delta = info[DELTA, column]
        if index < end:  # past the prompt: the decode tail, text from index 0 with base delta
            col = write_tail(out, col, end - index, index, delta)
    return num


def step_for(slots: np.dtype, first: np.dtype, count: np.dtype) -> Callable[..., int]:
    """:func:`fill` compiled for index arrays of these dtypes (int32 or int64) and arrays of any strides,
    as the compiled function itself (no dispatch: the caller checks the arguments' kinds and keeps
    it by the dtypes; numba keeps the compilation, so a second table's call compiles nothing)."""
    signature = (
        types.Array(types.int64, 2, "A"),
        *(types.Array(from_dtype(dtype), 1, "A") for dtype in (slots, first, count)),
        types.boolean,
        types.Array(types.int64, 2, "A"),
        types.Array(types.int64, 2, "A"),
        types.int64,
        types.int64,
        types.int64,
    )
    fill.compile(signature)
    return fill.get_overload(signature)
