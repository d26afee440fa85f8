"""The Triton step of :meth:`mrope.PositionTable.fill_ragged` on a device: one launch, one program per
request of the step, no host synchronization (CUDA-graph capturable).

Program ``i`` reads its request's slot, columns ``query_start_loc[i] ... query_start_loc[i + 1] - 1``
and first sequence index ``slot_num_computed[slot]``, then walks its tokens in blocks of lanes: each lane
finds its token's segment in the whole pool and renders it (the Triton backend,
:mod:`mrope.render.triton`; each slot's decode tail covers every index past its prompt). Bad values (a
slot holding no request, a negative count, an index reaching the table's bound, a position reaching
``max_position``, columns outside ``out``) write 0 in the request's columns inside ``out`` and add 1 to
the device error counter that :meth:`PositionTable.check` reads; every load index is clamped.

A table whose requests give other rows than (t, h, w) (HunYuan-VL) compiles its own kernel: the rows
``T_ROW``, ``H_ROW``, ``W_ROW`` of ``out`` that take the rendered rows (``SegmentRows.order``) and ``LEAD``
index rows in front (each token's index inside its prompt, the rendered ``index + delta`` past it).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..render.triton import find_segment, render_at
from ._state import DEAD, DELTA, KEY, PLEN

_PLEN = tl.constexpr(PLEN)
_DELTA = tl.constexpr(DELTA)
_KEY = tl.constexpr(KEY)
_DEAD = tl.constexpr(DEAD)

BLOCK = 1024  # lanes of a program (tokens per iteration of its loop), as vLLM's kernel
NUM_WARPS = 8  # sm_90: 78 registers, no spills


@triton.jit
def _fill_ragged_kernel(
    out_ptr,
    out_row_stride,
    out_col_stride,
    num_columns,
    slots_ptr,
    query_start_ptr,
    computed_ptr,
    num_computed_slots,
    info_ptr,
    info_row_stride,
    max_slots,
    data_ptr,
    data_row_stride,
    capacity,
    search_steps,
    errors_ptr,
    max_index,
    max_position,
    HAS_MAX_POSITION: tl.constexpr,
    BLOCK: tl.constexpr,
    T_ROW: tl.constexpr,
    H_ROW: tl.constexpr,
    W_ROW: tl.constexpr,
    LEAD: tl.constexpr,
):
    req = tl.program_id(0)
    slot = tl.load(slots_ptr + req).to(tl.int64)
    first = tl.load(query_start_ptr + req).to(tl.int64)
    end = tl.load(query_start_ptr + req + 1).to(tl.int64)
    count = end - first
    # slot s is info column s + 1; column 0 is a free one (PLEN = DEAD) for a slot out of range
    column = tl.where((slot >= 0) & (slot < max_slots), slot + 1, 0)
    plen = tl.load(info_ptr + _PLEN * info_row_stride + column)
    delta = tl.load(info_ptr + _DELTA * info_row_stride + column)
    base = tl.load(info_ptr + _KEY * info_row_stride + column)
    has_count = (slot >= 0) & (slot < num_computed_slots)
    computed = tl.load(computed_ptr + tl.where(has_count, slot, 0)).to(tl.int64)
    # the checks of the host path, per request (``max_index - computed`` cannot wrap once computed >= 0)
    ok = (plen != _DEAD) & has_count & (computed >= 0) & (count >= 0) & (computed <= max_index)
    ok = ok & (count <= max_index - computed) & (first >= 0) & (end <= num_columns)
    if HAS_MAX_POSITION:
        ok = ok & (computed + count - 1 + delta < max_position)
    if not ok:
        tl.atomic_add(errors_ptr, 1)
    lo = tl.minimum(tl.maximum(first, 0), num_columns)
    hi = tl.minimum(tl.maximum(end, lo), num_columns)
    key_of_column = base + computed - first  # a token's key: its slot's key + its sequence index
    lanes = tl.arange(0, BLOCK)
    for block in range(lo, hi, BLOCK):
        col = block + lanes
        mask = col < hi
        key = key_of_column + col
        seg = find_segment(data_ptr, data_row_stride, key, capacity, search_steps, mask, BLOCK)
        t, h, w = render_at(data_ptr, data_row_stride, seg, key, mask)
        dest = out_ptr + col * out_col_stride
        tl.store(dest + T_ROW * out_row_stride, tl.where(ok, t, 0), mask=mask)
        tl.store(dest + H_ROW * out_row_stride, tl.where(ok, h, 0), mask=mask)
        tl.store(dest + W_ROW * out_row_stride, tl.where(ok, w, 0), mask=mask)
        if LEAD > 0:  # the index inside the prompt, the rendered index + delta past it
            index = key - base
            index = tl.where(ok, tl.where(index < plen, index, t), 0)
            for row in tl.static_range(LEAD):
                tl.store(dest + row * out_row_stride, index, mask=mask)


def fill_ragged(
    device: Any,
    out: torch.Tensor,
    slots: torch.Tensor,
    query_start_loc: torch.Tensor,
    slot_num_computed: torch.Tensor,
) -> None:
    """Launch the kernel over ``device``'s (a :class:`.device.DeviceTable` of an int64 table) mirror.

    The caller has checked the arguments: ``out`` a (num_dims, n) int64 tensor, the others 1-D int32 or int64
    tensors of stride 1 on its device, ``query_start_loc`` with ``len(slots) + 1`` entries or more."""
    num_requests = slots.shape[0]
    if num_requests == 0:
        return
    state = device.state
    data = device.data
    capacity = data.shape[1]
    max_position = state.max_position
    rows = state.rows
    t_row, h_row, w_row = (0, 1, 2) if rows is None else rows.order
    _fill_ragged_kernel[(num_requests,)](
        out,
        out.stride(0),
        out.stride(1),
        out.shape[1],
        slots,
        query_start_loc,
        slot_num_computed,
        slot_num_computed.shape[0],
        device.info,
        device.info.stride(0),
        device.max_slots,
        data,
        data.stride(0),
        capacity,
        capacity.bit_length(),
        device.errors,
        state.max_index,
        0 if max_position is None else max_position,
        HAS_MAX_POSITION=max_position is not None,
        BLOCK=BLOCK,
        T_ROW=t_row,
        H_ROW=h_row,
        W_ROW=w_row,
        LEAD=0 if rows is None else rows.lead,
        num_warps=NUM_WARPS,
    )
