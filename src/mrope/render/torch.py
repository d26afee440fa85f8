"""The torch backend of the render: the segment of each index (:func:`find_segments`), the positions of
tokens at their segments (:func:`render_at`) and the decode tail (:func:`render_tail`), on device tensors.

Fixed-shape ops only (no ``.item()``, no boolean-mask indexing): nothing synchronizes with the host, so
the device step stays CUDA-graph capturable. A table is an array whose rows follow
:mod:`mrope.core.segments` (the serving pool's ``data``, keys ``base << 32 | start``).
"""

from __future__ import annotations

import torch

from ..core.segments import HW0, IS_TEXT, ORIGIN, T0, WIDTH, render_formula


def find_segments(starts: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The segment of each token: the last column of ``starts`` (sorted) whose start is ``<= index``;
    an index below ``starts[0]`` (a bad request's) reads segment 0."""
    segment = torch.searchsorted(starts, index, right=True)
    segment -= 1
    return segment.clamp_(min=0)


def render_at(
    data: torch.Tensor, segment: torch.Tensor, index: torch.Tensor, floats: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions (3, N) of tokens at ``index`` (N,) int64 in the segments ``segment`` of ``data`` (the
    rows of :mod:`mrope.core.segments`, ``ORIGIN`` included): int64, or with ``floats`` (2, S) float64
    (``T0`` and ``HW0`` kept apart: a float32 table) the float64 sums (float32 values; the caller rounds
    once)."""
    rep = data.index_select(1, segment)
    offset = index - rep[ORIGIN]
    width = rep[WIDTH]
    quotient = torch.div(offset, width, rounding_mode="floor")
    remainder = offset - quotient * width
    if floats is None:
        t0, hw0 = rep[T0], rep[HW0]
    else:
        t0, hw0 = floats.index_select(1, segment)
        quotient, remainder = quotient.to(torch.float64), remainder.to(torch.float64)
    return torch.stack(render_formula(offset, quotient, remainder, t0, hw0, rep[IS_TEXT]))


def render_tail(index: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """The decode tail: ``index + delta`` as (3, N) (an expanded view), the positions past a prompt;
    float32 for float64 deltas (float32 values: the float64 sum rounded once)."""
    position = index + delta
    if position.dtype == torch.float64:
        position = position.to(torch.float32)
    return position.expand(3, -1)
