"""Segments for the position table: from a family's segment table, or recovered from explicit positions.

Both return a (5, S) int64 array with the rows of :data:`mrope.core.render._FIELDS` (start, t0, hw0,
width, is_text), sorted by start, without empty segments, covering ``0 .. L-1``.
"""

from __future__ import annotations

import numpy as np

from .._errors import MRopeError
from ..core.render import SegmentTable, render_all

#: The dtype of positions and of every table array. One place, so that fractional positions
#: (Qwen3-Omni, float32) can be added later by changing the table's dtype here.
POSITION_DTYPE = np.int64


def nonempty(table: SegmentTable) -> np.ndarray:
    """The segments of ``table`` that hold at least one token."""
    data = table.data
    length = np.diff(data[0], append=table.length)
    return np.ascontiguousarray(data[:, length > 0])


def from_positions(positions: np.ndarray, *, row: int) -> np.ndarray:
    """Segments that render exactly ``positions`` (3, L): text runs and vision frames.

    Runs of ``(+1, +1, +1)`` steps on equal rows are text; runs of ``(0, 0, +1)`` steps are rows of a
    frame; consecutive frame rows of one width, one t, one first w and h increasing by 1 make a frame.
    The result is rendered and compared with ``positions``: anything else raises :class:`MRopeError`.
    """
    length = positions.shape[1]
    t, h, w = positions
    d = np.diff(positions, axis=1)
    text_like = (t == h) & (h == w)
    row_step = (d[0] == 0) & (d[1] == 0) & (d[2] == 1)
    wrap = (d[0] == 0) & (d[1] == 1)  # next row of a frame: only vision tokens step like this
    text_step = (d[0] == 1) & (d[1] == 1) & (d[2] == 1) & text_like[1:]
    # a text-like token followed by a frame step starts that frame; one reached by a frame step ends it
    text_step[:-1] &= ~(row_step[1:] | wrap[1:])
    text_step[1:] &= ~(row_step[:-1] | wrap[:-1])
    run_start = np.flatnonzero(np.concatenate([[True], ~(row_step | text_step)]))
    run_len = np.diff(run_start, append=length)
    run_text = np.zeros(run_start.size, dtype=bool)
    long = run_len > 1
    run_text[long] = text_step[run_start[long]]

    # merge frame rows into frames
    rt, rh, rw = t[run_start], h[run_start], w[run_start]
    joins = np.zeros(run_start.size, dtype=bool)
    joins[1:] = (
        ~run_text[1:]
        & ~run_text[:-1]
        & (rt[1:] == rt[:-1])
        & (run_len[1:] == run_len[:-1])
        & (rw[1:] == rw[:-1])
        & (rh[1:] == rh[:-1] + 1)
    )
    first = ~joins
    seg_start = run_start[first]
    data = np.empty((5, seg_start.size), dtype=POSITION_DTYPE)
    data[0] = seg_start
    data[1] = rt[first]
    data[2] = rh[first]
    data[3] = np.where(run_text[first], 1, run_len[first])
    data[4] = run_text[first]
    if not np.array_equal(render_all(SegmentTable(data, length)), positions):
        raise MRopeError(
            f"positions of row {row} are not text runs and vision frames (t0, hw0 + o // W, hw0 + o % W) "
            "of the M-RoPE rule; register the request with add() from its prompt instead"
        )
    return data
