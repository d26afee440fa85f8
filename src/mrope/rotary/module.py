"""The M-RoPE module: :class:`MRotaryEmbedding` checks its parameters, holds the cache and the layout
tables as buffers, and chooses the path of integer positions (native or Triton) once per device; its
``forward`` runs the operations of :mod:`mrope.rotary.functional`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .._errors import MRopeError
from .cache import MAX_POSITION_LIMIT, build_cos_sin_cache, column_index, inv_freq, row_table
from .checks import is_int
from .functional import apply_mrope_decode_inplace, apply_mrope_inplace, token_cos_sin
from .layouts import LAYOUTS, SPLIT_LAYOUTS, check_section, layout_num_rows, pair_rows

BACKENDS = ("auto", "native", "triton")
_BUFFERS = ("cos_sin_cache", "inv_freq", "freq_rows", "column_index")


class MRotaryEmbedding(nn.Module):
    """Multimodal rotary position embedding, applied to query and key in place.

    Parameters
    ----------
    head_size : int
        Channels per head (``head_dim``).
    rotary_dim : int
        Leading channels of each head that rotate; even, ``<= head_size``. The tail passes through.
    max_position : int
        Number of positions in the cos/sin cache (at most ``2**24``); integer positions must lie in
        ``[0, max_position)``. M-RoPE positions can exceed the token count (a Qwen2.5-VL video's time
        row grows with its duration): size the cache for the longest prompt's largest position, e.g.
        ``4 * max_position_embeddings`` as vLLM does (``positions_factor=4`` in
        :func:`rotary_embedding_from_config`).
    base : float
        RoPE base (``rope_theta``).
    mrope_section : sequence of int
        Frequencies per position row, summing to ``rotary_dim // 2``: 3 of them, ``(t, h, w)`` except for
        ``layout="ernie"``, which takes ``(h, w, t)`` as Ernie's config stores it; for
        ``layout="hunyuan"`` one per row of positions (HunYuan-VL's ``num_dims``, 4 in its checkpoints).
    layout : {"chunked", "interleaved", "ernie", "hunyuan"}, default "chunked"
        Which frequencies take which row (see :mod:`mrope.rotary`).
    is_neox_style : bool, default True
        NeoX channel pairs ``(i, i + rotary_dim // 2)``; ``False`` for GPT-J pairs ``(2i, 2i + 1)``.
    dtype : torch.dtype, default torch.bfloat16
        The dtype of query and key this module rotates; the cache and the arithmetic stay float32.
        A float cast of the module (``.to(torch.float16)``, ``.half()``) sets it and leaves the cache's
        float32 values untouched.
    backend : {"auto", "native", "triton"}, default "auto"
        ``"auto"`` runs the fused Triton kernel for integer positions when the module is on CUDA and
        triton is installed, else the native torch path (chosen once, see :attr:`path`). ``"triton"``
        forces the kernel (CPU works under ``TRITON_INTERPRET=1``); floating positions always take the
        native path.
    check_positions : bool, default True
        Check that positions lie in the cache and raise :class:`MRopeError` if not (one device
        synchronisation on CUDA). With ``False`` nothing synchronises (CUDA graphs can capture the
        call) and out-of-range integer positions are clamped silently to ``[0, max_position - 1]``
        on both paths, so rotated values are wrong past the cache: size ``max_position`` for the
        largest position the prompts can reach. Floating positions are computed directly, not
        read from the cache, so the clamp never applies to them.

    Attributes
    ----------
    cos_sin_cache : torch.Tensor
        Shape ``(max_position, rotary_dim)``, float32 buffer (not persistent): ``[cos | sin]``.
    num_rows : int
        Rows of positions the module takes, ``(num_rows, num_tokens)``: 3 (t, h, w), or
        ``len(mrope_section)`` for ``layout="hunyuan"``.
    freq_rows : torch.Tensor
        Shape ``(rotary_dim // 2,)``, int64 buffer: the position row of each frequency, computed once
        from the layout here and passed to the Triton kernel; shape ``(rotary_dim,)`` (the pairs' first
        channels, then their second) for a layout whose pairs' channels take different rows.
    column_index : torch.Tensor
        Shape ``(rotary_dim,)`` (``(2 * rotary_dim,)`` where the pairs' channels take different rows),
        int64 buffer: where each ``[cos | sin]`` column lies among a token's cache rows side by side
        (``row * rotary_dim + column``), computed once from the layout; the native path picks every
        token's columns with it in one gather.
    path : str
        ``"native"`` or ``"triton"``: the path integer positions take, chosen from ``backend`` at
        construction and again when the module moves (``.to(device)``), not per call.

    Examples
    --------
    >>> rope = MRotaryEmbedding(128, 128, 4096, 1e6, [16, 24, 24], dtype=torch.float32)
    >>> q, k = torch.randn(5, 28 * 128), torch.randn(5, 4 * 128)
    >>> q, k = rope(torch.arange(15).view(3, 5), q, k)
    >>> q.shape, k.shape
    (torch.Size([5, 3584]), torch.Size([5, 512]))
    """

    def __init__(
        self,
        head_size: int,
        rotary_dim: int,
        max_position: int,
        base: float,
        mrope_section: Sequence[int],
        *,
        layout: str = "chunked",
        is_neox_style: bool = True,
        dtype: torch.dtype = torch.bfloat16,
        backend: str = "auto",
        check_positions: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("head_size", head_size),
            ("rotary_dim", rotary_dim),
            ("max_position", max_position),
        ):
            if not is_int(value) or value <= 0:
                raise MRopeError(f"{name} must be a positive int, got {value!r}")
        head_size, rotary_dim, max_position = int(head_size), int(rotary_dim), int(max_position)
        if max_position > MAX_POSITION_LIMIT:
            raise MRopeError(
                f"max_position {max_position} exceeds {MAX_POSITION_LIMIT} (2**24): float32 angles are exact "
                f"only up to 2**24, and the cache would take {max_position * rotary_dim * 4 / 2**30:.1f} GiB"
            )
        if rotary_dim % 2 or rotary_dim > head_size:
            raise MRopeError(f"rotary_dim {rotary_dim} must be even and at most head_size {head_size}")
        if (
            not isinstance(base, (int, float, np.integer, np.floating))
            or isinstance(base, (bool, np.bool_))
            or not math.isfinite(base)
            or not base > 1
        ):
            raise MRopeError(f"base (rope_theta) must be a finite number > 1, got {base!r}")
        if not isinstance(layout, str) or layout not in LAYOUTS:
            raise MRopeError(f"layout {layout!r} is not one of {LAYOUTS}")
        section = check_section(mrope_section, None if layout in SPLIT_LAYOUTS else 3)
        if sum(section) != rotary_dim // 2:
            raise MRopeError(
                f"mrope_section {list(section)} sums to {sum(section)}, "
                f"expected rotary_dim // 2 = {rotary_dim // 2}"
            )
        rows = pair_rows(layout, section)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise MRopeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise MRopeError(f"backend {backend!r} is not one of {BACKENDS}")
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position = max_position
        self.base = float(base)
        self.mrope_section = section
        self.layout = layout
        self.num_rows = layout_num_rows(layout, section)
        self.is_neox_style = bool(is_neox_style)
        self.dtype = dtype
        self.backend = backend
        self.check_positions = bool(check_positions)
        self.register_buffer(
            "cos_sin_cache", build_cos_sin_cache(max_position, rotary_dim, base), persistent=False
        )
        self.register_buffer("inv_freq", inv_freq(rotary_dim, base), persistent=False)
        self.register_buffer("freq_rows", row_table(rows), persistent=False)
        self.register_buffer("column_index", column_index(rows), persistent=False)
        self.path = self._chosen_path()

    def extra_repr(self) -> str:
        return (
            f"head_size={self.head_size}, rotary_dim={self.rotary_dim}, max_position={self.max_position}, "
            f"base={self.base}, mrope_section={list(self.mrope_section)}, layout={self.layout!r}, "
            f"is_neox_style={self.is_neox_style}, dtype={self.dtype}, backend={self.backend!r}, "
            f"check_positions={self.check_positions}"
        )

    def _apply(self, fn, recurse=True):
        """Move the module as asked, but keep the float32 cache values through float casts.

        ``.to(torch.bfloat16)``, ``.half()``, ``.double()`` set :attr:`dtype` (the dtype of query and
        key) and leave ``cos_sin_cache`` and ``inv_freq`` float32 with their values unchanged (not
        rounded through the new dtype); ``.to(device)`` moves them. ``to_empty`` rebuilds them and the
        layout tables (``freq_rows``, ``column_index``).
        """
        kept = {name: getattr(self, name) for name in _BUFFERS}
        cast = _float_cast_of(fn)
        super()._apply(fn, recurse)
        for name, before in kept.items():
            after = getattr(self, name)
            if before.device.type == "meta" and after.device.type != "meta":
                before = self._exact_buffer(name)  # to_empty after a meta-device construction
            if after is not before:
                setattr(self, name, before.to(after.device))  # the float32 values, on the new device
        if cast is not None:
            self.dtype = cast
        self.path = self._chosen_path()
        return self

    def _chosen_path(self) -> str:
        """The path of integer positions on the cache's device: ``"auto"`` takes Triton on CUDA where
        triton imports."""
        if self.backend == "triton":
            return "triton"
        if self.backend == "auto" and self.cos_sin_cache.device.type == "cuda" and _triton_available():
            return "triton"
        return "native"

    def _exact_buffer(self, name: str) -> torch.Tensor:
        if name == "cos_sin_cache":
            return build_cos_sin_cache(self.max_position, self.rotary_dim, self.base)
        if name == "inv_freq":
            return inv_freq(self.rotary_dim, self.base)
        rows = pair_rows(self.layout, self.mrope_section)
        return row_table(rows) if name == "freq_rows" else column_index(rows)

    def forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``query`` and ``key`` in place and return them.

        Parameters
        ----------
        positions : torch.Tensor
            Shape ``(num_rows, num_tokens)`` (rows t, h, w; HunYuan-VL's ``num_dims`` rows for
            ``layout="hunyuan"``) or ``(num_tokens,)`` for text and decode tokens (all rows equal);
            signed integer, or float32 (float64) for fractional positions (Qwen3-Omni), same device as
            ``query``. bool, unsigned and float16/bfloat16 positions are refused (masks in torch; rounded
            positions).
        query : torch.Tensor
            Shape ``(num_tokens, num_q_heads * head_size)`` or ``(num_tokens, num_q_heads, head_size)``,
            dtype ``self.dtype``; may be a strided view (e.g. into a fused qkv tensor).
        key : torch.Tensor
            Shape ``(num_tokens, num_kv_heads * head_size)`` or 3-D like ``query``; same dtype and device.

        Returns
        -------
        tuple of torch.Tensor
            ``(query, key)``: the same tensor objects, rotated.

        Raises
        ------
        MRopeError
            Bad shape, dtype or device, or positions outside ``[0, max_position)``; nothing is written.

        See Also
        --------
        apply_mrope : the out-of-place, differentiable twin.
        MRotaryEmbedding.forward_decode : decode tokens from ``seq_lens`` and per-row deltas.
        """
        apply_mrope_inplace(self, positions, query, key)
        return query, key

    def forward_decode(
        self, seq_lens: torch.Tensor, deltas: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate one decode token per request in place: position ``seq_lens[b] - 1 + deltas[b]`` on all rows.

        Parameters
        ----------
        seq_lens : torch.Tensor
            Shape ``(batch_size,)``, integer: each request's length including the new token.
        deltas : torch.Tensor
            Shape ``(batch_size,)`` or ``(batch_size, 1)``, integer (float32 for fractional Qwen3-Omni
            deltas, which take the native path): each request's M-RoPE delta.
        query, key : torch.Tensor
            Shape ``(batch_size, heads * head_size)`` (or 3-D), as in :meth:`forward`.

        Returns
        -------
        tuple of torch.Tensor
            ``(query, key)``, the same objects, rotated.
        """
        apply_mrope_decode_inplace(self, seq_lens, deltas, query, key)
        return query, key

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 cos and sin of every token's frequencies, rows already selected by layout.

        Parameters
        ----------
        positions : torch.Tensor
            Shape ``(num_rows, num_tokens)`` or ``(num_tokens,)``, integer (gathered from the cache) or
            floating (computed as ``positions.float() * inv_freq``, as transformers does).

        Returns
        -------
        tuple of torch.Tensor
            ``cos, sin``, each shape ``(num_tokens, rotary_dim // 2)``, float32 (views of one
            ``(num_tokens, rotary_dim)`` tensor). For ``layout="hunyuan"``, whose pairs' channels can take
            different rows, each ``(num_tokens, rotary_dim)``: the pairs' first channels', then their
            second's (transformers' ``cos`` and ``sin`` of every channel).
        """
        rows = token_cos_sin(self, positions)
        half = self.rotary_dim // 2
        if self.layout not in SPLIT_LAYOUTS:
            return rows[:, :half], rows[:, half:]
        sides = rows.view(-1, 1, self.rotary_dim).expand(-1, 2, -1) if rows.ndim == 2 else rows
        return sides[..., :half].reshape(-1, self.rotary_dim), sides[..., half:].reshape(-1, self.rotary_dim)


def _float_cast_of(fn: Any) -> torch.dtype | None:
    """The floating dtype ``fn`` (the function ``nn.Module._apply`` maps over tensors) casts to, if any."""
    try:
        to64 = fn(torch.empty(0, dtype=torch.float64)).dtype
        to16 = fn(torch.empty(0, dtype=torch.float16)).dtype
    except Exception:  # a function that only makes sense for real buffers: not a cast
        return None
    if to64 == to16 and to64.is_floating_point:
        return to64
    return None


def _triton_available() -> bool:
    """Whether triton imports (asked only for a module on CUDA, so a CPU module never imports it)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["BACKENDS", "MRotaryEmbedding"]
