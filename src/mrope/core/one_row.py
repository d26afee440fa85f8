"""The fast path for one prompt with a few vision blocks: placed by :func:`mrope.core.place.place_rows`,
then rendered or turned into segments in one pass over the blocks on Python ints.

numpy costs about a microsecond per call whatever the size, so for the usual prompt (a handful of
images or videos) the per-call overhead of the vectorized pipeline (place, build_segments,
render_all) dominates. This pass follows the same rule on Python ints, with a few numpy writes per
text run and per block (never per frame or token); tests compare it with the vectorized pipeline.

Blocks come as :data:`BlockRow` tuples, from a family's parser (:func:`block_rows` of its
:class:`Blocks`) or built directly from the items' placeholder offsets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from .blocks import BlockRow, Blocks, empty_blocks
from .place import place_rows
from .segments import FIELDS, HW0, IS_TEXT, ORIGIN, START, T0, WIDTH, SegmentTable, render_offsets
from .workspace import workspace

FEW_BLOCKS = 8  # up to this many blocks the one-row pass beats the vectorized pipeline


def block_rows(blocks: Blocks) -> list[BlockRow]:
    """The blocks as :data:`BlockRow` tuples (Python ints), in stream order."""
    n = blocks.start.size
    return list(
        zip(
            blocks.start.tolist(),
            blocks.frames.tolist(),
            blocks.height.tolist(),
            blocks.width.tolist(),
            blocks.interval,
            [0] * n if blocks.rounding is None else blocks.rounding.tolist(),
            strict=True,
        )
    )


#: the planes kept between calls, in bytes (the oldest is dropped first); a plane larger than a quarter of
#: this is built for its call only
PLANE_CACHE_BYTES = 4 << 20
_planes: dict[tuple[int, int], np.ndarray] = {}
_planes_bytes = 0
_planes_lock = threading.Lock()


def _plane(height: int, width: int) -> np.ndarray:
    """The positions of one frame's tokens at base 0, (3, height * width), read-only: the render formula
    of a frame segment (t0 = hw0 = 0), which a block translates by its base (the formula is affine in
    t0 and hw0); from a cache of planes bounded by ``PLANE_CACHE_BYTES``."""
    global _planes_bytes
    key = (height, width)
    plane = _planes.get(key)  # a hit takes no lock (a dict read is atomic) and keeps the order
    if plane is not None:
        return plane
    offset = np.arange(height * width, dtype=np.int64)
    plane = np.array(render_offsets(offset, np.zeros_like(offset), 0, width, 0))
    plane.flags.writeable = False
    if plane.nbytes <= PLANE_CACHE_BYTES // 4:
        with _planes_lock:
            if key not in _planes:
                _planes[key] = plane
                _planes_bytes += plane.nbytes
                while _planes_bytes > PLANE_CACHE_BYTES:
                    _planes_bytes -= _planes.pop(next(iter(_planes))).nbytes
    return plane


def render_one_row(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[np.ndarray, int]:
    """Positions (3, length) int64 and the delta of a stream that is one row of ``length`` tokens with
    the vision blocks ``rows`` (sorted, not overlapping, inside the row)."""
    placed, shift, delta = place_rows(rows, length, compat)
    out = np.empty((3, length), dtype=np.int64)
    # a text run at base b is the formula's b + o on all rows: copied from one cached arange (a copy
    # costs less than adding a scalar); no position reaches length + delta
    arange = workspace.range(length + delta)
    cursor = 0
    for start, end, base, frames, height, width, t in placed:
        if start > cursor:
            out[:, cursor:start] = arange[cursor + base - start : base]
        if t is None:  # (an add into a temporary and a copy cost less than an add into the strided view)
            out[:, start:end] = _plane(height, width) + base
        else:  # out is C-contiguous: these reshapes are views
            grid = (frames, height * width)
            np.add(t[:, None], base, out=out[0, start:end].reshape(grid))
            np.add(_plane(height, width)[1:, None], base, out=out[1:, start:end].reshape(2, *grid))
        cursor = end
    if length > cursor:
        out[:, cursor:length] = arange[cursor + shift : length + shift]
    return out, delta


def segments_one_row(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[SegmentTable, int]:
    """The segment table and the delta of a stream that is one row of ``length`` tokens with the vision
    blocks ``rows``. The table has no empty segment (``compact``, when ``length > 0``) and carries the
    ``origin`` row (equal to ``start``), the form a :class:`mrope.serving.PositionTable` stores."""
    placed, shift, delta = place_rows(rows, length, compat)
    flat: list[int] = []  # the FIELDS of each segment, segment after segment
    pieces: list[np.ndarray] = []  # (6, n) runs of segments, in order (multi-frame blocks)
    cursor = 0
    for start, end, base, frames, height, width, t in placed:
        if start > cursor:
            text_base = cursor + base - start
            flat += (cursor, text_base, text_base, 1, 1, cursor)
        if t is None:
            flat += (start, base, base, width, 0, start)
        else:  # one segment per frame, written by numpy
            if flat:
                pieces.append(_columns(flat))
                flat = []
            frame = np.empty((6, frames), dtype=np.int64)
            first = frame[START]
            np.multiply(workspace.range(frames), height * width, out=first)
            first += start
            np.add(t, base, out=frame[T0])
            frame[HW0] = base  # scalar fills: a nested list would be converted to an array first
            frame[WIDTH] = width
            frame[IS_TEXT] = 0
            frame[ORIGIN] = first
            pieces.append(frame)
        cursor = end
    if length > cursor or not (placed or length):  # a prompt of no tokens: one empty text segment
        flat += (cursor, cursor + shift, cursor + shift, 1, 1, cursor)
    if flat:
        pieces.append(_columns(flat))
    data = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=1)
    return SegmentTable(data, length, compact=length > 0), delta


def _columns(flat: list[int]) -> np.ndarray:
    """Segments given field after field (:data:`FIELDS`), segment after segment, as a (6, n) array (a
    view)."""
    return np.array(flat, dtype=np.int64).reshape(-1, len(FIELDS)).T


def blocks_from_rows(rows: Sequence[BlockRow]) -> Blocks:
    """:class:`Blocks` of :data:`BlockRow` tuples (for the vectorized pipeline when they are many)."""
    if not rows:
        return empty_blocks()
    start, frames, height, width, interval, rounding = zip(*rows, strict=True)
    grid = np.array([frames, height, width], dtype=np.int64)
    return Blocks(
        np.array(start, dtype=np.int64),
        grid[0],
        grid[1],
        grid[2],
        np.array(interval, dtype=np.result_type(*interval)),
        grid.prod(axis=0),
        np.array(rounding, dtype=np.int8) if any(rounding) else None,
    )
