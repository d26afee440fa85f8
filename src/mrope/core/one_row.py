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

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .blocks import BlockRow, Blocks, empty_blocks
from .place import frame_times, place_rows
from .segments import FIELDS, ORIGIN, START, T0, WIDTH, SegmentTable, render_offsets
from .workspace import arrays, workspace

FEW_BLOCKS = 8  # up to this many blocks the one-row pass beats the vectorized pipeline
#: :func:`render_one_row` copies text runs from one arange of ``length + delta`` entries while that is at
#: most this many times the prompt's tokens (memory O(tokens)); past it, each run is computed on its own
_NEAR = 2


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


def _plane(height: int, width: int) -> np.ndarray:
    """The positions of one frame's tokens at base 0, (3, height * width), read-only: the render formula
    of a frame segment (t0 = hw0 = 0), which a block translates by its base (the formula is affine in
    t0 and hw0); kept in the bounded :data:`mrope.core.workspace.arrays`."""
    return arrays.get(("plane", height, width), _build_plane)


def _build_plane(height: int, width: int) -> np.ndarray:
    offset = np.arange(height * width, dtype=np.int64)
    return np.array(render_offsets(offset, np.zeros_like(offset), 0, width, 0))


def _frame_block(frames: int, frame_tokens: int, width: int, interval: object, rounding: int) -> np.ndarray:
    """The segments (fields, frames) of a block of ``frames`` frames of ``frame_tokens`` tokens, ``width``
    wide, at stream index 0 and base 0, its frame times in ``T0`` (a block adds its start and base),
    read-only, kept in :data:`mrope.core.workspace.arrays` (a video's size and rate repeat)."""
    key = ("block", frames, frame_tokens, width, type(interval), interval, rounding)
    return arrays.get(key, _build_block)


def _build_block(
    frames: int, frame_tokens: int, width: int, _: type, interval: object, rounding: int
) -> np.ndarray:
    block = np.zeros((len(FIELDS), frames), dtype=np.int64)
    block[START] = block[ORIGIN] = np.arange(frames, dtype=np.int64) * frame_tokens
    block[T0] = frame_times(frames, interval, rounding)
    block[WIDTH] = width
    return block


def render_one_row(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[np.ndarray, int]:
    """Positions (3, length) int64 and the delta of a stream that is one row of ``length`` tokens with
    the vision blocks ``rows`` (sorted, not overlapping, inside the row)."""
    placed, shift, delta = place_rows(rows, length, compat)
    out = np.empty((3, length), dtype=np.int64)
    # a text run at base b is the formula's b + o on all rows: copied from one cached arange (a copy
    # costs less than adding a scalar) where positions stay near the indices (no position reaches
    # length + delta); where they reach far past them (a video of a large second_per_grid_ts: delta up
    # to 2**31 for a few tokens) that arange would be O(largest position), so each run adds its first
    # position to an arange of its tokens instead: memory and time O(tokens) either way
    near = length + delta <= _NEAR * length
    arange = workspace.range(length + delta if near else length)
    cursor = 0
    for start, end, base, frames, height, width, t in placed:
        if start > cursor:
            first = cursor + base - start
            out[:, cursor:start] = arange[first:base] if near else arange[: start - cursor] + first
        if t is None:  # (an add into a temporary and a copy cost less than an add into the strided view)
            out[:, start:end] = _plane(height, width) + base
        else:  # out is C-contiguous: these reshapes are views
            grid = (frames, height * width)
            np.add(t[:, None], base, out=out[0, start:end].reshape(grid))
            np.add(_plane(height, width)[1:, None], base, out=out[1:, start:end].reshape(2, *grid))
        cursor = end
    if length > cursor:
        first = cursor + shift
        out[:, cursor:length] = arange[first : length + shift] if near else arange[: length - cursor] + first
    return out, delta


class OneRowLayout(NamedTuple):
    """The segment table of one row, before it is written anywhere (:func:`layout_one_row`): a consumer
    writes it straight into its own array (:class:`mrope.serving.PositionTable`'s pool) or takes
    :meth:`table`. ``num`` segments in all, none empty when ``length > 0``, in stream order:

    - ``flat``: the :data:`~mrope.core.segments.FIELDS` of each text run and one-frame block, one after
      another (Python ints), and ``singles`` their columns in the table;
    - ``frame_runs``: each block of several frames as (its first column, the translation of its fields,
      its cached block (fields, frames) at stream index 0 and base 0, read-only).
    """

    flat: list[int]
    singles: list[int]
    frame_runs: list[tuple[int, tuple[int, int, int, int, int, int], np.ndarray]]
    num: int
    length: int

    def table(self) -> SegmentTable:
        """The layout as a :class:`SegmentTable` of its own, (fields, segments) (``compact`` when the row
        has tokens)."""
        if not self.frame_runs:
            data = np.array(self.flat, dtype=np.int64).reshape(self.num, len(FIELDS)).T
        else:
            data = np.empty((len(FIELDS), self.num), dtype=np.int64)  # every segment is written below
            for i, column in enumerate(self.singles):
                data[:, column] = self.flat[i * len(FIELDS) : (i + 1) * len(FIELDS)]
            for column, offset, block in self.frame_runs:  # (an array operand costs less than a tuple)
                translation = np.array(offset, dtype=np.int64)[:, None]
                np.add(block, translation, out=data[:, column : column + block.shape[1]])
        return SegmentTable(data, self.length, compact=self.length > 0)


def layout_one_row(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[OneRowLayout, int]:
    """The segments (as a :class:`OneRowLayout`) and the delta of a stream that is one row of ``length``
    tokens with the vision blocks ``rows``; the segments carry the ``origin`` field (equal to
    ``start``), the form a :class:`mrope.serving.PositionTable` stores. A text run or a one-frame block
    is one segment of Python ints, a block of several frames its cached block (:func:`_frame_block`)
    plus its start and base."""
    placed, shift, delta = place_rows(rows, length, compat)
    flat: list[int] = []  # text runs and one-frame blocks: the FIELDS of each segment, one after another
    singles: list[int] = []  # their columns in the table
    frame_runs: list[tuple[int, tuple[int, int, int, int, int, int], np.ndarray]] = []
    cursor = num = 0  # num: the table's segments so far
    for i, (start, end, base, frames, height, width, t) in enumerate(placed):  # placed[i] is rows[i]
        if start > cursor:
            text_base = cursor + base - start
            flat += (cursor, text_base, text_base, 1, 1, cursor)
            singles.append(num)
            num += 1
        if t is None:
            flat += (start, base, base, width, 0, start)
            singles.append(num)
            num += 1
        else:
            interval, rounding = rows[i][4:]
            block = _frame_block(frames, height * width, width, interval, rounding)
            frame_runs.append((num, (start, base, base, 0, 0, start), block))
            num += frames
        cursor = end
    if length > cursor or not (placed or length):  # a prompt of no tokens: one empty text segment
        flat += (cursor, cursor + shift, cursor + shift, 1, 1, cursor)
        singles.append(num)
        num += 1
    return OneRowLayout(flat, singles, frame_runs, num, length), delta


def segments_one_row(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[SegmentTable, int]:
    """The segment table and the delta of a stream that is one row of ``length`` tokens with the vision
    blocks ``rows``: :func:`layout_one_row`'s, as a table. The table has no empty segment (``compact``,
    when ``length > 0``) and carries the ``origin`` row (equal to ``start``)."""
    layout, delta = layout_one_row(rows, length, compat)
    return layout.table(), delta


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
