"""Fused M-RoPE rotation of query and key: one Triton program per token, all heads, in place.

Each program reads its token's positions (the module's rows, one row, or ``seq_lens - 1 + delta`` for
decode), takes the row of every frequency from ``freq_rows`` (the layout, computed once by the module),
gathers cos and sin from the float32 ``[cos | sin]`` cache, and rotates the first ``rotary_dim``
channels of every query and key head in float32, storing the result rounded once to the input dtype.
Pair ``j`` becomes ``(x1 cos1 - x2 sin1, x2 cos2 + x1 sin2)``: one angle for both channels where the
table has one row per frequency, else (HunYuan-VL) the first channel's angle from its row and the
second's from its own (a table of ``rotary_dim`` rows, compiled as its own variant).
Channels past ``rotary_dim`` are not touched. The kernel does not differentiate (inference path); use
:func:`mrope.rotary.apply_mrope` for gradients.

The entry points take tensors and ints only, and are ``torch.library`` custom ops (``mrope::rotary_qk``
and ``mrope::rotary_qk_decode``) with fake implementations, so ``torch.compile`` traces them as one
node that mutates query and key.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_POS_3D, _POS_1D, _POS_DECODE = 0, 1, 2


@triton.jit
def _rotate_heads(
    base_ptr,
    row_stride,
    head_stride,
    tok,
    cos1,
    sin1,
    cos2,
    sin2,
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
    tl.store(ptr + off1, (x1f * cos1 - x2f * sin1).to(x1.dtype), mask=mask)
    tl.store(ptr + off2, (x2f * cos2 + x1f * sin2).to(x1.dtype), mask=mask)


@triton.jit
def _mrope_rotary_kernel(
    q_ptr,
    k_ptr,
    cache_ptr,
    pos_ptr,
    delta_ptr,
    rows_ptr,
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
    IS_NEOX: tl.constexpr,
    POS_MODE: tl.constexpr,
    SPLIT: tl.constexpr,
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
        row = tl.load(rows_ptr + freq, mask=freq_mask, other=0).to(tl.int64)  # 0 t, 1 h, 2 w
        pos = tl.load(pos_ptr + row * pos_row_stride + tok * pos_tok_stride, mask=freq_mask, other=0).to(
            tl.int64
        )
    pos = tl.minimum(tl.maximum(pos, 0), max_position - 1)
    cache_row = cache_ptr + pos * (2 * HALF)
    cos1 = tl.load(cache_row + freq, mask=freq_mask, other=0.0)[None, :]
    sin1 = tl.load(cache_row + HALF + freq, mask=freq_mask, other=0.0)[None, :]
    if SPLIT:
        # the pairs' second channels take their rows from the table's second half
        row2 = tl.load(rows_ptr + HALF + freq, mask=freq_mask, other=0).to(tl.int64)
        pos2 = tl.load(pos_ptr + row2 * pos_row_stride + tok * pos_tok_stride, mask=freq_mask, other=0)
        pos2 = tl.minimum(tl.maximum(pos2.to(tl.int64), 0), max_position - 1)
        cache_row2 = cache_ptr + pos2 * (2 * HALF)
        cos2 = tl.load(cache_row2 + freq, mask=freq_mask, other=0.0)[None, :]
        sin2 = tl.load(cache_row2 + HALF + freq, mask=freq_mask, other=0.0)[None, :]
    else:
        cos2 = cos1
        sin2 = sin1
    _rotate_heads(
        q_ptr,
        q_row_stride,
        q_head_stride,
        tok,
        cos1,
        sin1,
        cos2,
        sin2,
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
        cos1,
        sin1,
        cos2,
        sin2,
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
    query: torch.Tensor,
    key: torch.Tensor,
    pos: torch.Tensor,
    pos_row_stride: int,
    delta: torch.Tensor,
    freq_rows: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    is_neox_style: bool,
    pos_mode: int,
) -> None:
    work = []
    for x in (query, key):
        # the kernel needs unit stride along channels; anything else is rotated in a copy and written back
        work.append(x if x.stride(-1) == 1 else x.contiguous())
    q, k = work
    num_q_heads, q_row, q_head = _head_strides(q, head_size)
    num_kv_heads, k_row, k_head = _head_strides(k, head_size)
    num_tokens = q.shape[0]
    if cos_sin_cache.device != q.device:
        raise ValueError(
            f"cos_sin_cache is on {cos_sin_cache.device}, query on {q.device}: move the module with .to()"
        )
    half = cos_sin_cache.shape[1] // 2
    heads_max = max(num_q_heads, num_kv_heads)
    if num_tokens:
        _mrope_rotary_kernel[(num_tokens,)](
            q,
            k,
            cos_sin_cache,
            pos,
            delta,
            freq_rows,
            q_row,
            q_head,
            k_row,
            k_head,
            pos_row_stride,
            pos.stride(-1),
            delta.stride(0) if delta.ndim else 0,
            cos_sin_cache.shape[0],
            NUM_Q_HEADS=num_q_heads,
            NUM_KV_HEADS=num_kv_heads,
            Q_HEADS_PAD=triton.next_power_of_2(num_q_heads),
            KV_HEADS_PAD=triton.next_power_of_2(num_kv_heads),
            HALF=half,
            HALF_PAD=triton.next_power_of_2(half),
            IS_NEOX=is_neox_style,
            POS_MODE=pos_mode,
            SPLIT=pos_mode == _POS_3D and freq_rows.shape[0] == 2 * half,
            num_warps=8 if heads_max * half >= 4096 else 4,
        )
    for x, w in zip((query, key), work, strict=True):
        if w is not x:
            x.copy_(w)


@torch.library.custom_op("mrope::rotary_qk", mutates_args=("query", "key"))
def mrope_rotary_inplace(
    query: torch.Tensor,
    key: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    freq_rows: torch.Tensor,
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Rotate ``query`` and ``key`` in place in one launch; returns ``None``.

    Parameters
    ----------
    query : torch.Tensor
        Shape ``(num_tokens, num_q_heads * head_size)`` or ``(num_tokens, num_q_heads, head_size)``.
    key : torch.Tensor
        Shape ``(num_tokens, num_kv_heads * head_size)`` or 3-D; same dtype as ``query``.
    positions : torch.Tensor
        Shape ``(num_rows, num_tokens)`` or ``(num_tokens,)``, integer, any strides, same device.
    cos_sin_cache : torch.Tensor
        Shape ``(max_position, rotary_dim)``, float32 ``[cos | sin]``, contiguous, on the device of
        ``query``.
    freq_rows : torch.Tensor
        Shape ``(rotary_dim // 2,)``, integer, contiguous: the position row (0 t, 1 h, 2 w) of each
        frequency (:attr:`mrope.MRotaryEmbedding.freq_rows`); or ``(rotary_dim,)``: the row of each pair's
        first channel, then of its second (a layout whose pairs' channels take different rows). Unused
        for 1-D positions.
    head_size : int
        Channels per head; the first ``rotary_dim`` rotate.
    is_neox_style : bool
        NeoX pairs ``(i, i + rotary_dim // 2)``, else GPT-J pairs ``(2i, 2i + 1)``.

    Notes
    -----
    Inputs are not validated here; :func:`mrope.rotary.apply_mrope_inplace` validates and dispatches.
    Positions outside the cache are clamped to it.
    """
    if positions.ndim == 1:
        _launch(
            query, key, positions, 0, positions, freq_rows, cos_sin_cache, head_size, is_neox_style, _POS_1D
        )
    else:
        row_stride = positions.stride(0)
        _launch(
            query,
            key,
            positions,
            row_stride,
            positions,
            freq_rows,
            cos_sin_cache,
            head_size,
            is_neox_style,
            _POS_3D,
        )


