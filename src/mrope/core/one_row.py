"""The fast path for one prompt with a few vision blocks: place and render in one pass over blocks.

numpy costs about a microsecond per call whatever the size, so for the usual prompt (a handful of
images or videos) the per-call overhead of the vectorized pipeline (place, build_segments,
render_all) dominates. This pass follows the same rule on Python ints, with a few numpy writes per
text run and per block (never per frame or token); tests compare it with the vectorized pipeline.
"""

from __future__ import annotations

import functools

import numpy as np

from .blocks import Blocks
from .place import temporal_index
from .render import _workspace

FEW_BLOCKS = 8  # up to this many blocks the one-row pass beats the vectorized pipeline


@functools.lru_cache(maxsize=256)
def _plane(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """h and w offsets of one frame's tokens, (height * width,) each, read-only."""
    h = np.arange(height, dtype=np.int64).repeat(width)
    w = np.tile(np.arange(width, dtype=np.int64), height)
    h.flags.writeable = w.flags.writeable = False
    return h, w


def render_one_row(blocks: Blocks, length: int, compat: str) -> tuple[np.ndarray, int]:
    """Positions (3, length) int64 and the delta of a stream that is one row of ``length`` tokens."""
    out = np.empty((3, length), dtype=np.int64)
    arange = _workspace.range(length)
    shift, cursor, reach = 0, 0, -1  # text at index j has position j + shift
    fields = (
        blocks.start.tolist(),
        blocks.num_tokens.tolist(),
        blocks.frames.tolist(),
        blocks.height.tolist(),
        blocks.width.tolist(),
    )
    for b, (start, num_tokens, frames, height, width) in enumerate(zip(*fields, strict=True)):
        end, base = start + num_tokens, start + shift
        if start > cursor:
            np.add(arange[cursor:start], shift, out=out[:, cursor:start])
        h, w = _plane(height, width)
        grid = (frames, height * width)  # out is C-contiguous: these reshapes are views
        if frames == 1:
            out[0, start:end] = base
            t_last = 0
        else:
            t = temporal_index(arange[:frames], blocks.interval[b])
            np.add(t[:, None], base, out=out[0, start:end].reshape(grid))
            t_last = int(t[-1])
        np.add(h, base, out=out[1, start:end].reshape(grid))
        np.add(w, base, out=out[2, start:end].reshape(grid))
        extent = max(t_last + 1, height, width)
        advance = extent if compat == "vllm" else max(height, width)
        reach = max(reach, base + extent - 1)
        shift += advance - num_tokens
        cursor = end
    if length > cursor:
        np.add(arange[cursor:length], shift, out=out[:, cursor:length])
    return out, max(length - 1 + shift, reach) + 1 - length
