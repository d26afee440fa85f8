"""The float32 ``[cos | sin]`` cache, built as transformers computes its angles, and the gather of every
token's ``[cos | sin]`` row from it (or computed directly for fractional positions)."""

from __future__ import annotations

import torch

#: The largest ``max_position``: float32 holds every integer up to ``2**24`` exactly, and the cache's
#: angles are ``position.float() * inv_freq`` as transformers computes them, so a larger cache would
#: repeat rows (position ``2**24 + 1`` would take the angle of ``2**24``).
MAX_POSITION_LIMIT = 2**24


def build_cos_sin_cache(max_position: int, rotary_dim: int, base: float) -> torch.Tensor:
    """The float32 ``[cos | sin]`` table of every integer position, as transformers computes it.

    ``inv_freq = 1 / base ** (arange(0, rotary_dim, 2) / rotary_dim)`` and the angle
    ``position.float() * inv_freq``, both in float32 torch arithmetic.

    Returns
    -------
    torch.Tensor
        Shape ``(max_position, rotary_dim)``, float32, CPU: ``cos`` in the first ``rotary_dim // 2``
        columns, ``sin`` in the rest.
    """
    inverse = inv_freq(rotary_dim, base)
    freqs = torch.arange(max_position, dtype=torch.int64).float()[:, None] * inverse[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()


def inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    """``1 / base ** (arange(0, rotary_dim, 2) / rotary_dim)`` in float32, shape ``(rotary_dim // 2,)``."""
    return 1.0 / (float(base) ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))


def column_index(rows: tuple[int, ...]) -> torch.Tensor:
    """``row * rotary_dim + column`` of each ``[cos | sin]`` column, its frequency's row ``rows[j]``."""
    rotary_dim = 2 * len(rows)
    return torch.tensor([r * rotary_dim + c for c, r in enumerate(rows + rows)], dtype=torch.int64)


def cos_sin_rows(
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    inverse_freq: torch.Tensor,
    freq_rows: torch.Tensor,
    columns: torch.Tensor,
) -> torch.Tensor:
    """``[cos | sin]`` of every token, shape ``(num_tokens, rotary_dim)``, float32, on ``positions``' device.

    Integer positions (``(3, num_tokens)`` or ``(num_tokens,)``, inside the cache) take two gathers
    whatever the layout: each token's three cache rows side by side, then its columns from them
    (``columns``, from :func:`column_index`). Floating positions are computed as
    ``positions.float() * inverse_freq``, each frequency from its row ``freq_rows``, as transformers does.
    """
    device = positions.device
    rotary_dim = cos_sin_cache.shape[1]
    if positions.is_floating_point():
        if positions.ndim == 1:
            per_freq = positions[None, :].expand(rotary_dim // 2, -1)
        else:
            per_freq = positions.index_select(0, freq_rows.to(device))
        freqs = per_freq.t().float() * inverse_freq.to(device)  # (num_tokens, rotary_dim // 2)
        return torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    if positions.dtype not in (torch.int64, torch.int32):
        positions = positions.long()  # int8/int16 cannot index
    cache = cos_sin_cache.to(device)
    if positions.ndim == 1:
        return cache.index_select(0, positions)
    rows = cache.index_select(0, positions.t().reshape(-1)).view(-1, 3 * rotary_dim)
    return rows.index_select(1, columns.to(device))


__all__ = ["MAX_POSITION_LIMIT", "build_cos_sin_cache", "column_index", "cos_sin_rows", "inv_freq"]
