"""The segment: its fields, named once, and the render formula, written once (the lookup and the render
around it, once per backend, are :mod:`mrope.render`'s).

A *segment* is a run of tokens whose positions follow one formula (design: parse, place, render).
Every segment table in mrope (:class:`mrope.core.SegmentTable`, the serving pool, the float32 and device
paths) stores one segment per column, in the rows below:

- ``START``: stream index of the segment's first token (tables are sorted by it);
- ``T0``: position of the segment's first token on the t row;
- ``HW0``: position of its first token on the h and w rows;
- ``WIDTH``: the frame's width W' (text: 1);
- ``IS_TEXT``: 1 for text (and text-like audio), 0 for one frame of a vision block;
- ``ORIGIN``: the index that offsets count from (``start``, except for a frame piece or an audio run
  that continues a run started earlier: the Omni families). Tables that omit this row have
  ``origin = start``.

Fields are integers (int64); a Qwen3-Omni table holds float32 values of ``T0`` and ``HW0`` (fractional
positions) as float64, and then renders float32 positions, each rounded once from the exact float64 sum.

The formula
-----------
Token ``j`` of a segment, at offset ``o = j - origin`` with ``q, r = divmod(o, width)``, has positions::

    t = t0 + o * is_text
    h = hw0 + q
    w = hw0 + r + o * is_text

(text: ``base + o`` on all rows; a frame: ``(t0, hw0 + o // W', hw0 + o % W')``). :func:`render_formula`
is this formula and the only place it is written. It uses only ``+=`` and ``*=`` so that one function
serves every caller:

- Python ints and numpy scalars: values are returned;
- numba: ``numba.njit(inline="always")(render_formula)`` compiles it over scalars (the compiled serving
  step keeps ``q`` and ``r`` by counting, so the division is not part of the formula);
- Triton: ``triton.jit(render_formula)`` compiles it over blocks of lanes (the Triton backend,
  :mod:`mrope.render.triton`). ``triton.jit`` evaluates parameter annotations and refuses module
  globals such as :data:`Value`, so the parameters are annotated ``typing.Any`` (a module attribute);
- numpy arrays and torch tensors: the formula runs *in place* and allocates nothing. ``offset``, ``t0``,
  ``quotient`` and ``remainder`` are scratch that it overwrites (``t0`` becomes t, ``quotient`` h,
  ``remainder`` w, ``offset`` ``offset * is_text``) and returns; ``hw0`` and ``is_text`` are only read.
  :func:`mrope.render.numpy.render_at` (the numpy render every numpy caller goes through) passes the
  rows of ``out`` as ``t0``, ``quotient`` and ``remainder`` (``field.take(seg, out=out[0])``,
  ``np.divmod(offset, width, out=(out[1], out[2]))``), so the hot numpy paths keep their few calls and
  no temporary. The result buffers must
  hold the fields' kind: for float ``T0``/``HW0`` (Qwen3-Omni) pass float64 buffers and round once
  when copying to float32 (numpy's in-place add refuses float into int64).

:func:`render_offsets` divides first (``//`` and ``%``): for callers that have offsets and widths only
(torch on the device path, tests). Both need ``offset >= 0`` (true of every token inside its segment).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

#: the rows of a segment table, in order (the row order of :class:`mrope.core.SegmentTable` and of the
#: serving pool)
START, T0, HW0, WIDTH, IS_TEXT, ORIGIN = range(6)
#: the names of the rows, indexed by the constants above
FIELDS = ("start", "t0", "hw0", "width", "is_text", "origin")
#: rows of a table without ``ORIGIN`` (``origin = start``)
NUM_BASE_FIELDS = ORIGIN


@dataclass(slots=True)
class SegmentTable:
    """A stream's segments, one per column of ``data``, sorted by start: the rows ``START ... IS_TEXT``
    and, optionally, ``ORIGIN`` (int64; float64 holding float32 ``T0``/``HW0`` values for Qwen3-Omni).

    ``length`` is the number of tokens the table covers (the stream length); the last segment runs to
    it. Memory is O(blocks + frames), not O(tokens). ``compact``: no segment is empty (each holds at
    least one token), as the one-prompt path builds them; other builders may leave empty ones (a
    token's segment is then the last one starting at or before it).
    """

    data: np.ndarray
    length: int
    compact: bool = False

    @property
    def num_segments(self) -> int:
        return self.data.shape[1]

    @property
    def has_origin(self) -> bool:
        """Whether the table has an ``ORIGIN`` row (else offsets count from ``START``)."""
        return self.data.shape[0] > ORIGIN

    @property
    def is_float(self) -> bool:
        """Whether ``T0`` and ``HW0`` hold fractional (float32) values: positions are then float32."""
        return self.data.dtype.kind == "f"

    @property
    def start(self) -> np.ndarray:
        return self.data[START]

    @property
    def t0(self) -> np.ndarray:
        return self.data[T0]

    @property
    def hw0(self) -> np.ndarray:
        return self.data[HW0]

    @property
    def width(self) -> np.ndarray:
        return self.data[WIDTH]

    @property
    def is_text(self) -> np.ndarray:
        return self.data[IS_TEXT]

    @property
    def origin_row(self) -> int:
        """The row offsets count from: ``ORIGIN`` if the table has it, else ``START``."""
        return ORIGIN if self.data.shape[0] > ORIGIN else START

    @property
    def origin(self) -> np.ndarray:
        return self.data[self.origin_row]


#: a Python or numpy scalar, a numpy array or a torch tensor (anything with ``+ * // %``)
Value: TypeAlias = Any


def render_formula(
    offset: typing.Any,
    quotient: typing.Any,
    remainder: typing.Any,
    t0: typing.Any,
    hw0: typing.Any,
    is_text: typing.Any,
) -> tuple[Value, Value, Value]:
    """Positions ``(t, h, w)`` of tokens at ``offset`` from their segment's origin, ``(quotient,
    remainder) = divmod(offset, width)``: the one copy of the render formula (see the module docstring;
    each parameter is a :data:`Value`, annotated ``typing.Any`` for ``triton.jit``).

    Arrays and tensors are updated in place: ``offset``, ``t0``, ``quotient`` and ``remainder`` are
    overwritten, and ``t0``, ``quotient``, ``remainder`` returned as t, h and w."""
    offset *= is_text  # how far along the text run (0 in a frame)
    t0 += offset
    quotient += hw0
    remainder += hw0
    remainder += offset
    return t0, quotient, remainder


def render_offsets(
    offset: Value, t0: Value, hw0: Value, width: Value, is_text: Value
) -> tuple[Value, Value, Value]:
    """:func:`render_formula` of offsets and widths (``q = offset // width``, ``r = offset % width``).

    Arrays and tensors: ``offset`` and ``t0`` are overwritten (``t0`` is returned as t); h and w are new."""
    return render_formula(offset, offset // width, offset % width, t0, hw0, is_text)


class SegmentBuilder:
    """Collects segments (rows :data:`FIELDS`, ``ORIGIN`` included) part by part and assembles a
    :class:`SegmentTable` sorted by start: the one segment builder of the prompt paths (the grid
    families' :func:`mrope.core.build_segments` and the item scan of :func:`mrope.core.place`).

    ``dtype`` is int64, or float64 holding float32 values (Qwen3-Omni). Segments starting at one index
    keep the order they were added in (an empty one before the one that holds tokens)."""

    def __init__(self, dtype: type) -> None:
        self.dtype = dtype
        self.parts: list[np.ndarray] = []

    def add(
        self,
        start: int | np.ndarray,
        t0: object,
        hw0: object,
        width: object,
        is_text: object,
        origin: object = None,
    ) -> None:
        """Segments starting at stream index ``start`` (an int, or a 1-D array: one segment each; the other
        fields scalars or arrays of its length); ``origin`` defaults to ``start``."""
        count = start.size if isinstance(start, np.ndarray) else 1
        if not count:
            return
        part: np.ndarray = np.empty((len(FIELDS), count), dtype=self.dtype)
        part[START] = start
        part[T0] = t0
        part[HW0] = hw0
        part[WIDTH] = width
        part[IS_TEXT] = is_text
        part[ORIGIN] = part[START] if origin is None else origin
        self.parts.append(part)

    def text(self, start: int | np.ndarray, base: object, origin: object = None) -> None:
        """Text-like runs from ``start``: ``base + o`` on all rows, ``o`` counted from ``origin``."""
        self.add(start, base, base, 1, 1, origin)

    def table(self, length: int) -> SegmentTable:
        """The table over a stream of ``length`` tokens; text from index 0 at position 0 leads it unless
        a segment starts there."""
        parts = self.parts
        data: np.ndarray | None = None
        if parts:
            data = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
            data = data.take(data[START].argsort(kind="stable"), axis=1)
        if data is None or data[START, 0] > 0:
            first: np.ndarray = np.array([[0], [0], [0], [1], [1], [0]], dtype=self.dtype)
            data = first if data is None else np.concatenate([first, data], axis=1)
        return SegmentTable(data, length)
