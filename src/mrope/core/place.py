"""Place blocks: give every vision block its base position, under a named convention.

This is the only place where the conventions differ. After a vision block, text resumes at
``max(block) + 1`` under ``"vllm"`` (vLLM, SGLang, transformers <= 5.2, the models' original code)
and at ``base + max(H', W')`` under ``"transformers"`` (transformers >= 5.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import MRopeError
from .blocks import Blocks

COMPATS = ("vllm", "transformers")


def check_compat(compat: str) -> str:
    if compat not in COMPATS:
        raise MRopeError(f"compat must be one of {COMPATS}, got {compat!r}")
    return compat


@dataclass(frozen=True)
class Placed:
    """Blocks with their bases, plus each row's delta (``max(positions) + 1 - row length``)."""

    blocks: Blocks
    base: np.ndarray  # (num_blocks,) int64, position of the block's (t=0, h=0, w=0) corner
    next_base: np.ndarray  # (num_blocks,) int64, base of the text that follows the block
    row_offsets: np.ndarray  # (num_rows + 1,) int64, stream index where each row starts
    delta: np.ndarray  # (num_rows,) int64


def temporal_index(frame: np.ndarray, interval: np.ndarray) -> np.ndarray:
    """``trunc(frame * interval)`` in float32, as the peers compute scaled time."""
    return (frame.astype(np.float32) * interval).astype(np.int64)


def place(blocks: Blocks, row_offsets: np.ndarray, compat: str) -> Placed:
    """Bases of every block and delta of every row, in one scan over blocks (not tokens)."""
    num_rows = row_offsets.size - 1
    row_length = np.diff(row_offsets)
    n = blocks.start.size
    if n == 0:
        return Placed(blocks, blocks.start, blocks.start, row_offsets, np.zeros(num_rows, dtype=np.int64))

    start, height, width = blocks.start, blocks.height, blocks.width
    end = start + blocks.num_tokens
    row = np.searchsorted(row_offsets, start, side="right") - 1
    # extent: how far the block reaches past its base on any axis (t may reach past h and w)
    extent = np.maximum(temporal_index(blocks.frames - 1, blocks.interval), np.maximum(height, width) - 1) + 1
    advance = extent if compat == "vllm" else np.maximum(height, width)

    first_in_row = np.ones(n, dtype=bool)
    first_in_row[1:] = row[1:] != row[:-1]
    previous_end = np.empty(n, dtype=np.int64)
    previous_end[0] = 0
    previous_end[1:] = end[:-1]
    previous_end = np.where(first_in_row, row_offsets[row], previous_end)
    text_before = start - previous_end
    step = text_before + advance
    before = np.cumsum(step) - step
    row_first = np.maximum.accumulate(np.where(first_in_row, np.arange(n), 0))
    base = before - before[row_first] + text_before
    next_base = base + advance

    # a row's last position: its trailing text, or the largest block corner reach
    last_in_row = np.ones(n, dtype=bool)
    last_in_row[:-1] = row[:-1] != row[1:]
    final_base = row_length.copy()
    lr = row[last_in_row]
    final_base[lr] = next_base[last_in_row] + row_offsets[lr + 1] - end[last_in_row]
    row_max = final_base - 1
    np.maximum.at(row_max, row, base + extent - 1)
    return Placed(blocks, base, next_base, row_offsets, row_max + 1 - row_length)
