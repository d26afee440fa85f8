"""The functional API: :func:`apply_mrope` (new tensors, differentiable) and :func:`apply_mrope_inplace`,
over a module's cache and layout, from the checks and the native ops that take tensors."""

from __future__ import annotations

import torch

from .cache import cos_sin_rows
from .checks import check_positions, check_qk, checked_or_clamped
from .module import MRotaryEmbedding
from .native import rotated_qk


def apply_mrope_inplace(
    rope: MRotaryEmbedding, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> None:
    """Rotate ``query`` and ``key`` in place with ``rope``'s cache and layout; returns ``None``.

    Shapes, dtypes and the backend choice as in :meth:`MRotaryEmbedding.forward`. Validates everything
    before writing, so a failed call leaves ``query`` and ``key`` unchanged.

    See Also
    --------
    apply_mrope : returns new tensors instead.
    """
    rope.forward(positions, query, key)


def apply_mrope(
    rope: MRotaryEmbedding, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return rotated copies of ``query`` and ``key`` (native torch path, differentiable).

    Parameters
    ----------
    rope : MRotaryEmbedding
        Supplies the cache, layout, pairing and dtype.
    positions, query, key : torch.Tensor
        As in :meth:`MRotaryEmbedding.forward`; the inputs are not modified.

    Returns
    -------
    tuple of torch.Tensor
        New ``(query, key)`` with the input shapes and dtype, contiguous.

    See Also
    --------
    apply_mrope_inplace : the in-place twin (fused Triton kernel on CUDA).
    """
    positions = check_positions(positions, query, rope.num_rows)
    check_qk(
        query,
        key,
        positions.shape[-1],
        dtype=rope.dtype,
        head_size=rope.head_size,
        rotary_dim=rope.rotary_dim,
    )
    positions = checked_or_clamped(positions, rope.max_position, rope.check_positions)
    cos_sin = cos_sin_rows(positions, rope.cos_sin_cache, rope.inv_freq, rope.freq_rows, rope.column_index)
    return rotated_qk(query, key, cos_sin, rope.head_size, rope.is_neox_style)


__all__ = ["apply_mrope", "apply_mrope_inplace"]
