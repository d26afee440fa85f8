"""Segments for the position table: from a family's segment table, or recovered from explicit positions.

Both return ``(ints, floats)``: ``ints`` a (6, S) int64 array of the segment rows of
:mod:`mrope.core.segments` (``START ... ORIGIN``; ``origin = start`` where the table has no origin row),
sorted by start, without empty segments, covering ``0 .. L-1`` (possibly the segment table's own
array: read it only); ``floats`` None for an int64 table, or for a float32 table a (2, S) float64
array of ``t0, hw0`` (float32 values; ``ints`` then holds 0 there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import dtype_name, to_numpy
from .._errors import MRopeError
from ..core.place import LARGEST_POSITION
from ..core.segments import ORIGIN, START, T0, WIDTH, SegmentTable
from ..render import segments_of


def nonempty(table: SegmentTable, *, floats: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The segments of ``table`` that hold at least one token, for an int64 or float32 (``floats``)
    table. A float table (Qwen3-Omni) goes to a float32 table only: the caller checks."""
    data = table.data
    if not table.compact:
        data = data[:, np.diff(data[START], append=table.length) > 0]
    if not floats and data.shape[0] > ORIGIN and data.dtype == np.int64:
        return data, None  # the pool copies it
    ints = np.empty((ORIGIN + 1, data.shape[1]), dtype=np.int64)
    ints[:ORIGIN] = data[:ORIGIN]  # float tables hold integers in every row but t0 and hw0
    ints[ORIGIN] = data[ORIGIN] if data.shape[0] > ORIGIN else data[START]
    if not floats:
        return ints, None
    ints[T0:WIDTH] = 0
    return ints, data[T0:WIDTH].astype(np.float64)


def from_positions(positions: np.ndarray, *, what: str, floats: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Segments that render exactly ``positions`` (3, L) (:func:`mrope.render.segments_of`: text
    runs, vision frames and integer positions of any shape); fractional ones that are not text runs and
    frames raise :class:`MRopeError` naming ``what`` they are (e.g. ``"positions of slot 3"``)."""
    table = segments_of(positions, floats=floats)
    if table is None:
        raise MRopeError(
            f"{what} are not text runs and vision frames (t0, hw0 + o // W, hw0 + o % W) "
            "of the M-RoPE rule, or (fractional positions) not exactly float32(t0 + o) from each run's "
            "first position; register the request with add() from its prompt instead"
        )
    return nonempty(table, floats=floats)


def positions_input(
    positions: Any, delta: Any, *, floats: bool, num_dims: int = 3
) -> tuple[np.ndarray, int | float]:
    """The checked arguments of :meth:`PositionTable.add_positions`: (num_dims, L) int64 positions and
    an int delta, or for a float32 table (``floats``) float32 positions and a float delta (a float32
    value)."""
    pos = to_numpy(positions, name="positions")
    if pos.ndim != 2 or pos.shape[0] != num_dims or pos.shape[1] == 0:
        raise MRopeError(
            f"positions must have shape ({num_dims}, L) with L >= 1 (the table's num_dims), "
            f"got {tuple(pos.shape)}"
        )
    if pos.dtype.kind == "f" and not floats:
        raise MRopeError(
            f"positions are {dtype_name(positions, pos)}: an int64 table takes integer positions; "
            "float32 positions (Qwen3-Omni) need a float32 table, PositionTable(..., dtype=np.float32)"
        )
    if pos.dtype.kind not in "iuf":
        raise MRopeError(f"positions must hold integers, got dtype {dtype_name(positions, pos)}")
    kinds = (int, np.integer, float, np.floating) if floats else (int, np.integer)
    bad_kind = isinstance(delta, (bool, np.bool_)) or not isinstance(delta, kinds)
    if bad_kind or (floats and not np.isfinite(delta)):
        raise MRopeError(f"delta must be an int{' or a float' if floats else ''}, got {delta!r}")
    # bounds before the conversion (unsigned values must not wrap): positions in [0, LARGEST_POSITION]
    if pos.dtype.kind == "f" and not np.isfinite(pos).all():
        raise MRopeError("positions must be finite")
    low, high = pos.min(), pos.max()
    if low < 0 or high > LARGEST_POSITION:
        raise MRopeError(f"positions must lie in [0, {LARGEST_POSITION}], got values from {low} to {high}")
    if floats:
        pos, delta = pos.astype(np.float32, copy=False), float(np.float32(delta))
    else:
        pos, delta = pos.astype(np.int64, copy=False), int(delta)
    # past the prompt, ``index + delta``: the first one above every prompt position (no collision),
    # the last prompt index's within LARGEST_POSITION (the families' rule)
    length = pos.shape[1]
    if not float(high) < length + delta <= LARGEST_POSITION + 1:
        raise MRopeError(
            f"delta = {delta} does not fit the positions: the first position past the prompt, "
            f"{length} + delta, must exceed the largest prompt position {high} and stay within "
            f"{LARGEST_POSITION + 1}"
        )
    return pos, delta
