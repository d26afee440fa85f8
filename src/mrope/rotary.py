"""Applying M-RoPE to query and key: the float32 cos/sin cache, the native torch path and the module.

Every family rotates ``rotary_dim`` leading channels of each head with ``rotary_dim // 2`` frequencies;
frequency ``j`` takes its angle from one of the three position rows (t, h, w). Which row is the
*layout*:

``"chunked"`` (Qwen2-VL, Qwen2.5-VL, Qwen2.5-Omni, PaddleOCR-VL, GLM-4.1V/4.5V, GLM-OCR)
    ``mrope_section = (t, h, w)``: the first ``t`` frequencies from the t row, the next ``h`` from h, the
    rest from w.
``"interleaved"`` (Qwen3-VL, Qwen3-VL-MoE, Qwen3-Omni, Qwen3.5)
    ``mrope_section = (t, h, w)``: frequency ``j`` takes h if ``j % 3 == 1 and j < 3 * h``, w if
    ``j % 3 == 2 and j < 3 * w``, else t.
``"ernie"`` (Ernie-4.5-VL)
    ``mrope_section = (h, w, t)`` as Ernie's config stores it: the first ``h + w`` frequencies alternate
    h (even ``j``) and w (odd ``j``), the rest take t.

``is_neox_style`` picks the channel pairs: NeoX pairs ``(i, i + rotary_dim // 2)``, or GPT-J pairs
``(2i, 2i + 1)`` (GLM-4.1V, GLM-OCR, Ernie). Channels past ``rotary_dim`` pass through.

The arithmetic is float32 and rounds once to the input dtype; the cache is built exactly as
transformers builds its angles, so float32 results match transformers to the last bit or two.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ._backends import overlapping
from ._errors import MRopeError
from .families import DEFAULT_MROPE_SECTIONS  # transformers' defaults, used when a config leaves it out

LAYOUTS = ("chunked", "interleaved", "ernie")
_BUFFERS = ("cos_sin_cache", "inv_freq", "freq_rows", "column_index")
BACKENDS = ("auto", "native", "triton")
#: The largest ``max_position``: float32 holds every integer up to ``2**24`` exactly, and the cache's
#: angles are ``position.float() * inv_freq`` as transformers computes them, so a larger cache would
#: repeat rows (position ``2**24 + 1`` would take the angle of ``2**24``).
MAX_POSITION_LIMIT = 2**24


@functools.lru_cache(maxsize=128)
def section_rows(layout: str, mrope_section: tuple[int, int, int]) -> tuple[int, ...]:
    """The position row (0 t, 1 h, 2 w) each of the ``sum(mrope_section)`` frequencies takes.

    Parameters
    ----------
    layout : str
        ``"chunked"``, ``"interleaved"`` or ``"ernie"`` (see the module docstring).
    mrope_section : tuple of 3 int
        ``(t, h, w)`` for chunked and interleaved, ``(h, w, t)`` for ernie.

    Returns
    -------
    tuple of int
        Length ``sum(mrope_section)``; each count of 0, 1 and 2 equals its section.

    Raises
    ------
    MRopeError
        Unknown layout, or sections that the layout cannot realise (ernie needs ``h == w``).
    """
    if layout not in LAYOUTS:
        raise MRopeError(f"layout {layout!r} is not one of {LAYOUTS}")
    half = sum(mrope_section)
    if layout == "chunked":
        t, h, _ = mrope_section
        rows = tuple(0 if j < t else 1 if j < t + h else 2 for j in range(half))
        sizes = {0: mrope_section[0], 1: mrope_section[1], 2: mrope_section[2]}
    elif layout == "interleaved":
        _, h, w = mrope_section
        rows = tuple(
            1 if j % 3 == 1 and j < 3 * h else 2 if j % 3 == 2 and j < 3 * w else 0 for j in range(half)
        )
        sizes = {0: mrope_section[0], 1: mrope_section[1], 2: mrope_section[2]}
    else:
        h, w, _ = mrope_section
        rows = tuple((1 if j % 2 == 0 else 2) if j < h + w else 0 for j in range(half))
        sizes = {1: mrope_section[0], 2: mrope_section[1], 0: mrope_section[2]}
    counts = {r: rows.count(r) for r in (0, 1, 2)}
    if counts != sizes:
        raise MRopeError(
            f"mrope_section {list(mrope_section)} cannot be laid out {layout!r}: the layout gives "
            f"t/h/w counts {counts[0]}/{counts[1]}/{counts[2]}, expected {sizes[0]}/{sizes[1]}/{sizes[2]}"
        )
    return rows


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
    inv_freq = _inv_freq(rotary_dim, base)
    freqs = torch.arange(max_position, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()


def _check_section(mrope_section: Any) -> tuple[int, int, int]:
    bad = MRopeError(f"mrope_section must be a sequence of 3 non-negative ints, got {mrope_section!r}")
    if isinstance(mrope_section, (str, bytes, Mapping)):
        raise bad
    try:
        items = list(mrope_section)
        section = tuple(operator.index(s) for s in items if not isinstance(s, bool))
    except TypeError:
        raise bad from None
    if len(items) != 3 or len(section) != 3 or any(s < 0 for s in section):
        raise bad
    return section  # type: ignore[return-value]


def _column_index(rows: tuple[int, ...]) -> torch.Tensor:
    """``row * rotary_dim + column`` of each ``[cos | sin]`` column, its frequency's row ``rows[j]``."""
    rotary_dim = 2 * len(rows)
    return torch.tensor([r * rotary_dim + c for c, r in enumerate(rows + rows)], dtype=torch.int64)


