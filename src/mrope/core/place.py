"""Place blocks: give every block its base position, and say where text resumes after it.

A block's base is the position the next text token would have had. This is the only place where
the conventions differ and the only place that says where text resumes after a block:

- grid blocks (:class:`Blocks`): text resumes at ``max(block) + 1`` under ``"vllm"`` (vLLM, SGLang,
  transformers <= 5.2, the models' original code) and at ``base + max(H', W')`` under
  ``"transformers"`` (transformers >= 5.3). A handful of numpy calls over blocks (never tokens): a
  block's base is its index in the row plus the *shift* (``advance - num_tokens``) of the blocks
  before it in the row. :func:`place_rows` is the same rule on Python ints for one prompt with a few
  blocks (the fast path of :mod:`mrope.core.one_row`).
- items laid out by their family (:class:`ItemBlocks`, the Omni thinkers: audio runs, video and audio
  interleaved, fractional time): text resumes after the item's last piece, at ``last + 1``
  (transformers' thinker code; no other convention exists for them). A scan over items (never tokens
  or frames) in the positions' arithmetic: Python ints, or float32 for Qwen3-Omni, each sum rounded
  once as transformers' float32 code rounds it (a text run's base advances by its length; ``cuts`` are
  where transformers starts a new run of text, so that the next run's base is rounded there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import MRopeError
from .blocks import BlockRow, Blocks, empty_blocks
from .segments import SegmentBuilder
from .workspace import workspace

COMPATS = ("vllm", "transformers")
#: the arithmetic of scaled video time ``trunc(k * interval)``: the dtype the interval and the product
#: are held in. ``"float32"``: transformers and SGLang; ``"float64"``: vLLM (numpy float64)
VIDEO_TIMES = {"float32": np.float32, "float64": np.float64}
# largest position mrope hands out: int32 consumers (kernels, caches) hold every position up to it
MAX_POSITION = 2**31 - 1


def check_compat(compat: str) -> str:
    if compat not in COMPATS:
        raise MRopeError(f"compat must be one of {COMPATS}, got {compat!r}")
    return compat


def check_video_time(video_time: str) -> str:
    if not isinstance(video_time, str) or video_time not in VIDEO_TIMES:
        raise MRopeError(f"video_time must be one of {tuple(VIDEO_TIMES)}, got {video_time!r}")
    return video_time


def check_max_position(row_lengths: np.ndarray, delta: np.ndarray) -> None:
    """Refuse a stream in which a row's largest position, ``row length + delta - 1``, passes
    :data:`MAX_POSITION`: the rule every family's positions follow, checked on the whole prompt (items
    each within bounds can pass it together). O(rows)."""
    last = row_lengths + delta - 1
    over = last > MAX_POSITION
    if over.any():
        r = int(over.argmax())
        where = "the prompt's" if last.size == 1 else f"row {r}'s"
        raise MRopeError(
            f"{where} largest position would be {last[r]:.0f}, past the largest position mrope hands out, "
            f"{MAX_POSITION} (2**31 - 1): its vision items span more positions than an int32 holds"
        )


def time_interval(step: np.ndarray | float, video_time: str) -> np.ndarray:
    """Temporal index step(s) held in ``video_time``'s dtype (rounded once from ``step``), for
    :func:`temporal_index`."""
    return np.asarray(step, dtype=VIDEO_TIMES[video_time])


@dataclass(slots=True)
class Placed:
    """Blocks with their bases, plus each row's delta (``max(positions) + 1 - row length``)."""

    blocks: Blocks
    base: np.ndarray  # (num_blocks,) int64, position of the block's (t=0, h=0, w=0) corner
    next_base: np.ndarray  # (num_blocks,) int64, base of the text that follows the block
    row_starts: np.ndarray  # (num_rows,) int64, stream index where each row starts (ascending)
    delta: np.ndarray  # (num_rows,) int64 (float32 for float items)
    #: the segments of items that their family lays out, written as they were placed (else None)
    segments: SegmentBuilder | None = None


#: a family's layout of item ``i`` at base ``base``: writes its segments to the builder and returns its
#: largest position and the position of its last piece (text resumes at ``last + 1``)
ItemLayout = Callable[[int, Any, SegmentBuilder], tuple[Any, Any]]


@dataclass(slots=True)
class ItemBlocks:
    """Blocks that their family lays out at their base (the Omni thinkers), sorted by ``start``.

    Item ``i`` holds the stream tokens ``[start[i], end[i])`` of row ``row[i]``; ``layout`` writes its
    segments. ``floats``: positions are float32 (Qwen3-Omni). ``cuts``: sorted stream indices, outside
    every item, where a new run of text starts (float32: its base is rounded there)."""

    start: np.ndarray
    end: np.ndarray
    row: np.ndarray
    layout: ItemLayout
    floats: bool = False
    cuts: np.ndarray | None = None


def temporal_index(frame: np.ndarray, interval: np.ndarray | np.floating) -> np.ndarray:
    """``trunc(frame * interval)``, the product in the interval's dtype: float32 as transformers and
    SGLang compute scaled time, float64 as vLLM does (see :data:`VIDEO_TIMES`)."""
    return (frame.astype(interval.dtype) * interval).astype(np.int64)


