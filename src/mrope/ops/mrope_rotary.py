"""Fused M-RoPE rotation of query and key: one Triton program per token, all heads, in place.

Each program reads its token's positions (three rows, one row, or ``seq_lens - 1 + delta`` for
decode), picks the row of every frequency from the layout, gathers cos and sin from the float32
``[cos | sin]`` cache, and rotates the first ``rotary_dim`` channels of every query and key head in
float32, storing the result rounded once to the input dtype. Channels past ``rotary_dim`` are not
touched. The kernel does not differentiate (inference path); use :func:`mrope.rotary.apply_mrope`
for gradients.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl

if TYPE_CHECKING:
    from ..rotary import MRotaryEmbedding

_LAYOUT_IDS = {"chunked": 0, "interleaved": 1, "ernie": 2}
_POS_3D, _POS_1D, _POS_DECODE = 0, 1, 2


@triton.jit
def _rotate_heads(
    base_ptr,
    row_stride,
    head_stride,
    tok,
    cos,
    sin,
    freq,
    freq_mask,
    NUM_HEADS: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
):
    heads = tl.arange(0, HEADS_PAD)[:, None]
    ptr = base_ptr + tok * row_stride + heads * head_stride
    if IS_NEOX:
        off1 = freq[None, :]
        off2 = freq[None, :] + HALF
    else:
        off1 = 2 * freq[None, :]
        off2 = 2 * freq[None, :] + 1
    mask = (heads < NUM_HEADS) & freq_mask[None, :]
    x1 = tl.load(ptr + off1, mask=mask, other=0.0)
    x2 = tl.load(ptr + off2, mask=mask, other=0.0)
    x1f = x1.to(tl.float32)
    x2f = x2.to(tl.float32)
    tl.store(ptr + off1, (x1f * cos - x2f * sin).to(x1.dtype), mask=mask)
    tl.store(ptr + off2, (x2f * cos + x1f * sin).to(x1.dtype), mask=mask)


@triton.jit
def _mrope_rotary_kernel(
    q_ptr,
    k_ptr,
    cache_ptr,
    pos_ptr,
    delta_ptr,
    q_row_stride,
    q_head_stride,
    k_row_stride,
    k_head_stride,
    pos_row_stride,
    pos_tok_stride,
    delta_stride,
    max_position,
    NUM_Q_HEADS: tl.constexpr,
    NUM_KV_HEADS: tl.constexpr,
    Q_HEADS_PAD: tl.constexpr,
    KV_HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    SECTION_0: tl.constexpr,
    SECTION_1: tl.constexpr,
    SECTION_2: tl.constexpr,
    LAYOUT: tl.constexpr,
    IS_NEOX: tl.constexpr,
    POS_MODE: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    freq = tl.arange(0, HALF_PAD)
    freq_mask = freq < HALF
    if POS_MODE == 2:
        # decode: pos_ptr holds seq_lens; the token sits at seq_len - 1, shifted by the request's delta
        pos = tl.load(pos_ptr + tok * pos_tok_stride).to(tl.int64) - 1
        pos = pos + tl.load(delta_ptr + tok * delta_stride).to(tl.int64)
        pos = tl.zeros([HALF_PAD], dtype=tl.int64) + pos
    elif POS_MODE == 1:
        pos = tl.zeros([HALF_PAD], dtype=tl.int64) + tl.load(pos_ptr + tok * pos_tok_stride).to(tl.int64)
    else:
        if LAYOUT == 0:  # chunked (t, h, w)
            row = (freq >= SECTION_0).to(tl.int64) + (freq >= SECTION_0 + SECTION_1).to(tl.int64)
        elif LAYOUT == 1:  # interleaved (t, h, w): T,H,W,T,H,W,... then t
            m = freq % 3
            row = tl.where(
                (m == 1) & (freq < 3 * SECTION_1), 1, tl.where((m == 2) & (freq < 3 * SECTION_2), 2, 0)
            )
            row = row.to(tl.int64)
        else:  # ernie (h, w, t): h and w alternate, then t
            row = tl.where(freq < SECTION_0 + SECTION_1, 1 + freq % 2, 0).to(tl.int64)
        pos = tl.load(pos_ptr + row * pos_row_stride + tok * pos_tok_stride, mask=freq_mask, other=0).to(
            tl.int64
        )
    pos = tl.minimum(tl.maximum(pos, 0), max_position - 1)
    cache_row = cache_ptr + pos * (2 * HALF)
    cos = tl.load(cache_row + freq, mask=freq_mask, other=0.0)[None, :]
    sin = tl.load(cache_row + HALF + freq, mask=freq_mask, other=0.0)[None, :]
    _rotate_heads(
        q_ptr,
        q_row_stride,
        q_head_stride,
        tok,
        cos,
        sin,
        freq,
        freq_mask,
        NUM_Q_HEADS,
        Q_HEADS_PAD,
        HALF,
        IS_NEOX,
    )
    _rotate_heads(
        k_ptr,
        k_row_stride,
        k_head_stride,
        tok,
        cos,
        sin,
        freq,
        freq_mask,
        NUM_KV_HEADS,
        KV_HEADS_PAD,
        HALF,
        IS_NEOX,
    )


def _head_strides(x: torch.Tensor, head_size: int) -> tuple[int, int, int]:
    """``(num_heads, row stride, head stride)`` in elements of a 2-D or 3-D query/key."""
    if x.ndim == 2:
        return x.shape[1] // head_size, x.stride(0), head_size * x.stride(1)
    return x.shape[1], x.stride(0), x.stride(1)


def _launch(
    rope: MRotaryEmbedding,
    query: torch.Tensor,
    key: torch.Tensor,
    pos: torch.Tensor,
    pos_row_stride: int,
    delta: torch.Tensor,
    pos_mode: int,
) -> None:
    work = []
    for x in (query, key):
        # the kernel needs unit stride along channels; anything else is rotated in a copy and written back
        work.append(x if x.stride(-1) == 1 else x.contiguous())
    q, k = work
    num_q_heads, q_row, q_head = _head_strides(q, rope.head_size)
    num_kv_heads, k_row, k_head = _head_strides(k, rope.head_size)
    num_tokens = q.shape[0]
    cache = rope.cos_sin_cache
    if cache.device != q.device:
        raise ValueError(
            f"cos_sin_cache is on {cache.device}, query on {q.device}: move the module with .to()"
        )
    half = rope.rotary_dim // 2
    heads_max = max(num_q_heads, num_kv_heads)
    if num_tokens:
        _mrope_rotary_kernel[(num_tokens,)](
            q,
            k,
            cache,
            pos,
            delta,
            q_row,
            q_head,
            k_row,
            k_head,
            pos_row_stride,
            pos.stride(-1),
            delta.stride(0) if delta.ndim else 0,
            rope.max_position,
            NUM_Q_HEADS=num_q_heads,
            NUM_KV_HEADS=num_kv_heads,
            Q_HEADS_PAD=triton.next_power_of_2(num_q_heads),
            KV_HEADS_PAD=triton.next_power_of_2(num_kv_heads),
            HALF=half,
            HALF_PAD=triton.next_power_of_2(half),
            SECTION_0=rope.mrope_section[0],
            SECTION_1=rope.mrope_section[1],
            SECTION_2=rope.mrope_section[2],
            LAYOUT=_LAYOUT_IDS[rope.layout],
            IS_NEOX=rope.is_neox_style,
            POS_MODE=pos_mode,
            num_warps=8 if heads_max * half >= 4096 else 4,
        )
    for x, w in zip((query, key), work, strict=True):
        if w is not x:
            x.copy_(w)


def mrope_rotary_inplace(
    rope: MRotaryEmbedding, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> None:
    """Rotate ``query`` and ``key`` in place in one launch; returns ``None``.

    Parameters
    ----------
    rope : MRotaryEmbedding
        Supplies ``cos_sin_cache`` (float32, on the device of ``query``), layout, sections and pairing.
    positions : torch.Tensor
        Shape ``(3, num_tokens)`` or ``(num_tokens,)``, integer, any strides, same device.
    query : torch.Tensor
        Shape ``(num_tokens, num_q_heads * head_size)`` or ``(num_tokens, num_q_heads, head_size)``.
    key : torch.Tensor
        Shape ``(num_tokens, num_kv_heads * head_size)`` or 3-D; same dtype as ``query``.

    Notes
    -----
    Inputs are not validated here; :func:`mrope.rotary.apply_mrope_inplace` validates and dispatches.
    Positions outside the cache are clamped to it.
    """
    if positions.ndim == 1:
        _launch(rope, query, key, positions, 0, positions, _POS_1D)
    else:
        _launch(rope, query, key, positions, positions.stride(0), positions, _POS_3D)


def mrope_rotary_decode_inplace(
    rope: MRotaryEmbedding,
    seq_lens: torch.Tensor,
    deltas: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
) -> None:
    """Rotate one decode token per request in place at position ``seq_lens[b] - 1 + deltas[b]``.

    Parameters
    ----------
    rope : MRotaryEmbedding
    seq_lens : torch.Tensor
        Shape ``(batch_size,)``, integer, same device as ``query``.
    deltas : torch.Tensor
        Shape ``(batch_size,)``, integer, any stride.
    query, key : torch.Tensor
        Shape ``(batch_size, heads * head_size)`` or 3-D.

    Notes
    -----
    Decode M-RoPE is 1-D RoPE: all three rows share the position, so the layout does not matter.
    """
    _launch(rope, query, key, seq_lens, 0, deltas, _POS_DECODE)