def _inv_freq(rotary_dim: int, base: float) -> torch.Tensor:
    return 1.0 / (float(base) ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))


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
    mrope_section : sequence of 3 int
        Frequencies per position row, summing to ``rotary_dim // 2``; ``(t, h, w)`` except for
        ``layout="ernie"``, which takes ``(h, w, t)`` as Ernie's config stores it.
    layout : {"chunked", "interleaved", "ernie"}, default "chunked"
        Which frequencies take which row (see :mod:`mrope.rotary`).
    is_neox_style : bool, default True
        NeoX channel pairs ``(i, i + rotary_dim // 2)``; ``False`` for GPT-J pairs ``(2i, 2i + 1)``.
    dtype : torch.dtype, default torch.bfloat16
        The dtype of query and key this module rotates; the cache and the arithmetic stay float32.
        A float cast of the module (``.to(torch.float16)``, ``.half()``) sets it and leaves the cache's
        float32 values untouched.
    backend : {"auto", "native", "triton"}, default "auto"
        ``"auto"`` runs the fused Triton kernel for CUDA tensors with integer positions when triton is
        installed, else the native torch path. ``"triton"`` forces the kernel (CPU works under
        ``TRITON_INTERPRET=1``); floating positions always take the native path.
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
    freq_rows : torch.Tensor
        Shape ``(rotary_dim // 2,)``, int64 buffer: the position row of each frequency, computed once
        from the layout here and passed to the Triton kernel.
    column_index : torch.Tensor
        Shape ``(rotary_dim,)``, int64 buffer: where each ``[cos | sin]`` column lies among a token's
        three cache rows side by side (``row * rotary_dim + column``), computed once from the layout;
        the native path picks every token's columns with it in one gather.

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
            if not _is_int(value) or value <= 0:
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
        section = _check_section(mrope_section)
        if sum(section) != rotary_dim // 2:
            raise MRopeError(
                f"mrope_section {list(section)} sums to {sum(section)}, "
                f"expected rotary_dim // 2 = {rotary_dim // 2}"
            )
        if not isinstance(layout, str) or layout not in LAYOUTS:
            raise MRopeError(f"layout {layout!r} is not one of {LAYOUTS}")
        rows = section_rows(layout, section)
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
        self.is_neox_style = bool(is_neox_style)
        self.dtype = dtype
        self.backend = backend
        self.check_positions = bool(check_positions)
        self.register_buffer(
            "cos_sin_cache", build_cos_sin_cache(max_position, rotary_dim, base), persistent=False
        )
        self.register_buffer("inv_freq", _inv_freq(rotary_dim, base), persistent=False)
        self.register_buffer("freq_rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        self.register_buffer("column_index", _column_index(rows), persistent=False)

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
        return self

    def _exact_buffer(self, name: str) -> torch.Tensor:
        if name == "cos_sin_cache":
            return build_cos_sin_cache(self.max_position, self.rotary_dim, self.base)
        if name == "inv_freq":
            return _inv_freq(self.rotary_dim, self.base)
        rows = section_rows(self.layout, self.mrope_section)
        return torch.tensor(rows, dtype=torch.int64) if name == "freq_rows" else _column_index(rows)

    def forward(
        self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``query`` and ``key`` in place and return them.

        Parameters
        ----------
        positions : torch.Tensor
            Shape ``(3, num_tokens)`` (rows t, h, w) or ``(num_tokens,)`` for text and decode tokens
            (all three rows equal); signed integer, or float32 (float64) for fractional positions
            (Qwen3-Omni), same device as ``query``. bool, unsigned and float16/bfloat16 positions are
            refused (masks in torch; rounded positions).
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
        seq_lens, deltas = _check_decode(seq_lens, deltas, query)
        if self._use_triton(query, deltas):
            from .ops.mrope_rotary import mrope_rotary_decode_inplace

            _check_qk(self, query, key, seq_lens.shape[0], writes=True)
            if self.check_positions:
                self._check_range(seq_lens - 1 + deltas)
            mrope_rotary_decode_inplace(
                query, key, seq_lens, deltas, self.cos_sin_cache, self.head_size, self.is_neox_style
            )
            return query, key
        positions = seq_lens - 1 + deltas
        apply_mrope_inplace(self, positions, query, key)
        return query, key

    def _use_triton(self, query: torch.Tensor, positions: torch.Tensor) -> bool:
        if self.backend == "native" or positions.is_floating_point():
            return False
        if self.backend == "triton":
            return True
        return query.device.type == "cuda" and _triton_available()

    def _check_range(self, positions: torch.Tensor) -> None:
        """Raise :class:`MRopeError` if positions leave the cache. It reads values back to the host, so
        torch.compile runs it outside the graph (a graph break: ``fullgraph=True`` needs
        ``check_positions=False``); wrapped only then, as ``torch.compiler.disable`` imports dynamo."""
        if torch.compiler.is_compiling():
            torch.compiler.disable(self._check_range_eagerly)(positions)
        else:
            self._check_range_eagerly(positions)

    def _check_range_eagerly(self, positions: torch.Tensor) -> None:
        if positions.numel() == 0:
            return
        if positions.is_floating_point():
            lo, hi = float(positions.min()), float(positions.max())
            ok = lo >= 0 and hi < self.max_position
        else:
            lo, hi = (int(v) for v in torch.aminmax(positions))
            ok = lo >= 0 and hi < self.max_position
        if not ok:
            raise MRopeError(
                f"positions span [{lo}, {hi}], outside the cos/sin cache [0, {self.max_position}); "
                f"raise max_position (max_position_embeddings) or check the position ids"
            )

    def _checked_or_clamped(self, positions: torch.Tensor) -> torch.Tensor:
        """Positions for the native path: range-checked (one synchronisation on CUDA) when
        ``check_positions``, else integer positions clamped to the cache as the kernel does, and
        floating positions (computed directly, no cache) left alone; without the check nothing syncs."""
        if self.check_positions:
            self._check_range(positions)
            return positions
        if positions.is_floating_point():
            return positions
        return positions.clamp(0, self.max_position - 1)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The float32 cos and sin of every token's frequencies, rows already selected by layout.

        Parameters
        ----------
        positions : torch.Tensor
            Shape ``(3, num_tokens)`` or ``(num_tokens,)``, integer (gathered from the cache) or floating
            (computed as ``positions.float() * inv_freq``, as transformers does).

        Returns
        -------
        tuple of torch.Tensor
            ``cos, sin``, each shape ``(num_tokens, rotary_dim // 2)``, float32 (views of one
            ``(num_tokens, rotary_dim)`` tensor).
        """
        rows = self._cos_sin_rows(positions)
        half = self.rotary_dim // 2
        return rows[:, :half], rows[:, half:]

    def _cos_sin_rows(self, positions: torch.Tensor) -> torch.Tensor:
        """``[cos | sin]`` of every token, shape ``(num_tokens, rotary_dim)``, float32 (see :meth:`cos_sin`).

        Integer positions take two gathers whatever the layout: each token's three cache rows, side by
        side, then its columns from them (``column_index``, computed at construction).
        """
        device = positions.device
        if positions.is_floating_point():
            if positions.ndim == 1:
                per_freq = positions[None, :].expand(self.rotary_dim // 2, -1)
            else:
                per_freq = positions.index_select(0, self.freq_rows.to(device))
            freqs = per_freq.t().float() * self.inv_freq.to(device)  # (num_tokens, rotary_dim // 2)
            return torch.cat((freqs.cos(), freqs.sin()), dim=-1)
        if positions.dtype not in (torch.int64, torch.int32):
            positions = positions.long()  # int8/int16 cannot index
        cache = self.cos_sin_cache.to(device)
        if positions.ndim == 1:
            return cache.index_select(0, positions)
        rows = cache.index_select(0, positions.t().reshape(-1)).view(-1, 3 * self.rotary_dim)
        return rows.index_select(1, self.column_index.to(device))


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


def _is_int(value: Any) -> bool:
    """A Python or numpy integer, not a bool (as :class:`mrope.PositionTable` takes them)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _check_qk(
    rope: MRotaryEmbedding, query: torch.Tensor, key: torch.Tensor, num_tokens: int, writes: bool = False
) -> None:
    """Shapes, dtypes and devices of ``query`` and ``key``; with ``writes`` (the in-place calls) also
    that both can be written in place, so that a refusal comes before the first write."""
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, torch.Tensor):
            raise MRopeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        _check_dense(name, x)
        if x.dtype != rope.dtype:
            raise MRopeError(f"{name} has dtype {x.dtype}, expected {rope.dtype} (the module's dtype)")
        if x.ndim == 2:
            if x.shape[1] % rope.head_size:
                raise MRopeError(
                    f"{name} has {x.shape[1]} channels per token, "
                    f"not a multiple of head_size {rope.head_size}"
                )
        elif x.ndim == 3:
            if x.shape[2] != rope.head_size:
                raise MRopeError(f"{name} has head size {x.shape[2]}, expected head_size {rope.head_size}")
        else:
            raise MRopeError(
                f"{name} must be (num_tokens, heads * head_size) or 3-D, got shape {tuple(x.shape)}"
            )
        if x.shape[0] != num_tokens:
            raise MRopeError(f"{name} has {x.shape[0]} tokens, positions have {num_tokens}")
        if x.device != query.device:
            raise MRopeError(f"{name} is on {x.device}, query on {query.device}")
        if writes and not torch.compiler.is_compiling():
            _check_writable(name, x, rope.head_size, rope.rotary_dim)


def _check_dense(name: str, x: torch.Tensor) -> None:
    if x.is_nested or x.layout is not torch.strided:
        kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        raise MRopeError(f"{name} is a {kind} tensor: pass a dense (strided) tensor")


def _check_writable(name: str, x: torch.Tensor, head_size: int, rotary_dim: int) -> None:
    """Refuse what would make an in-place write of ``x``'s rotated channels fail, or write wrong
    values: an inference tensor outside inference mode, and channels that share memory (an
    ``expand()`` or ``as_strided`` view)."""
    if x.is_inference() and not torch.is_inference_mode_enabled():
        raise MRopeError(
            f"{name} is an inference tensor (made under torch.inference_mode()), which cannot be written in "
            "place outside inference mode: call under torch.inference_mode(), or pass a clone()"
        )
    if x.is_contiguous():
        return
    stride = x.stride()
    if x.ndim == 2:  # (tokens, heads * head_size) as (tokens, heads, rotary_dim)
        if stride[1] == 1 and stride[0] >= x.shape[1]:  # rows of a wider tensor (a fused qkv)
            return
        shape = (x.shape[0], x.shape[1] // head_size, rotary_dim)
        strides = (stride[0], stride[1] * head_size, stride[1])
    else:
        if stride[2] == 1 and stride[1] >= head_size and stride[0] >= stride[1] * x.shape[1]:
            return
        shape, strides = (*x.shape[:2], rotary_dim), stride
    if overlapping(shape, strides):
        raise MRopeError(
            f"{name} has elements sharing memory (shape {tuple(x.shape)}, strides {x.stride()}, e.g. an "
            "expand()ed tensor): it cannot be rotated in place; pass a clone(), or use apply_mrope"
        )


_SIGNED_INTS = (torch.int64, torch.int32, torch.int16, torch.int8)
_EXACT_FLOATS = (torch.float32, torch.float64)


def _check_position_dtype(name: str, dtype: torch.dtype) -> None:
    """Positions are signed integers, or float32/float64 for fractional ids (Qwen3-Omni).

    bool and uint8 index as masks in torch; float16/bfloat16 round positions (bf16 holds integers exactly
    only up to 256: 3001 becomes 3008), so both are refused rather than silently misread.
    """
    if dtype in _SIGNED_INTS or dtype in _EXACT_FLOATS:
        return
    if dtype.is_floating_point:
        exact = round(2 / torch.finfo(dtype).eps)  # 2 ** (mantissa bits + 1)
        raise MRopeError(
            f"{name} have dtype {dtype}, which holds integers exactly only up to {exact} and rounds larger "
            f"positions: pass integer positions (int64/int32), or float32 for fractional ones"
        )
    raise MRopeError(
        f"{name} must be signed integers (int64/int32) or float32 for fractional ids, got {dtype}"
        + (" (bool and uint8 tensors index as masks in torch)" if dtype in (torch.bool, torch.uint8) else "")
    )


def _check_positions(positions: Any, query: torch.Tensor) -> torch.Tensor:
    if not isinstance(positions, torch.Tensor):
        raise MRopeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    _check_dense("positions", positions)
    _check_position_dtype("positions", positions.dtype)
    if positions.ndim not in (1, 2) or (positions.ndim == 2 and positions.shape[0] != 3):
        raise MRopeError(
            f"positions must have shape (3, num_tokens) or (num_tokens,), got {tuple(positions.shape)}"
        )
    if isinstance(query, torch.Tensor) and positions.device != query.device:
        raise MRopeError(f"positions are on {positions.device}, query on {query.device}")
    return positions


def _check_decode(seq_lens: Any, deltas: Any, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    for name, x in (("seq_lens", seq_lens), ("deltas", deltas)):
        if not isinstance(x, torch.Tensor):
            raise MRopeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        _check_dense(name, x)
        if isinstance(query, torch.Tensor) and x.device != query.device:
            raise MRopeError(f"{name} is on {x.device}, query on {query.device}")
    if seq_lens.ndim != 1 or seq_lens.dtype not in _SIGNED_INTS:
        raise MRopeError(
            f"seq_lens must be a 1-D integer tensor, got shape {tuple(seq_lens.shape)} {seq_lens.dtype}"
        )
    if deltas.ndim == 2 and deltas.shape[1] == 1:
        deltas = deltas[:, 0]
    if deltas.shape != seq_lens.shape:
        raise MRopeError(
            f"deltas must have shape ({seq_lens.shape[0]},) like seq_lens, got {tuple(deltas.shape)}"
        )
    _check_position_dtype("deltas", deltas.dtype)
    return seq_lens, deltas


#: Elements of each work buffer of the CPU path (1 MiB in float32). Rotating a chunk of tokens at a
#: time keeps its rows in the core's cache between the passes; whole-tensor temporaries spill to memory
#: and page-fault on every call (three times slower in bfloat16).
_CHUNK_ELEMENTS = 1 << 18


def _halves(rot: torch.Tensor, is_neox_style: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The two channel sets of each rotated pair: NeoX halves, or GPT-J even and odd channels."""
    if is_neox_style:
        half = rot.shape[-1] // 2
        return rot[..., :half], rot[..., half:]
    return rot[..., 0::2], rot[..., 1::2]


def _heads(x: torch.Tensor, head_size: int) -> torch.Tensor:
    """``x`` as ``(num_tokens, num_heads, head_size)`` (a view)."""
    return x.view(x.shape[0], x.shape[1] // head_size, head_size) if x.ndim == 2 else x


def _paired(first: torch.Tensor, second: torch.Tensor, is_neox_style: bool) -> torch.Tensor:
    """The channels whose :func:`_halves` are ``first`` and ``second`` (a new tensor)."""
    if is_neox_style:
        return torch.cat((first, second), dim=-1)
    return torch.stack((first, second), dim=-1).flatten(-2)


def _cos_sin_factors(
    cos_sin: torch.Tensor, dtype: torch.dtype, is_neox_style: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The factors of the rotation ``x * C + (x2 * -sin, x1 * sin)`` from ``(num_tokens, rotary_dim)``
    ``[cos | sin]``: ``C`` (halves ``(cos, cos)``, ``(num_tokens, 1, rotary_dim)``), ``-sin`` and
    ``sin`` (``(num_tokens, 1, rotary_dim // 2)``), in the compute dtype of ``dtype`` (float32, or
    float64 for float64 inputs)."""
    cos, sin = cos_sin.to(torch.promote_types(dtype, torch.float32))[:, None].chunk(2, dim=-1)
    return _paired(cos, cos, is_neox_style), -sin, sin


def _rotated(
    rot: torch.Tensor, factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor], is_neox_style: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotated channel sets of ``rot`` (``(num_tokens, num_heads, rotary_dim)``), new tensors in the
    compute dtype: ``x1 * cos - x2 * sin`` and ``x2 * cos + x1 * sin``, each product rounded (the float32
    arithmetic of transformers in float32)."""
    cos, sin = _halves(factors[0], is_neox_style)[0], factors[2]
    x1, x2 = (h.to(cos.dtype) for h in _halves(rot, is_neox_style))
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


def _rotate_inplace(
    x: torch.Tensor,
    factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Rotate the first ``rotary_dim`` channels of every head of ``x`` in place (``factors`` from
    :func:`_cos_sin_factors`); the result rounds once to ``x``'s dtype.

    On the CPU: the products ``x2 * -sin`` and ``x1 * sin``, then ``x * C`` plus them in place, the bits
    of :func:`_rotated` (``a + b * -s`` is ``a - b * s`` exactly). A tensor of more than one chunk goes
    a chunk of tokens at a time through work buffers that stay in the core's cache (the products into
    the halves of a scratch ``P``, then ``x * C + P`` over whole rows). On other devices and under
    torch.compile (which fuses the ops) :func:`_rotated` computes the values whole.
    """
    heads = _heads(x, head_size)
    rotary_dim = factors[0].shape[-1]
    rot = heads if rotary_dim == head_size else heads[..., :rotary_dim]
    if heads.device.type != "cpu" or torch.compiler.is_compiling():
        (x1, x2), (o1, o2) = _halves(rot, is_neox_style), _rotated(rot, factors, is_neox_style)
        x1.copy_(o1)
        x2.copy_(o2)
        return
    num_tokens, num_heads = heads.shape[0], heads.shape[1]
    if num_tokens == 0:
        return
    chunk = min(num_tokens, max(1, _CHUNK_ELEMENTS // (num_heads * rotary_dim)))
    compute = factors[0].dtype
    if chunk == num_tokens:  # one chunk: fresh tensors, the fewest calls
        work = rot if x.dtype == compute else rot.to(compute)
        (x1, x2), (cos2, minus_sin, sin) = _halves(work, is_neox_style), factors
        p1, p2 = x2 * minus_sin, x1 * sin
        work.mul_(cos2)
        x1.add_(p1)
        x2.add_(p2)
        if work is not rot:
            rot.copy_(work)
        return
    pieces = zip(rot.split(chunk), *(f.split(chunk) for f in factors), strict=True)
    scratch = torch.empty((chunk, num_heads, rotary_dim), dtype=compute)
    whole = (scratch, *_halves(scratch, is_neox_style))
    if x.dtype == compute:
        for part, *chunk_factors in pieces:
            p, p1, p2 = whole if part.shape[0] == chunk else (b[: part.shape[0]] for b in whole)
            _rotate_chunk(part, *_halves(part, is_neox_style), *chunk_factors, p, p1, p2)
        return
    # a lower precision: rotate a float32 copy of each chunk, round it back once
    work = torch.empty((chunk, num_heads, rotary_dim), dtype=compute)
    whole += (work, *_halves(work, is_neox_style))
    for part, *chunk_factors in pieces:
        p, p1, p2, w, x1, x2 = whole if part.shape[0] == chunk else (b[: part.shape[0]] for b in whole)
        w.copy_(part)
        _rotate_chunk(w, x1, x2, *chunk_factors, p, p1, p2)
        part.copy_(w)


def _rotate_chunk(
    x: torch.Tensor,
    x1: torch.Tensor,
    x2: torch.Tensor,
    cos2: torch.Tensor,
    minus_sin: torch.Tensor,
    sin: torch.Tensor,
    p: torch.Tensor,
    p1: torch.Tensor,
    p2: torch.Tensor,
) -> None:
    """``x = x * cos2 + p`` in place with ``p``'s halves ``p1 = x2 * -sin`` and ``p2 = x1 * sin`` (``x1``,
    ``x2`` the halves of ``x``, ``cos2`` the cos factor of both halves)."""
    torch.mul(x2, minus_sin, out=p1)
    torch.mul(x1, sin, out=p2)
    x.mul_(cos2).add_(p)


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
    positions = _check_positions(positions, query)
    _check_qk(rope, query, key, positions.shape[-1], writes=True)
    if rope._use_triton(query, positions):
        from .ops.mrope_rotary import mrope_rotary_inplace

        if rope.check_positions:
            rope._check_range(positions)
        mrope_rotary_inplace(
            query, key, positions, rope.cos_sin_cache, rope.freq_rows, rope.head_size, rope.is_neox_style
        )
        return
    cos_sin = rope._cos_sin_rows(rope._checked_or_clamped(positions))
    factors = _cos_sin_factors(cos_sin, query.dtype, rope.is_neox_style)
    with torch.no_grad():
        _rotate_inplace(query, factors, rope.head_size, rope.is_neox_style)
        _rotate_inplace(key, factors, rope.head_size, rope.is_neox_style)


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
    positions = _check_positions(positions, query)
    _check_qk(rope, query, key, positions.shape[-1])
    outs = []
    cos_sin = rope._cos_sin_rows(rope._checked_or_clamped(positions))
    factors = _cos_sin_factors(cos_sin, query.dtype, rope.is_neox_style)
    for x in (query, key):
        num_heads = x.shape[1] // rope.head_size if x.ndim == 2 else x.shape[1]
        heads = x.reshape(x.shape[0], num_heads, rope.head_size)
        rot = _paired(
            *_rotated(heads[..., : rope.rotary_dim], factors, rope.is_neox_style), rope.is_neox_style
        )
        out = torch.cat((rot.to(x.dtype), heads[..., rope.rotary_dim :]), dim=-1)
        outs.append(out.reshape(x.shape))
    return outs[0], outs[1]


def rotary_embedding_from_config(
    text_config: Mapping[str, Any] | Any,
    *,
    layout: str,
    is_neox_style: bool,
    dtype: torch.dtype = torch.bfloat16,
    backend: str = "auto",
    check_positions: bool = True,
    max_position: int | None = None,
    positions_factor: int = 1,
) -> MRotaryEmbedding:
    """Build the :class:`MRotaryEmbedding` a transformers text config describes.

    Parameters
    ----------
    text_config : dict or transformers config
        The *text* config (``config.text_config.to_dict()``; Omni: ``thinker_config.text_config``), or
        a raw ``config.json`` dict of the same level. Reads ``head_dim`` (else ``hidden_size //
        num_attention_heads``), ``max_position_embeddings``, and from ``rope_parameters`` (5.x), else
        ``rope_scaling`` plus top-level keys (4.x ``config.json``): ``rope_theta``, ``rope_type``,
        ``mrope_section`` (else the family default from ``model_type``), ``partial_rotary_factor``.
    layout : {"chunked", "interleaved", "ernie"}
    is_neox_style : bool
    dtype : torch.dtype, default torch.bfloat16
    backend : {"auto", "native", "triton"}, default "auto"
    check_positions : bool, default True
        As in :class:`MRotaryEmbedding` (``check_positions=False`` for engines and CUDA graphs).
    max_position : int, optional
        The cache size; by default ``max_position_embeddings * positions_factor``.
    positions_factor : int, default 1
        Multiplies ``max_position_embeddings`` to size the cache. M-RoPE positions can exceed the token
        count: a Qwen2.5-VL video's time row grows with its duration (``tokens_per_second`` positions per
        second), so a prompt of ``max_position_embeddings`` tokens can reach past the cache. vLLM sizes
        its M-RoPE cache ``4 * max_position_embeddings``; pass ``positions_factor=4`` to do the same
        with ``check_positions=False``, where a position past the cache is clamped silently.

    Returns
    -------
    MRotaryEmbedding

    Raises
    ------
    MRopeError
        A missing key, a rope type other than default/mrope (scaled RoPE is not M-RoPE here), or a
        config that contradicts ``layout``.
    """
    cfg = text_config.to_dict() if hasattr(text_config, "to_dict") else text_config
    if not isinstance(cfg, Mapping):
        raise MRopeError(
            f"text_config must be a dict or a transformers config, got {type(text_config).__name__}"
        )
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}

    def need(key: str, value: Any) -> Any:
        if value is None:
            raise MRopeError(f"text config (model_type {cfg.get('model_type')!r}) has no {key}")
        return value

    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise MRopeError(f"rope type {rope_type!r} is not supported; expected 'default' (or legacy 'mrope')")
    if rope.get("mrope_interleaved") and layout != "interleaved":
        raise MRopeError(f"config sets mrope_interleaved but layout is {layout!r}")

    def positive(key: str, value: Any) -> int:
        if not _is_int(value) or value <= 0:
            raise MRopeError(
                f"text config (model_type {cfg.get('model_type')!r}) has {key} = {value!r}, "
                "expected a positive int"
            )
        return int(value)

    head_size = cfg.get("head_dim")
    if head_size is None or head_size == 0:  # as transformers: hidden_size // num_attention_heads
        hidden_size = positive("hidden_size", need("hidden_size", cfg.get("hidden_size")))
        heads = positive("num_attention_heads", need("num_attention_heads", cfg.get("num_attention_heads")))
        head_size = hidden_size // heads
    head_size = positive("head_dim", head_size)
    factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if (
        not isinstance(factor, (int, float, np.integer, np.floating))
        or isinstance(factor, (bool, np.bool_))
        or not 0 < factor <= 1
    ):
        raise MRopeError(f"partial_rotary_factor must be a number in (0, 1], got {factor!r}")
    section = rope.get("mrope_section") or DEFAULT_MROPE_SECTIONS.get(cfg.get("model_type", ""))
    if max_position is None:
        if not _is_int(positions_factor) or positions_factor < 1:
            raise MRopeError(f"positions_factor must be a positive int, got {positions_factor!r}")
        max_position = need("max_position_embeddings", cfg.get("max_position_embeddings")) * positions_factor
    return MRotaryEmbedding(
        head_size,
        int(head_size * factor),
        max_position,
        need("rope_theta", rope.get("rope_theta", cfg.get("rope_theta"))),
        [int(s) for s in need("mrope_section", section)],
        layout=layout,
        is_neox_style=is_neox_style,
        dtype=dtype,
        backend=backend,
        check_positions=check_positions,
    )


__all__ = [
    "LAYOUTS",
    "MRotaryEmbedding",
    "apply_mrope",
    "apply_mrope_inplace",
    "rotary_embedding_from_config",
]
