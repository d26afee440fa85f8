"""Segments recovered from explicit positions: :func:`segments_of`, the inverse of the render.

An engine's own positions (:meth:`mrope.PositionTable.add_positions`) and a family whose rule is not
placed blocks (its positions computed directly) are kept as segments this way.
"""

from __future__ import annotations

import numpy as np

from ..core.segments import HW0, IS_TEXT, ORIGIN, START, T0, WIDTH, SegmentTable
from .table import render_all


def segments_of(positions: np.ndarray, *, floats: bool = False) -> SegmentTable | None:
    """A segment table (with its ``ORIGIN`` row) that renders exactly ``positions`` (3, L), L >= 1: text
    runs, vision frames and, for integer positions, any token; None where there is none (fractional
    positions that are not text runs and frames). ``floats``: the table holds float64 fields (float32
    tables of the serving pool).

    Runs of ``(+1, +1, +1)`` steps on equal rows are text; runs of ``(0, 0, +1)`` steps are rows of a
    frame; consecutive frame rows of one width, one t, one first w and h increasing by 1 make a frame.
    A frame whose first h and w differ (``d = h - w``) is held by its segment's ``origin``: with
    ``hw0 = min(h, w)``, offsets counted from ``d * W`` tokens before the frame (``d > 0``) or, for one
    row, from ``-d`` tokens after its start with the row widened to ``W - d`` (the origin may lie before
    index 0). Integer positions of any shape are so held (at worst a segment per token: a token is a row
    of one); the render is compared with ``positions``.
    """
    length = positions.shape[1]
    t, h, w = positions
    d = np.diff(positions, axis=1)
    fractional = positions.dtype.kind == "f"
    if fractional:
        # float32 arithmetic makes steps of fractional positions 1 +- a few ulp: runs are found from
        # the rounded steps, then the render below checks every position exactly
        near = np.rint(d)
        d = np.where(np.abs(d - near) < 0.25, near, 0.5)
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

    # merge frame rows into frames (a frame whose h starts below its w stays one segment per row)
    rt, rh, rw = t[run_start], h[run_start], w[run_start]
    joins = np.zeros(run_start.size, dtype=bool)
    joins[1:] = (
        ~run_text[1:]
        & ~run_text[:-1]
        & (rt[1:] == rt[:-1])
        & (run_len[1:] == run_len[:-1])
        & (rw[1:] == rw[:-1])
        & (np.abs(rh[1:] - rh[:-1] - 1) < 0.25 if fractional else rh[1:] == rh[:-1] + 1)
    )
    if not fractional:
        joins[1:] &= rh[:-1] >= rw[:-1]
    first = ~joins
    seg_start = run_start[first]
    data = np.empty((ORIGIN + 1, seg_start.size), dtype=np.float64 if floats else np.int64)
    data[START] = seg_start
    data[T0] = rt[first]
    data[IS_TEXT] = run_text[first]
    width = np.where(run_text[first], 1, run_len[first])
    if fractional:
        data[HW0] = rh[first]
        data[ORIGIN] = seg_start
    else:  # h and w from one base, min(h, w): the surplus of either is an offset before the origin
        surplus = rh[first] - rw[first]
        data[HW0] = np.minimum(rh[first], rw[first])
        width = np.where(surplus < 0, width - surplus, width)
        data[ORIGIN] = seg_start - np.where(surplus > 0, surplus * width, -surplus)
    data[WIDTH] = width
    table = SegmentTable(data, length)
    return table if np.array_equal(render_all(table), positions) else None
