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
    if num_frames == n:  # every block is a single frame (images, timestamped video frames)
        frame_start, frame_base, frame_t0, frame_width = blocks.start, placed.base, placed.base, blocks.width
    else:
        frame_block = np.arange(n).repeat(frames)
        first_frame = frames.cumsum() - frames
        frame = np.arange(num_frames) - first_frame.repeat(frames)
        frame_base = placed.base[frame_block]
        frame_start = blocks.start[frame_block] + frame * (blocks.height * blocks.width)[frame_block]
        frame_t0 = frame_base + temporal_index(frame, blocks.interval[frame_block])
        frame_width = blocks.width[frame_block]

    num_text = num_rows + n
    data = np.empty((5, num_text + num_frames), dtype=np.int64)
    data[:, :num_rows] = [[0], [0], [0], [1], [1]]
    data[0, :num_rows] = row_starts
    text = data[:, num_rows:num_text]
    text[0] = blocks.start + blocks.num_tokens
    text[1] = text[2] = placed.next_base
    text[3:] = 1
    frame_data = data[:, num_text:]
    frame_data[0] = frame_start
    frame_data[1] = frame_t0
    frame_data[2] = frame_base
    frame_data[3] = frame_width
    frame_data[4] = 0
    # empty text segments sort before the frame that starts at the same index
    order = (data[0] * 2 - data[4]).argsort(kind="stable")
    return SegmentTable(data.take(order, axis=1), int(placed.row_offsets[-1]))


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
    lengths = np.empty(data.shape[1], dtype=np.int64)
    np.subtract(data[0, 1:], data[0, :-1], out=lengths[:-1])
    lengths[-1] = table.length - data[0, -1]
    rep = data.repeat(lengths, axis=1)
    if out is None:
        out = np.empty((3, table.length), dtype=np.int64)
    offset = np.arange(table.length, dtype=np.int64)
    offset -= rep[0]
    _apply(rep, offset, out)
    return out


def render(table: SegmentTable, index: np.ndarray, out: np.ndarray) -> None:
    """Positions of arbitrary stream indices (``index`` (N,) int64) into ``out`` (3, N)."""
    segment = table.data[0].searchsorted(index, side="right") - 1
    rep = table.data[:, segment]
    _apply(rep, index - rep[0], out)
