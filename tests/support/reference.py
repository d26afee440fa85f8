"""A slow, obviously-correct reference of the M-RoPE position rule: one Python loop over tokens.

Used by the core tests (``tests/core``) as the oracle for :func:`mrope.core.place` and
:mod:`mrope.render`. It states the rule directly, as the peers' loops do:

- a text token takes the next position on all three rows, then the next position advances by 1;
- a vision block of T frames, H' x W' (merged), starts at ``base`` = the next position; token
  (k, i, j) gets ``(base + trunc(k * interval), base + i, base + j)``, the product in float32;
- after a block the next position is ``max(block) + 1`` (``"vllm"``: vLLM, SGLang, transformers
  <= 5.2) or ``base + max(H', W')`` (``"transformers"``: transformers >= 5.3);
- a row's delta is ``max(positions) + 1 - row length`` (0 for an empty row).
"""

from __future__ import annotations

import numpy as np


def temporal_index(k: int, interval: float) -> int:
    """``trunc(k * interval)`` with both factors and the product in float32."""
    return int(np.float32(k) * np.float32(interval))


def row_positions(length: int, blocks: list[tuple[int, int, int, int, float]], compat: str):
    """Positions of one row of ``length`` tokens whose vision blocks are ``blocks``.

    ``blocks``: (start index in the row, T, H', W', interval), sorted by start, not overlapping.

    Returns ``(positions, delta, bases, next_bases)``: positions as three lists (t, h, w) of ints,
    the row's delta, and per block its base and the position the following text starts at.
    """
    if compat not in ("vllm", "transformers"):
        raise ValueError(compat)
    t_row: list[int] = []
    h_row: list[int] = []
    w_row: list[int] = []
    bases: list[int] = []
    next_bases: list[int] = []
    next_pos = 0
    index = 0
    for start, frames, height, width, interval in blocks:
        while index < start:  # text before the block
            t_row.append(next_pos)
            h_row.append(next_pos)
            w_row.append(next_pos)
            next_pos += 1
            index += 1
        base = next_pos
        largest = base
        for k in range(frames):
            for i in range(height):
                for j in range(width):
                    t, h, w = base + temporal_index(k, interval), base + i, base + j
                    t_row.append(t)
                    h_row.append(h)
                    w_row.append(w)
                    largest = max(largest, t, h, w)
                    index += 1
        next_pos = largest + 1 if compat == "vllm" else base + max(height, width)
        bases.append(base)
        next_bases.append(next_pos)
    while index < length:  # trailing text
        t_row.append(next_pos)
        h_row.append(next_pos)
        w_row.append(next_pos)
        next_pos += 1
        index += 1
    if index != length:
        raise ValueError(f"blocks run past the row: {index} tokens for a row of {length}")
    delta = max(t_row + h_row + w_row) + 1 - length if length else 0
    return [t_row, h_row, w_row], delta, bases, next_bases


def stream_positions(rows: list[tuple[int, list[tuple[int, int, int, int, float]]]], compat: str):
    """:func:`row_positions` of rows laid end to end: ``(positions (3, total) int64, deltas,
    bases, next_bases)``, the last three flat over rows and blocks in stream order."""
    pos = [[], [], []]
    deltas, bases, next_bases = [], [], []
    for length, blocks in rows:
        p, d, b, nb = row_positions(length, blocks, compat)
        for axis in range(3):
            pos[axis] += p[axis]
        deltas.append(d)
        bases += b
        next_bases += nb
    return np.array(pos, dtype=np.int64).reshape(3, -1), np.array(deltas, dtype=np.int64), bases, next_bases


#: the dict config of a Qwen2.5-VL as its checkpoints have it (no transformers needed)
QWEN2_5_VL_DICT = {
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {"tokens_per_second": 2, "spatial_merge_size": 2},
}
