"""A prompt's segments packed where its positions are computed, registered elsewhere by copying.

A serving engine that computes prompt positions in one process (SGLang's tokenizer) and runs steps in
another (its scheduler) ships a (3, L) position tensor per request: 768 KB for a 32k-token video, and
the scheduler registers each request from it on its critical path. :class:`PackedPrompt` is what a
:class:`mrope.PositionTable` keeps of a prompt (its segments: text runs and vision frames, O(items +
frames)), made in the first process; :meth:`mrope.PositionTable.add_packed` registers it by copying
those few rows into the table's pool, without touching the prompt's tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import MRopeError
from ..core.one_row import OneRowLayout
from ..core.segments import IS_TEXT, ORIGIN, START, WIDTH, SegmentTable
from ..render import render_all
from .intake import from_positions, positions_input

#: the rows of a packed prompt's segments: ``START ... ORIGIN`` of :mod:`mrope.core.segments`
NUM_ROWS = ORIGIN + 1
#: one text segment from index 0 (a text-only prompt's), read-only: shared by every such prompt
_TEXT_SEGMENT = np.zeros((NUM_ROWS, 1), dtype=np.int64)
_TEXT_SEGMENT[WIDTH, 0] = _TEXT_SEGMENT[IS_TEXT, 0] = 1
_TEXT_SEGMENT.flags.writeable = False
#: prompts of at most this many segments are written into a table's pool one value at a time (a few
#: Python writes cost less than numpy's calls with an engine's cold caches); larger ones as one block
_SINGLE_VALUES = 16


@dataclass(frozen=True, slots=True)
class PackedPrompt:
    """One prompt's segments as an int64 :class:`mrope.PositionTable` stores them (picklable, small).

    Attributes
    ----------
    segments : (6, S) int64 array, the rows ``start, t0, hw0, width, is_text, origin`` of
        :mod:`mrope.core.segments`, sorted by start, none empty, the first starting at 0
    length : the prompt's tokens (the last segment runs to it)
    delta : the offset of positions past the prompt (``index + delta``)
    """

    segments: np.ndarray
    length: int
    delta: int
    #: the segments as a table's pool writes them (:class:`mrope.core.OneRowLayout`), made once here
    layout: OneRowLayout = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Checked once, where it is made (or unpickled: see :meth:`__reduce__`), so that registering it
        checks nothing more; its segments are kept read-only (a writeable array is copied), and laid out
        for the pool: a few segments as Python ints, more as one block."""
        self.check()
        segments = self.segments
        if segments.flags.writeable:
            segments = segments.copy()
            segments.flags.writeable = False
            object.__setattr__(self, "segments", segments)
        num = segments.shape[1]
        if num <= _SINGLE_VALUES:
            layout = OneRowLayout(segments.T.ravel().tolist(), list(range(num)), [], num, self.length)
        else:
            layout = OneRowLayout([], [], [(0, (0,) * NUM_ROWS, segments)], num, self.length)
        object.__setattr__(self, "layout", layout)

    def __reduce__(self) -> tuple[type, tuple[np.ndarray, int, int]]:
        """Unpickled through the constructor: checked again in the process that loads it."""
        return (type(self), (self.segments, self.length, self.delta))

    @classmethod
    def from_positions(cls, positions: Any, delta: int) -> PackedPrompt:
        """Pack a prompt's (3, L) integer positions (numpy or torch) and its delta: the segments that
        render them exactly (text runs, vision frames, integer positions of any shape), checked as
        :meth:`mrope.PositionTable.add_positions` checks them."""
        pos, delta = positions_input(positions, delta, floats=False)
        segments, _ = from_positions(pos, what="the positions given", floats=False)
        return cls(segments, int(pos.shape[1]), int(delta))

    @classmethod
    def text(cls, length: int) -> PackedPrompt:
        """A prompt of ``length`` text tokens (positions ``0 .. length - 1`` on every row, delta 0)."""
        if type(length) is not int or length <= 0:
            raise MRopeError(f"length must be a positive int, got {length!r}")
        return _text_prompt(length)

    def to_array(self) -> np.ndarray:
        """The packed prompt as one (1, 2 + 6 * S) int64 array, ``[length, delta, segments row-major]``,
        for transports that carry arrays only (SGLang's msgpack between its processes)."""
        header = np.array([self.length, self.delta], dtype=np.int64)
        return np.concatenate([header, self.segments.reshape(-1)])[None]

    @classmethod
    def from_array(cls, array: Any) -> PackedPrompt:
        """The packed prompt :meth:`to_array` wrote (numpy or torch), checked (:meth:`check`)."""
        values = np.asarray(array)
        if values.dtype != np.int64 or values.ndim != 2 or values.shape[0] != 1:
            raise MRopeError(f"a packed prompt's array is (1, n) int64, got {values.dtype} {values.shape}")
        if values.shape[1] < 2 + NUM_ROWS or (values.shape[1] - 2) % NUM_ROWS:
            raise MRopeError(
                f"a packed prompt's array holds 2 + {NUM_ROWS} * S values, got {values.shape[1]}"
            )
        length, delta = (int(v) for v in values[0, :2])
        return cls(values[0, 2:].reshape(NUM_ROWS, -1), length, delta)

    def positions(self) -> np.ndarray:
        """The prompt's (3, length) int64 positions, rendered from the segments (for a reader that needs
        the dense form, e.g. an engine's own path)."""
        return render_all(SegmentTable(self.segments, self.length, compact=True))

    @property
    def nbytes(self) -> int:
        """Bytes of the segment rows (what a process ships per request)."""
        return int(self.segments.nbytes)

    def check(self) -> None:
        """Raise :class:`MRopeError` unless the fields have the documented types and shapes (O(1))."""
        data = self.segments
        if type(data) is not np.ndarray or data.dtype != np.int64 or data.ndim != 2:
            kind = (
                f"{data.dtype} {data.ndim}-d array" if isinstance(data, np.ndarray) else type(data).__name__
            )
            raise MRopeError(f"PackedPrompt.segments must be a 2-d int64 numpy array, got a {kind}")
        if data.shape[0] != NUM_ROWS or data.shape[1] == 0:
            raise MRopeError(
                f"PackedPrompt.segments must have shape ({NUM_ROWS}, S) with S >= 1, got {data.shape}"
            )
        if type(self.length) is not int or self.length <= 0 or type(self.delta) is not int:
            raise MRopeError(
                f"PackedPrompt.length must be a positive int and delta an int, got {self.length!r}, "
                f"{self.delta!r}"
            )
        if data[START, 0] != 0 or data[START, -1] >= self.length:
            raise MRopeError(
                f"PackedPrompt.segments must start at 0 and within its length {self.length}, "
                f"got starts {int(data[START, 0])} .. {int(data[START, -1])}"
            )


@functools.lru_cache(maxsize=4096)
def _text_prompt(length: int) -> PackedPrompt:
    """The text prompt of ``length`` tokens, made (checked and laid out) once per length: an engine
    registers one per text-only request, in its step."""
    return PackedPrompt(_TEXT_SEGMENT, length, 0)
