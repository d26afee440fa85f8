"""The compiled step of an int64 :class:`mrope.PositionTable`: one pass over the step's tokens (numba).

The numpy step costs ~20 numpy calls (~1 us each, whatever the batch), most of a step of a few hundred
decodes; this kernel does the whole step in one call:

1. validation, the numpy step's rules (the slot in range and live, counts >= 0, the last index below the
   table's bound and its position below ``max_position``, decode past the prompt, ``out``'s columns
   sharing no memory, ``num_tokens`` equal to N). A bad step returns -1 before anything is written: the
   table then runs the numpy step (:mod:`.host_step`), whose checks raise the error, so both paths
   refuse the same input with the same message;
2. the positions, composed of the numba backend's primitives (:mod:`mrope.render.numba`): a request's
   prompt tokens walk its segments from the one :func:`find_segment` finds (:func:`render_run`, the
   quotient and remainder kept by counting), its tokens past the prompt :func:`render_tail`.

float32 tables (Qwen3-Omni) keep the numpy step. numba's on-disk cache entry is named after a digest of
what the kernel compiles (:func:`mrope._numba_cache.cached_njit`), the field and info rows it bakes in
included. The table calls :func:`step_for`'s compiled function directly, not through numba's dispatcher,
whose type resolution of ten arguments costs more than the step in an engine's cold caches; one
compilation per kind of index arrays (int32 or int64, any strides) serves every call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import from_dtype, types

from .._numba_cache import cached_njit
from ..core.segments import HW0, IS_TEXT, ORIGIN, START, T0, WIDTH
from ..render.numba import find_segment, render_run, render_tail
from ._state import DEAD, DELTA, KEY, PLEN


@cached_njit(nogil=True, boundscheck=False)
def fill(out, slots, first, count, decode, info, data, max_position, max_index, num_tokens):  # noqa: ANN001, ANN201
    """Positions of one step into ``out``; returns N, or -1 (nothing written) for bad input.

    ``info``, ``data``: the table's per-request info and its pool's entries (:mod:`._pool`: the rows of
    :mod:`mrope.core.segments`, keys in ``START``; one array handed over, not views: each array argument
    costs a step about a microsecond of unboxing in an engine's cold caches).
    ``decode``: ``first`` holds seq_lens (index ``first - 1``, one token each), ``count`` is unused.
    ``max_position``, ``num_tokens``: -1 for none."""
    n = slots.shape[0]
    if first.shape[0] != n or count.shape[0] != n or out.shape[0] != 3:
        return -1
    keys = data[START]
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
    # no two elements of out[:, :num] share memory (the rule of mrope._arrays.overlapping)
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
                o = base + index - data[ORIGIN, seg]
                col = render_run(
                    out,
                    col,
                    seg_end - index,
                    o,
                    data[WIDTH, seg],
                    data[T0, seg],
                    data[HW0, seg],
                    data[IS_TEXT, seg],
                )
                index = seg_end
                seg += 1
        delta = info[DELTA, column]
        if index < end:  # past the prompt: the decode tail, text from index 0 with base delta
            col = render_tail(out, col, end - index, index, delta)
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
