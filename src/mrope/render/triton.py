"""The Triton backend of the render: the segment of each lane's index (:func:`find_segment`) and the
positions of the lanes' tokens at their segments (:func:`render_at`), over a block of lanes; the device
step that composes them is :mod:`mrope.serving.triton_step` (past a prompt, the pool's decode tail
segment renders the tail, so Triton needs no tail of its own).

The formula is :func:`mrope.core.segments.render_formula`, compiled here by ``triton.jit``; the rows are
those of :mod:`mrope.core.segments`, read from the serving pool's ``data`` (keys ``base << 32 | start``).
"""

from __future__ import annotations

import types
from typing import Any

import triton
import triton.language as tl

from ..core.segments import HW0, IS_TEXT, ORIGIN, START, T0, WIDTH, render_formula


def jit(fn: types.FunctionType) -> Any:
    """``triton.jit`` of ``fn`` (its code object, so its one source) with ``triton.language`` added to its
    globals: Triton's interpreter requires that of every jitted function, and :mod:`mrope.core.segments`
    does not import Triton."""
    scope = {**fn.__globals__, "tl": tl}
    return triton.jit(types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__))


_formula = jit(render_formula)

_START = tl.constexpr(START)
_T0 = tl.constexpr(T0)
_HW0 = tl.constexpr(HW0)
_WIDTH = tl.constexpr(WIDTH)
_IS_TEXT = tl.constexpr(IS_TEXT)
_ORIGIN = tl.constexpr(ORIGIN)


@triton.jit
def find_segment(data_ptr, row_stride, key, capacity, search_steps, mask, BLOCK: tl.constexpr):
    """The segment of each lane's ``key``: the last column of ``data`` whose ``START`` is ``<= key`` (a
    branchless binary search from column 0, whose key, 0, is ``<=`` all; ``search_steps``:
    ``capacity.bit_length()``)."""
    keys_ptr = data_ptr + _START * row_stride
    seg = tl.zeros([BLOCK], dtype=tl.int64)
    for step in range(search_steps):
        probe = seg + (1 << (search_steps - 1 - step))
        inside = probe < capacity
        probe_key = tl.load(keys_ptr + tl.where(inside, probe, 0), mask=mask, other=0)
        seg = tl.where(inside & (probe_key <= key), probe, seg)
    return seg


@triton.jit
def render_at(data_ptr, row_stride, seg, key, mask):
    """Positions ``(t, h, w)`` of the lanes' tokens at ``key`` in the columns ``seg`` of ``data`` (the
    rows of :mod:`mrope.core.segments`, ``row_stride`` apart)."""
    column = data_ptr + seg
    t0 = tl.load(column + _T0 * row_stride, mask=mask, other=0)
    hw0 = tl.load(column + _HW0 * row_stride, mask=mask, other=0)
    width = tl.load(column + _WIDTH * row_stride, mask=mask, other=1)
    is_text = tl.load(column + _IS_TEXT * row_stride, mask=mask, other=0)
    offset = key - tl.load(column + _ORIGIN * row_stride, mask=mask, other=0)
    quotient = offset // width
    return _formula(offset, quotient, offset - quotient * width, t0, hw0, is_text)
