"""The checks at the rotary boundary: positions, query and key (shape, dtype, device, writable in place),
decode inputs, and positions against the cache (checked, or clamped as the kernel does)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .._arrays import overlapping
from .._errors import MRopeError

SIGNED_INTS = (torch.int64, torch.int32, torch.int16, torch.int8)
EXACT_FLOATS = (torch.float32, torch.float64)


def is_int(value: Any) -> bool:
    """A Python or numpy integer, not a bool (as :class:`mrope.PositionTable` takes them)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_qk(
    query: torch.Tensor,
    key: torch.Tensor,
    num_tokens: int,
    *,
    dtype: torch.dtype,
    head_size: int,
    rotary_dim: int,
    writes: bool = False,
) -> None:
    """Shapes, dtypes (``dtype``, the module's) and devices of ``query`` and ``key``; with ``writes`` (the
    in-place calls) also that both can be written in place, so that a refusal comes before the first write."""
    for name, x in (("query", query), ("key", key)):
        if not isinstance(x, torch.Tensor):
            raise MRopeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        check_dense(name, x)
        if x.dtype != dtype:
            raise MRopeError(f"{name} has dtype {x.dtype}, expected {dtype} (the module's dtype)")
        if x.ndim == 2:
            if x.shape[1] % head_size:
                raise MRopeError(
                    f"{name} has {x.shape[1]} channels per token, not a multiple of head_size {head_size}"
                )
        elif x.ndim == 3:
            if x.shape[2] != head_size:
                raise MRopeError(f"{name} has head size {x.shape[2]}, expected head_size {head_size}")
        else:
            raise MRopeError(
                f"{name} must be (num_tokens, heads * head_size) or 3-D, got shape {tuple(x.shape)}"
            )
        if x.shape[0] != num_tokens:
            raise MRopeError(f"{name} has {x.shape[0]} tokens, positions have {num_tokens}")
        if x.device != query.device:
            raise MRopeError(f"{name} is on {x.device}, query on {query.device}")
        if writes and not torch.compiler.is_compiling():
            check_writable(name, x, head_size, rotary_dim)


def check_dense(name: str, x: torch.Tensor) -> None:
    """Refuse a nested or sparse tensor: the rotary paths index dense (strided) memory."""
    if x.is_nested or x.layout is not torch.strided:
        kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        raise MRopeError(f"{name} is a {kind} tensor: pass a dense (strided) tensor")


def check_writable(name: str, x: torch.Tensor, head_size: int, rotary_dim: int) -> None:
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


def check_position_dtype(name: str, dtype: torch.dtype) -> None:
    """Positions are signed integers, or float32/float64 for fractional ids (Qwen3-Omni).

    bool and uint8 index as masks in torch; float16/bfloat16 round positions (bf16 holds integers exactly
    only up to 256: 3001 becomes 3008), so both are refused rather than silently misread.
    """
    if dtype in SIGNED_INTS or dtype in EXACT_FLOATS:
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


def check_positions(positions: Any, query: torch.Tensor, num_rows: int = 3) -> torch.Tensor:
    """``positions`` if it is a dense ``(num_rows, num_tokens)`` or ``(num_tokens,)`` tensor of a position
    dtype on ``query``'s device; :class:`MRopeError` otherwise."""
    if not isinstance(positions, torch.Tensor):
        raise MRopeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    check_dense("positions", positions)
    check_position_dtype("positions", positions.dtype)
    if positions.ndim not in (1, 2) or (positions.ndim == 2 and positions.shape[0] != num_rows):
        raise MRopeError(
            f"positions must have shape ({num_rows}, num_tokens) or (num_tokens,), "
            f"got {tuple(positions.shape)}"
        )
    if isinstance(query, torch.Tensor) and positions.device != query.device:
        raise MRopeError(f"positions are on {positions.device}, query on {query.device}")
    return positions


def check_decode(seq_lens: Any, deltas: Any, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``seq_lens`` and ``deltas`` (a ``(batch_size, 1)`` delta column as ``(batch_size,)``) once checked:
    dense tensors on ``query``'s device, integer lengths, one delta per request."""
    for name, x in (("seq_lens", seq_lens), ("deltas", deltas)):
        if not isinstance(x, torch.Tensor):
            raise MRopeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        check_dense(name, x)
        if isinstance(query, torch.Tensor) and x.device != query.device:
            raise MRopeError(f"{name} is on {x.device}, query on {query.device}")
    if seq_lens.ndim != 1 or seq_lens.dtype not in SIGNED_INTS:
        raise MRopeError(
            f"seq_lens must be a 1-D integer tensor, got shape {tuple(seq_lens.shape)} {seq_lens.dtype}"
        )
    if deltas.ndim == 2 and deltas.shape[1] == 1:
        deltas = deltas[:, 0]
    if deltas.shape != seq_lens.shape:
        raise MRopeError(
            f"deltas must have shape ({seq_lens.shape[0]},) like seq_lens, got {tuple(deltas.shape)}"
        )
    check_position_dtype("deltas", deltas.dtype)
    return seq_lens, deltas


def check_range(positions: torch.Tensor, max_position: int) -> None:
    """Raise :class:`MRopeError` if positions leave the cache ``[0, max_position)``. It reads values back to
    the host, so torch.compile runs it outside the graph (a graph break: ``fullgraph=True`` needs
    ``check_positions=False``); wrapped only then, as ``torch.compiler.disable`` imports dynamo."""
    if torch.compiler.is_compiling():
        torch.compiler.disable(_check_range_eagerly)(positions, max_position)
    else:
        _check_range_eagerly(positions, max_position)


def _check_range_eagerly(positions: torch.Tensor, max_position: int) -> None:
    if positions.numel() == 0:
        return
    if positions.is_floating_point():
        lo, hi = float(positions.min()), float(positions.max())
    else:
        lo, hi = (int(v) for v in torch.aminmax(positions))
    if not (lo >= 0 and hi < max_position):
        raise MRopeError(
            f"positions span [{lo}, {hi}], outside the cos/sin cache [0, {max_position}); "
            f"raise max_position (max_position_embeddings) or check the position ids"
        )


def checked_or_clamped(positions: torch.Tensor, max_position: int, check: bool) -> torch.Tensor:
    """Positions for the native path: range-checked (one synchronisation on CUDA) when ``check``, else
    integer positions clamped to the cache as the kernel does, and floating positions (computed directly,
    no cache) left alone; without the check nothing syncs."""
    if check:
        check_range(positions, max_position)
        return positions
    if positions.is_floating_point():
        return positions
    return positions.clamp(0, max_position - 1)


__all__ = [
    "EXACT_FLOATS",
    "SIGNED_INTS",
    "check_decode",
    "check_dense",
    "check_position_dtype",
    "check_positions",
    "check_qk",
    "check_range",
    "check_writable",
    "checked_or_clamped",
    "is_int",
]
