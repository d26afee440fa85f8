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
  (transformers' thinker code; no other convention exists for them), or, for items that keep the
  index (``keeps_index``: HunYuan-VL, whose images do not shift text), at its index in the row.
  A scan over items (never tokens or frames) in the positions' arithmetic: Python ints, or float32
  for Qwen3-Omni, each sum rounded once as transformers' float32 code rounds it (a text run's base
  advances by its length; ``cuts`` are where transformers starts a new run of text, so that the next
  run's base is rounded there).

A block's scaled video time, ``trunc(k * interval)``, is computed here too (:func:`temporal_index`), in
the arithmetic its family chose (:class:`TimeArithmetic`: vLLM's, SGLang's, or transformers' in the dtype
of the seconds, float16 and bfloat16 included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import MRopeError
from .blocks import BlockRow, Blocks, empty_blocks
from .segments import SegmentBuilder, SegmentTable
from .workspace import arrays, workspace

COMPATS = ("vllm", "transformers")
#: how a block's scaled time is rounded beyond the dtype its interval is held in (:class:`Blocks`'s
#: ``rounding``): not at all, or every value to float16 or bfloat16 (held in float32, which holds each of
#: their values and each product of two of them exactly, so that one rounding of the float32 result is
#: the narrow type's own rounding)
NO_ROUNDING, FLOAT16, BFLOAT16 = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TimeArithmetic:
    """How scaled video time ``trunc(k * rate * seconds)`` is computed (Qwen2.5-VL: ``rate`` is
    ``tokens_per_second``): the interval ``rate * seconds`` is multiplied in ``multiply`` (both cast to it)
    and held in ``held``; frame ``k`` is cast to ``held`` and multiplied by it; with a ``rounding``, the
    interval, ``k`` and the product are each rounded to that type (see :func:`time_interval`,
    :func:`scaled_time`)."""

    name: str
    multiply: type
    held: type
    rounding: int = NO_ROUNDING


#: the arithmetic of scaled video time under ``compat="vllm"``, the family setting ``video_time``,
#: whatever the dtype of the seconds: ``"float32"``, the interval rounded once to float32 from the float64
#: product, then a float32 product (SGLang's float32 seconds); ``"float64"``: vLLM's (numpy float64)
VIDEO_TIMES = {
    "float32": TimeArithmetic("float32", np.float64, np.float32),
    "float64": TimeArithmetic("float64", np.float64, np.float64),
}
#: transformers' arithmetic (``compat="transformers"``), named by the dtype of the seconds tensor: torch
#: multiplies in that dtype (``tokens_per_second * seconds[i]``, then ``arange(T) * interval``), float16
#: and bfloat16 through float32 (each result rounded once to the narrow type)
TRANSFORMERS_TIMES = {
    "float64": VIDEO_TIMES["float64"],
    "float32": TimeArithmetic("float32", np.float32, np.float32),
    "float16": TimeArithmetic("float16", np.float32, np.float32, FLOAT16),
    "bfloat16": TimeArithmetic("bfloat16", np.float32, np.float32, BFLOAT16),
}
#: the largest position mrope hands out, an inclusive bound (``max_position`` elsewhere is an exclusive
#: one): int32 consumers (kernels, caches) hold every position up to it
LARGEST_POSITION = 2**31 - 1


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
    :data:`LARGEST_POSITION`: the rule every family's positions follow, checked on the whole prompt (items
    each within bounds can pass it together). O(rows)."""
    last = row_lengths + delta - 1
    over = last > LARGEST_POSITION
    if over.any():
        r = int(over.argmax())
        where = "the prompt's" if last.size == 1 else f"row {r}'s"
        raise MRopeError(
            f"{where} largest position would be {last[r]:.0f}, past the largest position mrope hands out, "
            f"{LARGEST_POSITION} (2**31 - 1): its vision items span more positions than an int32 holds"
        )


def transformers_time(dtype: str, rate: float) -> TimeArithmetic:
    """transformers' arithmetic of scaled time for seconds of ``dtype`` (see :data:`TRANSFORMERS_TIMES`;
    ``"int"``: integer seconds, or none given, which transformers takes as the Python int 1): a floating
    dtype's own; integers times an int ``rate`` stay integers (exact: float64 holds every such product
    up to 2**53), times a float ``rate`` they become float32 (torch's default dtype)."""
    if dtype == "int":
        dtype = "float64" if isinstance(rate, (int, np.integer)) else "float32"
    arithmetic = TRANSFORMERS_TIMES.get(dtype)
    if arithmetic is None:
        raise MRopeError(
            f"second_per_grid_ts has dtype {dtype}: transformers' time arithmetic is emulated for "
            f"{', '.join(TRANSFORMERS_TIMES)} and integer seconds only (compat='vllm' takes any)"
        )
    return arithmetic


def time_interval(rate: float, seconds: np.ndarray, arithmetic: TimeArithmetic) -> np.ndarray:
    """The temporal index step ``rate * seconds`` of each video in ``arithmetic`` (held in its ``held``
    dtype, rounded as it rounds), for :func:`temporal_index`."""
    multiply, held = arithmetic.multiply, arithmetic.held
    step = np.multiply(seconds, rate, dtype=multiply)  # both cast to ``multiply`` first
    if held is not multiply:
        step = step.astype(held)
    return narrow(step, arithmetic.rounding) if arithmetic.rounding else step


def _round_float16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # past float16's range: inf, as torch gives (the family refuses it)
        return x.astype(np.float16).astype(np.float32)


_U16, _U1, _HALF_ULP, _HIGH_BITS = np.uint32(16), np.uint32(1), np.uint32(0x7FFF), np.uint32(0xFFFF0000)


def _round_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (to nearest, ties to even: torch's rounding), as float32: the
    upper 16 bits of the rounded bit pattern (the values are finite or inf, never NaN here)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = bits >> _U16  # in place from here: a few tiny arrays, where each new one costs more
    rounded &= _U1  # the last bit kept: ties go to even
    rounded += _HALF_ULP
    rounded += bits
    rounded &= _HIGH_BITS
    return rounded.view(np.float32)


def narrow(x: np.ndarray, rounding: np.ndarray | int) -> np.ndarray:
    """float32 ``x`` rounded as ``rounding`` says (:data:`FLOAT16`, :data:`BFLOAT16` or none), one code
    for all or one per element."""
    x = np.asarray(x, dtype=np.float32)
    if not isinstance(rounding, np.ndarray):
        return _round_float16(x) if rounding == FLOAT16 else _round_bfloat16(x) if rounding else x
    out = np.where(rounding == FLOAT16, _round_float16(x), x)
    return np.where(rounding == BFLOAT16, _round_bfloat16(x), out)


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
    every item, where a new run of text starts (float32: its base is rounded there). ``keeps_index``:
    text keeps its index in the row (an item's base is its first token's index, text after it resumes
    at the index of its end), whatever the layout's last piece."""

    start: np.ndarray
    end: np.ndarray
    row: np.ndarray
    layout: ItemLayout
    floats: bool = False
    cuts: np.ndarray | None = None
    keeps_index: bool = False


def scaled_time(
    frame: np.ndarray, interval: np.ndarray | np.floating, rounding: np.ndarray | int | None = None
) -> np.ndarray:
    """``frame * interval``, the frame cast to the interval's dtype and the product held in it; with a
    ``rounding`` (one code, or one per element; none: ``None`` or 0), the frame and the product rounded
    as it says (the interval is already): the arithmetic of :class:`TimeArithmetic`."""
    k = frame.astype(interval.dtype)
    if rounding is None or not (rounding.any() if isinstance(rounding, np.ndarray) else rounding):
        return k * interval
    return narrow(narrow(k, rounding) * interval, rounding)


def temporal_index(
    frame: np.ndarray, interval: np.ndarray | np.floating, rounding: np.ndarray | int | None = None
) -> np.ndarray:
    """``trunc(frame * interval)`` in the arithmetic of the interval's dtype and ``rounding`` (see
    :func:`scaled_time`): float32 as SGLang computes scaled time, float64 as vLLM does, float16 or
    bfloat16 (held in float32) as transformers does on such seconds (see :data:`TRANSFORMERS_TIMES`)."""
    return scaled_time(frame, interval, rounding).astype(np.int64)


def frame_times(frames: int, interval: np.floating, rounding: int = 0) -> np.ndarray:
    """The time index of each of a block's ``frames`` frames, :func:`temporal_index` of ``0 ... frames -
    1`` (read-only; kept in :data:`mrope.core.workspace.arrays`: a video's size and rate repeat across
    requests)."""
    # (the interval's type is its arithmetic's dtype: equal values of two dtypes are two keys)
    return arrays.get(("times", frames, type(interval), interval, rounding), _build_frame_times)


def _build_frame_times(frames: int, _: type, interval: np.floating, rounding: int) -> np.ndarray:
    return temporal_index(workspace.range(frames), interval, rounding)


def text_advance(extent: Any, hw_extent: Any, compat: str) -> Any:
    """Where text resumes after a grid block, counted from its base: the block's ``extent`` (``max(block)
    + 1``: ``"vllm"``) or ``max(H', W')`` (``"transformers"``), of ints or arrays alike. The one place
    the two conventions differ (see the module docstring)."""
    return extent if compat == "vllm" else hw_extent


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
    extent = np.maximum(temporal_index(blocks.frames - 1, blocks.interval, blocks.rounding) + 1, hw_extent)
    advance = text_advance(extent, hw_extent, compat)
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
        # text resumes after the item's last piece, or at its own index
        resume = text_base + (ends[i] - starts[i]) if items.keeps_index else last + 1
        text_start, text_base = ends[i], num(resume)
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
    for start, frames, height, width, interval, rounding in rows:
        num_tokens = frames * height * width
        hw_extent = height if height > width else width
        if frames == 1:
            t = None
            extent = hw_extent
        else:
            t = frame_times(frames, interval, rounding)
            extent = max(int(t[-1]) + 1, hw_extent)
        advance = text_advance(extent, hw_extent, compat)
        base, shift, reach = place_block(start, num_tokens, extent, advance, shift, reach)
        placed.append((start, start + num_tokens, base, frames, height, width, t))
    delta = row_delta(length, shift, reach)
    check_row_bound(length, delta)
    return placed, shift, delta


def place_block(
    start: int, num_tokens: int, extent: int, advance: int, shift: int, reach: int
) -> tuple[int, int, int]:
    """A block of ``num_tokens`` tokens at stream index ``start``, spanning ``extent`` positions from its
    base, the text after it resuming ``advance`` positions after its base (:func:`text_advance`), placed
    after text at ``index + shift`` and blocks whose largest position is ``reach``: its base, the shift of
    the text after it, and the largest position so far. On Python ints; numba compiles it too
    (:mod:`mrope.render.numba`)."""
    base = start + shift
    end = base + extent - 1
    return base, shift + advance - num_tokens, end if end > reach else reach


def row_delta(length: int, shift: int, reach: int) -> int:
    """The delta of a row of ``length`` tokens whose trailing text is at ``index + shift`` and whose blocks
    reach ``reach``: its largest position + 1 - ``length``. On Python ints; numba compiles it too."""
    last = length - 1 + shift
    return (last if last > reach else reach) + 1 - length


def check_row_bound(length: int, delta: int) -> None:
    """:func:`check_max_position` of one row, on Python ints (numpy only when it is passed)."""
    if length + delta > LARGEST_POSITION + 1:
        check_max_position(np.array([length]), np.array([delta]))


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
