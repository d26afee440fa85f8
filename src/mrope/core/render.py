"""Render positions from a table of segments: text runs and single video frames.

A segment starting at stream index ``start`` renders token ``j`` (offset ``o = j - start``) as

- text (``is_text = 1``, ``width = 1``): ``base + o`` on all three rows;
- one frame of a vision block: ``(t0, hw0 + o // width, hw0 + o % width)``.

Both come from one formula, so rendering is a handful of numpy calls whatever the mix:
``t = t0 + o * is_text``, ``h = hw0 + o // width``, ``w = hw0 + o % width + o * is_text``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .place import Placed, temporal_index

_FIELDS = ("start", "t0", "hw0", "width", "is_text")


@dataclass(frozen=True)
class SegmentTable:
    """Segments sorted by start, as a (5, num_segments) int64 array of rows ``_FIELDS``.

    ``length`` is the number of tokens the table covers (the stream length); the last segment runs
    to it. Memory is O(blocks + frames), not O(tokens).
    """

    data: np.ndarray
    length: int

    @property
    def start(self) -> np.ndarray:
        return self.data[0]

    @property
    def num_segments(self) -> int:
        return self.data.shape[1]


def build_segments(placed: Placed) -> SegmentTable:
    """The segment table of placed blocks: one text segment per row start and per block end
    (possibly empty), one segment per video frame."""
    blocks = placed.blocks
    row_starts = placed.row_offsets[:-1]
    num_rows, n = row_starts.size, blocks.start.size
    frames = blocks.frames
    num_frames = int(frames.sum())
    frame_block = np.repeat(np.arange(n), frames)
    frame = np.arange(num_frames) - np.repeat(np.cumsum(frames) - frames, frames)
    plane = (blocks.height * blocks.width)[frame_block]

    num_text = num_rows + n
    data = np.empty((5, num_text + num_frames), dtype=np.int64)
    start, t0, hw0, width, is_text = data
    start[:num_rows] = row_starts
    start[num_rows:num_text] = blocks.start + blocks.num_tokens
    start[num_text:] = blocks.start[frame_block] + frame * plane
    t0[:num_rows] = 0
    t0[num_rows:num_text] = placed.next_base
    hw0[:num_text] = t0[:num_text]
    hw0[num_text:] = placed.base[frame_block]
    t0[num_text:] = hw0[num_text:] + temporal_index(frame, blocks.interval[frame_block])
    width[:num_text] = 1
    width[num_text:] = blocks.width[frame_block]
    is_text[:num_text] = 1
    is_text[num_text:] = 0
    # empty text segments sort before the frame that starts at the same index
    order = np.argsort(start * 2 + (1 - is_text), kind="stable")
    return SegmentTable(np.ascontiguousarray(data[:, order]), int(placed.row_offsets[-1]))


def _apply(rep: np.ndarray, offset: np.ndarray, out: np.ndarray) -> None:
    """Write positions of tokens whose segment fields are ``rep`` (5, N) and offsets ``offset``."""
    q, r = np.divmod(offset, rep[3])
    offset *= rep[4]
    np.add(rep[1], offset, out=out[0])
    np.add(rep[2], q, out=out[1])
    np.add(rep[2], r, out=out[2])
    out[2] += offset


def render_all(table: SegmentTable, out: np.ndarray | None = None) -> np.ndarray:
    """Positions (3, length) of every token of the stream, int64."""
    data = table.data
    lengths = np.diff(data[0], append=table.length)
    rep = np.repeat(data, lengths, axis=1)
    if out is None:
        out = np.empty((3, table.length), dtype=np.int64)
    offset = np.arange(table.length, dtype=np.int64)
    offset -= rep[0]
    _apply(rep, offset, out)
    return out


def render(table: SegmentTable, index: np.ndarray, out: np.ndarray) -> None:
    """Positions of arbitrary stream indices (``index`` (N,) int64) into ``out`` (3, N)."""
    segment = np.searchsorted(table.data[0], index, side="right") - 1
    rep = table.data[:, segment]
    _apply(rep, index - rep[0], out)
