"""The float32 ``[cos | sin]`` cache, built as transformers computes its angles, and the gather of every
token's ``[cos | sin]`` row from it (or computed directly for fractional positions)."""

from __future__ import annotations

import torch

from .layouts import is_split

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


def row_table(rows: tuple[int, ...]) -> torch.Tensor:
    """The row table of the Triton kernel and of floating positions, from :func:`~.layouts.pair_rows`: one
    row per frequency ``(rotary_dim // 2,)`` where both channels of every pair agree, else each channel's
    ``(rotary_dim,)`` (first channels, then second)."""
    return torch.tensor(rows if is_split(rows) else rows[: len(rows) // 2], dtype=torch.int64)


def column_index(rows: tuple[int, ...]) -> torch.Tensor:
    """``row * rotary_dim + column`` of each ``[cos | sin]`` column among a token's cache rows side by side,
    from :func:`~.layouts.pair_rows`: the first channels' ``[cos | sin]``, then, where the pairs' channels
    take different rows, the second channels'."""
    rotary_dim = len(rows)
    half = rotary_dim // 2
    sides = (rows[:half], rows[half:]) if is_split(rows) else (rows[:half],)
    return torch.tensor(
        [r * rotary_dim + c for side in sides for c, r in enumerate(side + side)], dtype=torch.int64
    )


def cos_sin_rows(
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    inverse_freq: torch.Tensor,
    table: torch.Tensor,
    columns: torch.Tensor,
) -> torch.Tensor:
    """``[cos | sin]`` of every token, float32, on ``positions``' device: shape ``(num_tokens, rotary_dim)``,
    or ``(num_tokens, 2, rotary_dim)`` (the pairs' first channels', then their second channels') for a
    layout whose pairs' channels take different rows and positions of several rows.

    Integer positions (``(num_rows, num_tokens)`` or ``(num_tokens,)``, inside the cache) take two gathers
    whatever the layout: each token's cache rows side by side, then its columns from them (``columns``,
    from :func:`column_index`). Floating positions are computed as ``positions.float() * inverse_freq``,
    each angle from its row in ``table`` (:func:`row_table`), as transformers does.
    """
    device = positions.device
    rotary_dim = cos_sin_cache.shape[1]
    half = rotary_dim // 2
    if positions.is_floating_point():
        if positions.ndim == 1:
            per_angle = positions[None, :].expand(half, -1)
        else:
            per_angle = positions.index_select(0, table.to(device))
        sides = per_angle.shape[0] // half  # 1, or 2 where the pairs' channels take their own rows
        freqs = (per_angle.t().float() * inverse_freq.to(device).repeat(sides)).reshape(-1, sides, half)
        cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
        return cos_sin.reshape(-1, rotary_dim) if sides == 1 else cos_sin
    if positions.dtype not in (torch.int64, torch.int32):
        positions = positions.long()  # int8/int16 cannot index
    cache = cos_sin_cache.to(device)
    if positions.ndim == 1:
        return cache.index_select(0, positions)
    rows = cache.index_select(0, positions.t().reshape(-1)).view(-1, positions.shape[0] * rotary_dim)
    picked = rows.index_select(1, columns.to(device))
    return picked if columns.shape[0] == rotary_dim else picked.view(-1, 2, rotary_dim)


__all__ = [
    "MAX_POSITION_LIMIT",
    "build_cos_sin_cache",
    "column_index",
    "cos_sin_rows",
    "inv_freq",
    "row_table",
]
