"""Render positions from a table of segments (:mod:`mrope.core.segments`: the fields and the formula).

:func:`build_segments` writes the table of placed blocks (text runs and single video frames);
:func:`render_all` renders every token of the stream and :func:`render` any token indices. Both find
each token's segment and apply :func:`mrope.core.segments.render_formula`: ``render_all`` finds
them with a running count over the (sorted, nonempty) segments, chunk by chunk, into reused scratch
rows; ``render`` with :func:`mrope.core.renderer.find_segments`; both render with
:func:`mrope.core.renderer.render_at`. Where numba imports (unless ``MROPE_NUMBA=0``),
``render_all`` of a large int64 table runs the compiled render of :mod:`mrope.core.compiled` instead:
one pass that walks the segments (see there why), the same formula.

Tables may carry the ``ORIGIN`` row (offsets count from it instead of ``START``: a Qwen2.5-Omni video
chunk that starts inside a frame; an audio run whose tokens are split by video frames, Qwen3-Omni), and
float64 fields holding float32 values (Qwen3-Omni's fractional positions): positions are then float32,
each rounded once from the exact float64 sum, as transformers' float32 arithmetic gives them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .kernels import compiled_kernel
from .place import Placed, temporal_index
from .renderer import find_segments, render_at
from .segments import START, SegmentBuilder, SegmentTable
from .workspace import workspace

__all__ = ["SegmentBuilder", "SegmentTable", "build_segments", "render", "render_all"]


def build_segments(placed: Placed, length: int) -> SegmentTable:
    """The segment table of a placed stream of ``length`` tokens.

    Grid blocks: one text segment per row start and per block end (possibly empty), one segment per
    video frame. The first row's text segment is extended back to index 0 so that the table covers the
    stream; tokens outside every row (padding) get meaningless positions that the caller masks. Items
    that their family lays out (:class:`mrope.core.place.ItemBlocks`) were written to the builder as
    they were placed."""
    if placed.segments is not None:
        return placed.segments.table(length)
    blocks = placed.blocks
    row_starts = placed.row_starts
    n = blocks.start.size
    frames = blocks.frames
    num_frames = int(frames.sum())
    if num_frames == n:  # every block is a single frame (images, timestamped video frames)
        frame_start, frame_base, frame_t0, frame_width = blocks.start, placed.base, placed.base, blocks.width
    else:
        frame_block = np.arange(n).repeat(frames)
        first_frame = frames.cumsum() - frames
        frame = np.arange(num_frames) - first_frame.repeat(frames)
        frame_base = placed.base[frame_block]
        frame_start = blocks.start[frame_block] + frame * (blocks.height * blocks.width)[frame_block]
        rounding = None if blocks.rounding is None else blocks.rounding[frame_block]
        frame_t0 = frame_base + temporal_index(frame, blocks.interval[frame_block], rounding)
        frame_width = blocks.width[frame_block]
    out = SegmentBuilder(np.int64)
    # at one index: a block's (empty) trailing text, then the next row's start, then a frame
    out.text(blocks.start + blocks.num_tokens, placed.next_base)
    row_start, row_base = row_starts.copy(), np.zeros(row_starts.size, dtype=np.int64)
    row_start[:1], row_base[:1] = 0, -row_starts[:1]  # the first row's text reaches back to index 0
    out.text(row_start, row_base)
    out.add(frame_start, frame_t0, frame_base, frame_width, 0)
    return out.table(length)


_CHUNK = 1 << 16  # tokens rendered per pass: bounds the scratch memory
#: from this many tokens ``render_all`` takes the compiled render where it may (below it the numpy passes
#: cost a few tens of microseconds, and a short call never imports numba)
COMPILED_FROM = 1 << 12


def compiled_render() -> Any:
    """:func:`mrope.core.compiled.render_table`, or ``None`` where numba does not import or
    ``MROPE_NUMBA=0`` (:func:`mrope.core.kernels.compiled_kernel`)."""
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
        from .compiled import render_table as kernel
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
