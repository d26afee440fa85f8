"""Place blocks: give every vision block its base position, under a named convention.

This is the only place where the conventions differ. After a vision block, text resumes at
``max(block) + 1`` under ``"vllm"`` (vLLM, SGLang, transformers <= 5.2, the models' original code)
and at ``base + max(H', W')`` under ``"transformers"`` (transformers >= 5.3).

Everything here is a handful of numpy calls over blocks (never tokens): a block's base is its
index in the row plus the *shift* (``advance - num_tokens``) of the blocks before it in the row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import MRopeError
from .blocks import Blocks

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
    delta: np.ndarray  # (num_rows,) int64


def temporal_index(frame: np.ndarray, interval: np.ndarray | np.floating) -> np.ndarray:
    """``trunc(frame * interval)``, the product in the interval's dtype: float32 as transformers and
    SGLang compute scaled time, float64 as vLLM does (see :data:`VIDEO_TIMES`)."""
    return (frame.astype(interval.dtype) * interval).astype(np.int64)


def place(blocks: Blocks, row_starts: np.ndarray, row_lengths: np.ndarray, compat: str) -> Placed:
    """Bases of every block and delta of every row, in one scan over blocks (not tokens).

    Rows are ranges ``[row_starts[r], row_starts[r] + row_lengths[r])`` of the stream, in order and
    disjoint; the stream may hold tokens outside every row (padding).
    """
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
