"""The torch backend of the renderer (:mod:`mrope.core.renderer`): segment lookup, render at segments and
decode tail in torch ops on device tensors, for the device step (:mod:`.device`).

Fixed-shape ops only (no ``.item()``, no boolean-mask indexing): nothing synchronizes with the host, so
the device step stays CUDA-graph capturable. The tables are the pool's rows (:mod:`._pool`): ``keys``
(``base << 32 | start``) and ``fields`` (``T0 ... ORIGIN``); tests compare each primitive with numpy's.
"""

from __future__ import annotations

import torch

from ..core.segments import render_formula
from ._pool import FHW0, FIS_TEXT, FLOAT_HW0, FLOAT_T0, FT0, FWIDTH, OKEY


def find_segments(starts: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The segment of each token: the last column of ``starts`` (sorted) whose start is ``<= index``;
    an index below ``starts[0]`` (a bad request's) reads segment 0."""
    segment = torch.searchsorted(starts, index, right=True)
    segment -= 1
    return segment.clamp_(min=0)


def render_at(
    fields: torch.Tensor, segment: torch.Tensor, index: torch.Tensor, floats: torch.Tensor | None = None
) -> torch.Tensor:
    """Positions (3, N) of tokens at ``index`` (N,) int64 in the segments ``segment`` of ``fields`` (the
    pool's rows ``T0 ... ORIGIN``): int64, or with ``floats`` (2, S) float64 ``T0``/``HW0`` the float64
    sums (float32 values; the caller rounds once)."""
    rep = fields.index_select(1, segment)
    offset = index - rep[OKEY]
    width = rep[FWIDTH]
    quotient = torch.div(offset, width, rounding_mode="floor")
    remainder = offset - quotient * width
    if floats is None:
        t0, hw0 = rep[FT0], rep[FHW0]
    else:
        taken = floats.index_select(1, segment)
        t0, hw0 = taken[FLOAT_T0], taken[FLOAT_HW0]
        quotient, remainder = quotient.to(torch.float64), remainder.to(torch.float64)
    return torch.stack(render_formula(offset, quotient, remainder, t0, hw0, rep[FIS_TEXT]))


def render_tail(index: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """The decode tail: ``index + delta`` as (3, N) (an expanded view), the positions past a prompt;
    float32 for float64 deltas (float32 values: the float64 sum rounded once)."""
    position = index + delta
    if position.dtype == torch.float64:
        position = position.to(torch.float32)
    return position.expand(3, -1)
