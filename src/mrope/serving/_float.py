"""The numpy step of a float32 :class:`mrope.serving.PositionTable` (Qwen3-Omni's fractional positions).

The same lookup and render as the int64 step (:mod:`._numpy_step`, through :mod:`mrope.core.renderer`),
with ``t0``, ``hw0`` and the deltas read from the state's float64 arrays (:class:`._state.SlotState`;
float32 values). Each position is the render formula in float64 (``t0 + offset``, ``hw0 + q``, ``hw0 +
r + offset``, exact) rounded once to float32, as :mod:`mrope.core.render` renders
``family.positions()``; past the prompt ``float64(index) + delta`` rounded once, which for indices
below 2**24 equals transformers' float32 ``index + delta`` (a float32 sum computed in float64 and
rounded to float32 is the correctly rounded float32 sum). :class:`._numpy_step.NumpyStep` calls it
once the step's arrays are checked.
"""

from __future__ import annotations

import numpy as np

from ..core.renderer import find_segments, render_at, render_tail
from ._checks import FLOAT32, check_max, check_out, refuse_prompt_decode, validate
from ._state import KEY, PLEN, SlotState


def fill_float(
    state: SlotState,
    out: np.ndarray,
    slots: np.ndarray,
    nc: np.ndarray,
    ns: np.ndarray,
    num_tokens: int | None,
    seq_lens: np.ndarray | None = None,
) -> int:
    """:meth:`PositionTable.fill` of a float32 table (arguments already int64 arrays of one length);
    ``seq_lens``: :meth:`PositionTable.decode`'s (``nc`` is ``seq_lens - 1``), named in its errors."""
    decode = seq_lens is not None
    if slots.shape[0] == 0:
        return check_out(out, 0, num_tokens, FLOAT32)
    column = slots + 1  # out-of-range slots read the free columns at both ends (mode="clip")
    info = state.info.take(column, axis=1, mode="clip")
    num = validate(state.max_slots, slots, nc, ns, info, state.max_index, seq_lens)
    if decode and (nc < info[PLEN]).any():
        refuse_prompt_decode(slots, nc, info[PLEN])
    check_out(out, num, num_tokens, FLOAT32)
    delta = state.deltas.take(column, mode="clip")
    # the last index's position (the int64 step's rule), as float32 rounds it (float32 holds the integers
    # below the table's bound, 2**24 at most: a position that rounds to it is refused)
    check_max((nc + ns - 1 + delta).astype(np.float32), state)
    if num == 0:
        return 0
    col0 = np.cumsum(ns)
    col0 -= ns
    index = np.repeat(nc - col0, ns)
    index += np.arange(num)
    dest = out[:, :num]
    if (nc >= info[PLEN]).all():  # every token past its prompt: the decode tail
        render_tail(dest, index, np.repeat(delta, ns))
        return num
    pool = state.pool
    key = index + np.repeat(info[KEY], ns)
    seg = find_segments(pool.keys[: pool.top], key)
    render_at(pool.data, seg, key, dest, floats=pool.floats)
    return num