@mrope_rotary_inplace.register_fake
def _rotary_qk_fake(
    query: torch.Tensor,
    key: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    freq_rows: torch.Tensor,
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Nothing to allocate: the op only mutates ``query`` and ``key``."""


@torch.library.custom_op("mrope::rotary_qk_decode", mutates_args=("query", "key"))
def mrope_rotary_decode_inplace(
    query: torch.Tensor,
    key: torch.Tensor,
    seq_lens: torch.Tensor,
    deltas: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Rotate one decode token per request in place at position ``seq_lens[b] - 1 + deltas[b]``.

    Parameters
    ----------
    query, key : torch.Tensor
        Shape ``(batch_size, heads * head_size)`` or 3-D.
    seq_lens : torch.Tensor
        Shape ``(batch_size,)``, integer, same device as ``query``.
    deltas : torch.Tensor
        Shape ``(batch_size,)``, integer, any stride.
    cos_sin_cache, head_size, is_neox_style
        As in :func:`mrope_rotary_inplace`.

    Notes
    -----
    Decode M-RoPE is 1-D RoPE: all three rows share the position, so the layout does not matter.
    """
    _launch(query, key, seq_lens, 0, deltas, seq_lens, cos_sin_cache, head_size, is_neox_style, _POS_DECODE)


@mrope_rotary_decode_inplace.register_fake
def _rotary_qk_decode_fake(
    query: torch.Tensor,
    key: torch.Tensor,
    seq_lens: torch.Tensor,
    deltas: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Nothing to allocate: the op only mutates ``query`` and ``key``."""
