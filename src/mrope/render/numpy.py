"""The numpy backend of the render: the segment of each index (:func:`find_segments`), the positions of
tokens at their segments (:func:`render_at`) and the decode tail (:func:`render_tail`), vectorized.

A table here is any array whose rows follow :mod:`mrope.core.segments` (``START ... IS_TEXT`` and
optionally ``ORIGIN``): a :class:`mrope.core.SegmentTable`'s ``data`` or the serving pool's ``data``,
whose ``START`` and ``ORIGIN`` rows hold ``base << 32 | index`` (then the indices passed are keys of the
same form, and offsets come out the same).
"""

from __future__ import annotations

import numpy as np

from ..core.segments import HW0, IS_TEXT, ORIGIN, T0, WIDTH, render_formula

__all__ = ["find_segments", "render_at", "render_tail"]

_REST = slice(HW0, ORIGIN + 1)  # the rows gathered into scratch: HW0, WIDTH, IS_TEXT, ORIGIN
#: rows of the gathered scratch (the table rows ``HW0 ... ORIGIN`` are consecutive)
_R_HW0, _R_WIDTH, _R_IS_TEXT, _R_ORIGIN = (r - HW0 for r in (HW0, WIDTH, IS_TEXT, ORIGIN))


def find_segments(starts: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The segment (column) of each token: the last one whose start is ``<= index``.

    ``starts`` (S,) sorted, ``starts[0] <= every index`` (a table's first segment starts at 0; the pool's
    first key is 0); ``index`` (N,) int64. Returns (N,) int64 (``intp``) in ``[0, S)``. Searching the starts
    after the first spares the ``- 1``."""
    return starts[1:].searchsorted(index, side="right")


def render_at(
    data: np.ndarray,
    segment: np.ndarray,
    index: np.ndarray,
    out: np.ndarray,
    *,
    origin_row: int = ORIGIN,
    floats: np.ndarray | None = None,
    scratch: np.ndarray | None = None,
) -> np.ndarray:
    """Positions (3, N) of tokens at ``index`` in the segments ``segment`` of ``data``, into ``out``.

    ``data`` (>= 5, S): a table's rows (int64, or float64 holding float32 ``T0``/``HW0`` values);
    ``origin_row``: the row offsets count from (``ORIGIN``, or ``START`` for a table without it);
    ``floats`` (2, S) float64: ``T0`` and ``HW0`` of a table that keeps them apart (a float32 pool);
    ``index`` (N,) int64 is overwritten (with offsets) on the int64 path. ``out`` is int64 (its rows are
    the formula's scratch; ``scratch`` (>= 4, >= N) int64 holds the other fields, allocated if ``None``)
    or float32: float64 sums, each rounded once (as transformers' float32 arithmetic gives them)."""
    num = index.shape[0]
    if out.dtype.kind == "f" or data.dtype.kind == "f":
        rep = data.take(segment, axis=1, mode="clip")
        t0, hw0 = (rep[T0], rep[HW0]) if floats is None else floats.take(segment, axis=1, mode="clip")
        offset = index - rep[origin_row]
        quotient, remainder = np.empty((2, num), dtype=np.float64)
        np.divmod(offset, rep[WIDTH], out=(quotient, remainder))
        positions = render_formula(offset, quotient, remainder, t0, hw0, rep[IS_TEXT])
        for row, position in zip(out, positions, strict=True):
            np.copyto(row, position, casting="same_kind")
        return out
    if scratch is None:
        scratch = np.empty((4, num), dtype=np.int64)
    t, h, w = out
    data[T0].take(segment, out=t, mode="clip")  # "clip": unbuffered (the segments are valid)
    if origin_row == ORIGIN:
        rest = data[_REST].take(segment, axis=1, out=scratch[:4, :num], mode="clip")
    else:  # a table without ORIGIN: offsets count from START
        rest = data[HW0 : IS_TEXT + 1].take(segment, axis=1, out=scratch[:3, :num], mode="clip")
        data[origin_row].take(segment, out=scratch[_R_ORIGIN, :num], mode="clip")
    offset = np.subtract(index, scratch[_R_ORIGIN, :num], out=index)
    np.divmod(offset, rest[_R_WIDTH], out=(h, w))
    render_formula(offset, h, w, t, rest[_R_HW0], rest[_R_IS_TEXT])
    return out


def render_tail(out: np.ndarray, index: np.ndarray, delta: np.ndarray | float | None = None) -> np.ndarray:
    """The decode tail: ``index + delta`` on all three rows of ``out`` (3, N), the positions past a prompt.

    ``index`` (N,) int64 (the int64 path adds ``delta`` into it); ``delta`` per token or a scalar, int64,
    or float64 holding float32 values (``out`` float32: the float64 sum rounded once); ``None``: ``index``
    already holds the sum (a caller that adds each request's delta once, before repeating it per token)."""
    if out.dtype.kind == "f":
        np.add(index, 0 if delta is None else delta, out=out[0], casting="same_kind")
        out[1:] = out[0]
        return out
    np.copyto(out, index if delta is None else np.add(index, delta, out=index))
    return out
