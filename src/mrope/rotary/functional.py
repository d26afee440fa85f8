"""The M-RoPE operations on query and key, over a module's cache and layout (:class:`RotaryState`):
:func:`apply_mrope_inplace` and :func:`apply_mrope_decode_inplace` rotate in place on the module's path
(native torch or the Triton kernel); :func:`apply_mrope` returns new tensors (native, differentiable).

:class:`mrope.rotary.MRotaryEmbedding` holds the state and its ``forward`` calls these functions, so
each operation is written once.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .cache import cos_sin_rows
from .checks import check_decode, check_positions, check_qk, check_range, checked_or_clamped
from .native import rotate_qk_inplace, rotated_qk


class RotaryState(Protocol):
    """What the operations read of a module (:class:`mrope.rotary.MRotaryEmbedding` has it all): its
    sizes and options, the path of integer positions, and the float32 cache and layout tables."""

    head_size: int
    rotary_dim: int
    max_position: int
    num_rows: int
    is_neox_style: bool
    dtype: torch.dtype
    check_positions: bool
    #: ``"native"`` or ``"triton"``: the path integer positions take
    path: str
    cos_sin_cache: torch.Tensor
    inv_freq: torch.Tensor
    freq_rows: torch.Tensor
    column_index: torch.Tensor


def apply_mrope_inplace(
    rope: RotaryState, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> None:
    """Rotate ``query`` and ``key`` in place with ``rope``'s cache and layout; returns ``None``.

    Shapes and dtypes as in :meth:`mrope.rotary.MRotaryEmbedding.forward`. Integer positions take
    ``rope.path`` (the fused Triton kernel or native torch), floating positions native torch. Validates
    everything before writing, so a failed call leaves ``query`` and ``key`` unchanged.

    See Also
    --------
    apply_mrope : returns new tensors instead.
    """
    positions = check_positions(positions, query, rope.num_rows)
    _check_qk(rope, query, key, positions.shape[-1])
    if rope.path == "triton" and not positions.is_floating_point():
        from ..ops.mrope_rotary import mrope_rotary_inplace

        if rope.check_positions:
            check_range(positions, rope.max_position)
        mrope_rotary_inplace(
            query, key, positions, rope.cos_sin_cache, rope.freq_rows, rope.head_size, rope.is_neox_style
        )
        return
    cos_sin = token_cos_sin(rope, checked_or_clamped(positions, rope.max_position, rope.check_positions))
    rotate_qk_inplace(query, key, cos_sin, rope.head_size, rope.is_neox_style)


def apply_mrope_decode_inplace(
    rope: RotaryState, seq_lens: torch.Tensor, deltas: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> None:
    """Rotate one decode token per request in place, at position ``seq_lens[b] - 1 + deltas[b]`` on all
    rows; returns ``None``. Shapes as in :meth:`mrope.rotary.MRotaryEmbedding.forward_decode`; integer
    deltas on the Triton path run its decode kernel (the positions are never materialised)."""
    seq_lens, deltas = check_decode(seq_lens, deltas, query)
    if rope.path == "triton" and not deltas.is_floating_point():
        from ..ops.mrope_rotary import mrope_rotary_decode_inplace

        _check_qk(rope, query, key, seq_lens.shape[0])
        if rope.check_positions:
            check_range(seq_lens - 1 + deltas, rope.max_position)
        mrope_rotary_decode_inplace(
            query, key, seq_lens, deltas, rope.cos_sin_cache, rope.head_size, rope.is_neox_style
        )
        return
    apply_mrope_inplace(rope, seq_lens - 1 + deltas, query, key)


def apply_mrope(
    rope: RotaryState, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return rotated copies of ``query`` and ``key`` (native torch path, differentiable).

    Parameters
    ----------
    rope : MRotaryEmbedding
        Supplies the cache, layout, pairing and dtype.
    positions, query, key : torch.Tensor
        As in :meth:`mrope.rotary.MRotaryEmbedding.forward`; the inputs are not modified.

    Returns
    -------
    tuple of torch.Tensor
        New ``(query, key)`` with the input shapes and dtype, contiguous.

    See Also
    --------
    apply_mrope_inplace : the in-place twin (fused Triton kernel on CUDA).
    """
    positions = check_positions(positions, query, rope.num_rows)
    _check_qk(rope, query, key, positions.shape[-1], writes=False)
    positions = checked_or_clamped(positions, rope.max_position, rope.check_positions)
    return rotated_qk(query, key, token_cos_sin(rope, positions), rope.head_size, rope.is_neox_style)


def token_cos_sin(rope: RotaryState, positions: torch.Tensor) -> torch.Tensor:
    """``[cos | sin]`` of every token's frequencies, float32, rows selected by the layout
    (:func:`mrope.rotary.cache.cos_sin_rows` over the module's tables)."""
    return cos_sin_rows(positions, rope.cos_sin_cache, rope.inv_freq, rope.freq_rows, rope.column_index)


def _check_qk(
    rope: RotaryState, query: torch.Tensor, key: torch.Tensor, num_tokens: int, *, writes: bool = True
) -> None:
    """:func:`mrope.rotary.checks.check_qk` with the module's dtype and sizes (``writes``: for the
    in-place calls, which also refuse tensors they cannot write)."""
    check_qk(
        query,
        key,
        num_tokens,
        dtype=rope.dtype,
        head_size=rope.head_size,
        rotary_dim=rope.rotary_dim,
        writes=writes,
    )


__all__ = ["RotaryState", "apply_mrope", "apply_mrope_decode_inplace", "apply_mrope_inplace"]
