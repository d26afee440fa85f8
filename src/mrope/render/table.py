"""A segment table's positions: of every token of the stream (:func:`render_all`) or of any token
indices (:func:`render`), through the numpy backend's lookup and render (:mod:`mrope.render.numpy`).

``render_all`` finds each token's segment with a running count over the (sorted, nonempty) segments,
chunk by chunk, into reused scratch rows; where numba imports (unless ``MROPE_NUMBA=0``) a large int64
table takes the numba backend's one-pass render instead (:func:`mrope.render.numba.render_table`).

Tables may carry the ``ORIGIN`` row (offsets count from it instead of ``START``: Qwen2.5-Omni, Qwen3-Omni),
and float64 fields holding float32 values (Qwen3-Omni's fractional positions): positions are then
float32, each rounded once from the exact float64 sum, as transformers' float32 arithmetic gives them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.segments import START, SegmentTable
from ..core.workspace import workspace
from .choose import compiled_kernel
from .numpy import find_segments, render_at

__all__ = ["render", "render_all"]


_CHUNK = 1 << 16  # tokens rendered per pass: bounds the scratch memory
#: from this many tokens ``render_all`` takes the compiled render where it may (below it the numpy passes
#: cost a few tens of microseconds, and a short call never imports numba)
COMPILED_FROM = 1 << 12


def compiled_render() -> Any:
    """:func:`mrope.render.numba.render_table`, or ``None`` where numba does not import or
    ``MROPE_NUMBA=0`` (:func:`mrope.render.choose.compiled_kernel`)."""
    return compiled_kernel("render_table")


def render_all(
    table: SegmentTable, out: np.ndarray | None = None, *, use_compiled: bool | None = None
) -> np.ndarray:
    """Positions (3, length) of every token of the stream, into ``out`` if given: int64, or float32 for
    a float table (see the module docstring).

    ``use_compiled``: ``None`` takes the compiled render for int64 tables of at least
    :data:`COMPILED_FROM` tokens where it is available; ``False`` the numpy passes; ``True`` the
    compiled render (int64 tables; ImportError without numba)."""
    if table.is_float:
        return render(table, np.arange(table.length, dtype=np.int64), out)
    if out is None:
        out = np.empty((3, table.length), dtype=np.int64)
    if use_compiled is None:
        kernel = compiled_render() if table.length >= COMPILED_FROM else None
    elif use_compiled:
        from .numba import render_table as kernel
    else:
        kernel = None
    if kernel is not None:
        return kernel(out, table.data, table.origin_row, table.length)
    starts = table.start
    nonempty = np.empty(starts.size, dtype=bool)
    np.less(starts[:-1], starts[1:], out=nonempty[:-1])
    nonempty[-1] = starts[-1] < table.length
    # drop empty segments: each token's segment is then a running count (a sorted walk)
    data = table.data[:, nonempty]
    starts = data[START]
    for begin in range(0, table.length, _CHUNK):
        end = min(begin + _CHUNK, table.length)
        rows, arange = workspace.get(end - begin)
        segment, index = rows[0], rows[1]
        first, last = starts.searchsorted([begin, end], side="right") - 1
        segment.fill(0)
        segment[starts[first + 1 : last + 1] - begin] = 1
        segment[0] = first
        np.cumsum(segment, out=segment)
        np.add(arange, begin, out=index)
        render_at(data, segment, index, out[:, begin:end], origin_row=table.origin_row, scratch=rows[2:])
    return out


def render(table: SegmentTable, index: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Positions (3, N) of arbitrary stream indices (``index`` (N,) int64), into ``out`` if given:
    int64, or float32 for a float table (see the module docstring)."""
    if out is None:
        out = np.empty((3, index.size), dtype=np.float32 if table.is_float else np.int64)
    segment = find_segments(table.start, index)
    return render_at(table.data, segment, index.astype(np.int64), out, origin_row=table.origin_row)
