"""The native torch rotation, taking tensors: query and key rotated in place (a chunked CPU kernel that
keeps its work buffers in the core's cache) or into new tensors (differentiable), from every token's
float32 ``[cos | sin]`` row (:func:`mrope.rotary.cache.cos_sin_rows`): one for both channels of every
pair, or one for the pairs' first channels and one for their second (``(num_tokens, 2, rotary_dim)``)."""

from __future__ import annotations

import torch


def rotate_qk_inplace(
    query: torch.Tensor, key: torch.Tensor, cos_sin: torch.Tensor, head_size: int, is_neox_style: bool
) -> None:
    """Rotate the first ``rotary_dim`` channels (``cos_sin.shape[-1]``) of every head of ``query`` and ``key``
    in place, in float32 (float64 for float64 inputs) rounded once to their dtype; ``cos_sin`` has shape
    ``(num_tokens, rotary_dim)`` or ``(num_tokens, 2, rotary_dim)`` (:func:`_cos_sin_factors`)."""
    factors = _cos_sin_factors(cos_sin, query.dtype, is_neox_style)
    with torch.no_grad():
        _rotate_inplace(query, factors, head_size, is_neox_style)
        _rotate_inplace(key, factors, head_size, is_neox_style)


def rotated_qk(
    query: torch.Tensor, key: torch.Tensor, cos_sin: torch.Tensor, head_size: int, is_neox_style: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """New ``(query, key)`` rotated as :func:`rotate_qk_inplace` rotates them (input shapes and dtype,
    contiguous, differentiable); the inputs are not modified."""
    rotary_dim = cos_sin.shape[-1]
    factors = _cos_sin_factors(cos_sin, query.dtype, is_neox_style)
    outs = []
    for x in (query, key):
        num_heads = x.shape[1] // head_size if x.ndim == 2 else x.shape[1]
        heads = x.reshape(x.shape[0], num_heads, head_size)
        rot = _paired(*_rotated(heads[..., :rotary_dim], factors, is_neox_style), is_neox_style)
        out = torch.cat((rot.to(x.dtype), heads[..., rotary_dim:]), dim=-1)
        outs.append(out.reshape(x.shape))
    return outs[0], outs[1]


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
    """The factors of the rotation ``x * C + (x2 * -sin1, x1 * sin2)``: ``C`` (halves ``(cos1, cos2)``,
    ``(num_tokens, 1, rotary_dim)``), ``-sin1`` and ``sin2`` (``(num_tokens, 1, rotary_dim // 2)``), in
    the compute dtype of ``dtype`` (float32, or float64 for float64 inputs). ``cos_sin`` is
    ``(num_tokens, rotary_dim)`` ``[cos | sin]`` of both channels of every pair, or
    ``(num_tokens, 2, rotary_dim)``: the first channels' ``[cos1 | sin1]``, then the second's."""
    compute = cos_sin.to(torch.promote_types(dtype, torch.float32))
    if compute.ndim == 2:
        cos1, sin1 = cos2, sin2 = compute[:, None].chunk(2, dim=-1)
    else:
        (cos1, sin1), (cos2, sin2) = (side[:, None].chunk(2, dim=-1) for side in compute.unbind(1))
    return _paired(cos1, cos2, is_neox_style), -sin1, sin2


def _rotated(
    rot: torch.Tensor, factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor], is_neox_style: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotated channel sets of ``rot`` (``(num_tokens, num_heads, rotary_dim)``), new tensors in the
    compute dtype: ``x1 * cos1 - x2 * sin1`` and ``x2 * cos2 + x1 * sin2``, each product rounded (the
    float32 arithmetic of transformers in float32)."""
    (cos1, cos2), minus_sin1, sin2 = _halves(factors[0], is_neox_style), factors[1], factors[2]
    x1, x2 = (h.to(cos1.dtype) for h in _halves(rot, is_neox_style))
    return x1 * cos1 + x2 * minus_sin1, x2 * cos2 + x1 * sin2


def _rotate_inplace(
    x: torch.Tensor,
    factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    head_size: int,
    is_neox_style: bool,
) -> None:
    """Rotate the first ``rotary_dim`` channels of every head of ``x`` in place (``factors`` from
    :func:`_cos_sin_factors`); the result rounds once to ``x``'s dtype.

    On the CPU: the products ``x2 * -sin1`` and ``x1 * sin2``, then ``x * C`` plus them in place, the bits
    of :func:`_rotated`. A tensor of more than one chunk goes
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
    """``x = x * cos2 + p`` in place with ``p``'s halves ``p1 = x2 * -sin1`` and ``p2 = x1 * sin2`` (``x1``,
    ``x2`` the halves of ``x``, ``cos2`` the cos factor of both halves)."""
    torch.mul(x2, minus_sin, out=p1)
    torch.mul(x1, sin, out=p2)
    x.mul_(cos2).add_(p)


__all__ = ["rotate_qk_inplace", "rotated_qk"]
