"""Render positions from a table of segments: text runs and single video frames.

A segment starting at stream index ``start`` renders token ``j`` (offset ``o = j - start``) as

- text (``is_text = 1``, ``width = 1``): ``base + o`` on all three rows;
- one frame of a vision block: ``(t0, hw0 + o // width, hw0 + o % width)``.

Both come from one formula, so rendering is a handful of numpy calls whatever the mix:
``t = t0 + o * is_text``, ``h = hw0 + o // width``, ``w = hw0 + o % width + o * is_text``.

The Omni families need two generalizations, taken by a separate (general) render path so that the
int64 five-row fast path stays as it is:

- an optional sixth row ``origin``: offsets count from ``o = j - origin`` instead of ``j - start``
  (a Qwen2.5-Omni video chunk that starts inside a frame; an audio run whose tokens are split by video
  frames, Qwen3-Omni);
- float64 fields holding float32 values (Qwen3-Omni's fractional positions): positions are then
  float32, each rounded once from the exact sum, as transformers' float32 arithmetic gives them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from .place import Placed, temporal_index

_FIELDS = ("start", "t0", "hw0", "width", "is_text")


@dataclass(slots=True)
class SegmentTable:
    """Segments sorted by start, as a (5, num_segments) int64 array of rows ``_FIELDS``.

    Omni tables may have a sixth row ``origin`` and float64 fields (see the module docstring).

    ``length`` is the number of tokens the table covers (the stream length); the last segment runs
    to it. Memory is O(blocks + frames), not O(tokens). ``compact``: no segment is empty (each holds at
    least one token), as the one-prompt path builds them; :func:`build_segments` may leave empty ones.
    """

    data: np.ndarray
    length: int
    compact: bool = False

    @property
    def start(self) -> np.ndarray:
        return self.data[0]

    @property
    def num_segments(self) -> int:
        return self.data.shape[1]


def build_segments(placed: Placed, length: int) -> SegmentTable:
    """The segment table of placed blocks in a stream of ``length`` tokens: one text segment per row
    start and per block end (possibly empty), one segment per video frame.

    The first row's text segment is extended back to index 0 so that the table covers the stream;
    tokens outside every row (padding) get meaningless positions that the caller masks."""
    blocks = placed.blocks
    row_starts = placed.row_starts
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
    data[0, 0] = 0
    data[1:3, 0] = -row_starts[0]
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
    # at one index: a block's (empty) trailing text, then the next row's start, then a frame
    rank = np.full(data.shape[1], 2, dtype=np.int64)
    rank[:num_rows] = 1
    rank[num_rows:num_text] = 0
    order = (data[0] * 3 + rank).argsort(kind="stable")
    return SegmentTable(data.take(order, axis=1), length)


_CHUNK = 1 << 16  # tokens rendered per pass: bounds the scratch memory
#: the longest scratch row a thread keeps between calls (int64 entries, 2 MiB): a longer one (a prompt
#: of more tokens) is allocated for its call and given back after it, so that whatever prompts a thread
#: has served it keeps an arange of at most _KEEP and six rows of at most _CHUNK entries (5 MiB)
_KEEP = 1 << 18


class _Workspace(threading.local):
    """Per-thread scratch rows reused across calls: large temporaries allocated per call make the
    allocator map and unmap memory, and the page faults cost more than the arithmetic. Rows longer
    than ``_KEEP`` are not kept (see there)."""

    def __init__(self) -> None:
        self.rows = np.empty((6, 0), dtype=np.int64)
        self.arange = np.arange(0, dtype=np.int64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Six scratch rows of ``n`` entries and ``arange(n)``."""
        rows = self.rows
        if rows.shape[1] < n:
            rows = np.empty((6, n), dtype=np.int64)
            if n <= _KEEP:
                self.rows = rows
        return rows[:, :n], self.range(n)

    def range(self, n: int) -> np.ndarray:
        """``arange(n)``, int64, read from a cached array."""
        arange = self.arange
        if arange.size < n:
            arange = np.arange(n, dtype=np.int64)
            if n <= _KEEP:
                self.arange = arange
        return arange[:n]


_workspace = _Workspace()


def render_all(table: SegmentTable, out: np.ndarray | None = None) -> np.ndarray:
    """Positions (3, length) of every token of the stream, int64, into ``out`` if given."""
    if _is_general(table):
        return _render_general(table, np.arange(table.length, dtype=np.int64), out)
    data = table.data
    starts = data[0]
    if out is None:
        out = np.empty((3, table.length), dtype=np.int64)
    nonempty = np.empty(starts.size, dtype=bool)
    np.less(starts[:-1], starts[1:], out=nonempty[:-1])
    nonempty[-1] = starts[-1] < table.length
    data = data[:, nonempty]  # drop empty segments: each token's segment is then a running count
    starts = data[0]
    for begin in range(0, table.length, _CHUNK):
        end = min(begin + _CHUNK, table.length)
        rows, arange = _workspace.get(end - begin)
        segment, start, t0, hw0, width, is_text = rows
        first, last = starts.searchsorted([begin, end], side="right") - 1
        segment.fill(0)
        segment[starts[first + 1 : last + 1] - begin] = 1
        segment[0] = first
        np.cumsum(segment, out=segment)
        for field, row in zip(data, (start, t0, hw0, width, is_text), strict=True):
            field.take(segment, out=row, mode="clip")  # "clip": no buffering (indices are valid)
        offset = start
        if begin:
            start -= begin
        np.subtract(arange, start, out=offset)
        np.divmod(offset, width, out=(segment, width))  # h offset, w offset
        offset *= is_text
        chunk = out[:, begin:end]
        np.add(t0, offset, out=chunk[0])
        np.add(hw0, segment, out=chunk[1])
        np.add(hw0, width, out=chunk[2])
        chunk[2] += offset
    return out


def render(table: SegmentTable, index: np.ndarray, out: np.ndarray) -> None:
    """Positions of arbitrary stream indices (``index`` (N,) int64) into ``out`` (3, N)."""
    if _is_general(table):
        _render_general(table, index, out)
        return
    segment = table.data[0].searchsorted(index, side="right") - 1
    rep = table.data[:, segment]
    offset = index - rep[0]
    q, r = np.divmod(offset, rep[3])
    offset *= rep[4]
    np.add(rep[1], offset, out=out[0])
    np.add(rep[2], q, out=out[1])
    np.add(rep[2], r, out=out[2])
    out[2] += offset


def _is_general(table: SegmentTable) -> bool:
    return table.data.shape[0] > len(_FIELDS) or table.data.dtype != np.int64


def _render_general(table: SegmentTable, index: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """Render for tables with an ``origin`` row or float fields: float32 positions for float tables."""
    data = table.data
    rep = data[:, data[0].searchsorted(index, side="right") - 1]
    offset = index - rep[len(_FIELDS) if data.shape[0] > len(_FIELDS) else 0]
    q, r = np.divmod(offset, rep[3])
    offset = offset * rep[4]
    if out is None:
        out = np.empty((3, index.size), dtype=np.float32 if data.dtype.kind == "f" else np.int64)
    np.add(rep[1], offset, out=out[0], casting="same_kind")
    np.add(rep[2], q, out=out[1], casting="same_kind")
    np.add(rep[2] + r, offset, out=out[2], casting="same_kind")
    return out