def place(
    blocks: Blocks | ItemBlocks, row_starts: np.ndarray, row_lengths: np.ndarray, compat: str
) -> Placed:
    """Bases of every block and delta of every row, in one scan over blocks (not tokens).

    Rows are ranges ``[row_starts[r], row_starts[r] + row_lengths[r])`` of the stream, in order and
    disjoint; the stream may hold tokens outside every row (padding). ``compat`` applies to grid blocks
    (see the module docstring).
    """
    if isinstance(blocks, ItemBlocks):
        return _place_items(blocks, row_starts, row_lengths)
    start = blocks.start
    if start.size == 0:
        return Placed(blocks, start, start, row_starts, np.zeros(row_starts.size, dtype=np.int64))
    hw_extent = np.maximum(blocks.height, blocks.width)
    # how far a block reaches past its base on any axis (scaled time may reach past h and w)
    extent = np.maximum(temporal_index(blocks.frames - 1, blocks.interval) + 1, hw_extent)
    advance = extent if compat == "vllm" else hw_extent
    shift = np.zeros(start.size + 1, dtype=np.int64)
    np.cumsum(advance - blocks.num_tokens, out=shift[1:])
    row = row_starts.searchsorted(start, side="right") - 1
    first_block = np.empty(row_starts.size + 1, dtype=np.int64)  # index of each row's first block
    first_block[:-1] = start.searchsorted(row_starts)
    first_block[-1] = start.size
    shift_before_row = shift[first_block]
    base = start - row_starts[row] + shift[:-1] - shift_before_row[row]
    next_base = base + advance
    delta = shift_before_row[1:] - shift_before_row[:-1]  # text resumes after each block: the row's end
    if compat != "vllm":  # a block may reach past the row's last text position
        row_last = row_lengths + delta - 1
        np.maximum.at(row_last, row, base + extent - 1)
        delta = row_last + 1 - row_lengths
    check_max_position(row_lengths, delta)
    return Placed(blocks, base, next_base, row_starts, delta)


def _place_items(items: ItemBlocks, row_starts: np.ndarray, row_lengths: np.ndarray) -> Placed:
    """:func:`place` of items laid out by their family: one step per item and cut (see the module
    docstring), the segments written to a :class:`SegmentBuilder` as the items are placed."""
    num = np.float32 if items.floats else int
    out = SegmentBuilder(np.float64 if items.floats else np.int64)
    delta = np.zeros(row_starts.size, dtype=np.float32 if items.floats else np.int64)
    base: np.ndarray = np.zeros(items.start.size, dtype=out.dtype)
    next_base: np.ndarray = np.zeros(items.start.size, dtype=out.dtype)
    bare = np.ones(row_starts.size, dtype=bool)
    bare[items.row] = False
    out.text(row_starts[bare], 0)  # rows of text only: positions 0 .. L-1, delta 0
    cuts = [] if items.cuts is None else items.cuts.tolist()
    cut = 0  # the next cut to apply
    row_of, starts, ends = items.row.tolist(), items.start.tolist(), items.end.tolist()
    text_start: int = 0  # the scan's state: where the current text run starts, its base, the row's max
    text_base: Any = num(0)
    row_max: Any = num(-1)

    def text_until(stop: int) -> None:
        """Text runs from ``text_start`` up to ``stop``: one per cut; the next base advances by each
        run's length."""
        nonlocal cut, text_start, text_base, row_max
        while True:
            end = stop
            if cut < len(cuts) and cuts[cut] < stop:
                end = cuts[cut]
                cut += 1
            if end > text_start:
                out.text(text_start, text_base)
                row_max = max(row_max, num(text_base + (end - text_start - 1)))
                text_base = num(text_base + (end - text_start))
                text_start = end
            if end == stop:
                return

    for i, r in enumerate(row_of):
        if i == 0 or row_of[i - 1] != r:  # a new row: text from its start, at position 0
            text_start, text_base, row_max = int(row_starts[r]), num(0), num(-1)
            while cut < len(cuts) and cuts[cut] < text_start:
                cut += 1
        text_until(starts[i])
        base[i] = text_base
        peak, last = items.layout(i, text_base, out)
        row_max = max(row_max, peak)
        text_start, text_base = ends[i], num(last + 1)  # text resumes after the item's last piece
        next_base[i] = text_base
        if i + 1 == len(row_of) or row_of[i + 1] != r:  # the row's trailing text
            text_until(int(row_starts[r] + row_lengths[r]))
            delta[r] = num(num(row_max + 1) - int(row_lengths[r]))
    check_max_position(row_lengths, delta)
    return Placed(empty_blocks(), base, next_base, row_starts, delta, out)


#: a placed block of one row: start, end, base, frames, height, width, time index of each frame (None
#: for one frame)
PlacedRow = tuple[int, int, int, int, int, int, "np.ndarray | None"]


def place_rows(rows: Sequence[BlockRow], length: int, compat: str) -> tuple[list[PlacedRow], int, int]:
    """Each block placed (see ``PlacedRow``), the shift of the text after the last block (text at index
    ``j`` has position ``j + shift``), and the delta of the row.

    :func:`place`'s rule for grid blocks on Python ints (the one-prompt fast path of :mod:`.one_row`,
    for a few blocks: numpy costs more per call than this loop); tests compare the two."""
    placed = []
    shift, reach = 0, -1  # text at index j has position j + shift; the largest block position
    vllm = compat == "vllm"
    for start, frames, height, width, interval in rows:
        num_tokens = frames * height * width
        base = start + shift
        if frames == 1:
            t = None
            extent = height if height > width else width
        else:
            t = temporal_index(workspace.range(frames), interval)
            extent = max(int(t[-1]) + 1, height, width)
        if base + extent > reach:
            reach = base + extent - 1
        shift += (extent if vllm else max(height, width)) - num_tokens
        placed.append((start, start + num_tokens, base, frames, height, width, t))
    last = length - 1 + shift
    delta = (last if last > reach else reach) + 1 - length
    if length + delta > MAX_POSITION + 1:
        check_max_position(np.array([length]), np.array([delta]))
    return placed, shift, delta
