"""The :class:`MRotaryEmbedding` a transformers text config describes (:func:`rotary_embedding_from_config`),
and the one of a family (:func:`rotary_embedding_for`: the family gives its text config, layout, pairing
and default ``mrope_section`` as arguments, so this module needs nothing of :mod:`mrope.families`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from .._errors import MRopeError
from .checks import is_int
from .layouts import SPLIT_LAYOUTS
from .module import MRotaryEmbedding


def rotary_embedding_from_config(
    text_config: Mapping[str, Any] | Any,
    *,
    layout: str,
    is_neox_style: bool,
    default_mrope_section: Sequence[int] | None = None,
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
        ``mrope_section`` (else ``default_mrope_section``), ``partial_rotary_factor``.
        With ``layout="hunyuan"``, HunYuan-VL's keys too: ``xdrope_section`` (``mrope_section``'s legacy
        name), and rope type ``"dynamic"`` (legacy ``"xdrope"``) with a fixed ``alpha``, the NTK-alpha
        base ``rope_theta * alpha ** (head_dim / (head_dim - 2))`` as transformers computes it.
    layout : {"chunked", "interleaved", "ernie", "hunyuan"}
    is_neox_style : bool
    default_mrope_section : sequence of int, optional
        The ``mrope_section`` of a config that states none: transformers' class default for its model
        (:meth:`mrope.Family.rotary_arguments` gives its family's). Without it such a config is refused.
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
        A missing key, a rope type other than default/mrope (scaled RoPE is not M-RoPE here; HunYuan-VL's
        fixed-alpha NTK is read with ``layout="hunyuan"``), or a config that contradicts ``layout``.
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
    ntk_alpha = layout in SPLIT_LAYOUTS and rope_type in ("dynamic", "xdrope")
    if ntk_alpha:
        alpha = rope.get("alpha")
        if not is_real(alpha) or not math.isfinite(alpha) or not alpha > 0:
            raise MRopeError(
                f"rope type {rope_type!r} needs a fixed alpha > 0 (HunYuan-VL's NTK-alpha), got {alpha!r}: "
                "dynamic NTK scaling, which changes with the sequence length, is not supported"
            )
    elif rope_type not in ("default", "mrope"):
        raise MRopeError(f"rope type {rope_type!r} is not supported; expected 'default' (or legacy 'mrope')")
    if rope.get("mrope_interleaved") and layout != "interleaved":
        raise MRopeError(f"config sets mrope_interleaved but layout is {layout!r}")

    def positive(key: str, value: Any) -> int:
        if not is_int(value) or value <= 0:
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
    if not is_real(factor) or not 0 < factor <= 1:
        raise MRopeError(f"partial_rotary_factor must be a number in (0, 1], got {factor!r}")
    section = (
        rope.get("mrope_section")
        or (rope.get("xdrope_section") if layout in SPLIT_LAYOUTS else None)
        or default_mrope_section
    )
    if max_position is None:
        if not is_int(positions_factor) or positions_factor < 1:
            raise MRopeError(f"positions_factor must be a positive int, got {positions_factor!r}")
        max_position = need("max_position_embeddings", cfg.get("max_position_embeddings")) * positions_factor
    base = need("rope_theta", rope.get("rope_theta", cfg.get("rope_theta")))
    if ntk_alpha and is_real(base):  # transformers' compute_ntk_alpha_rope_parameters, in Python floats
        if head_size <= 2:
            raise MRopeError(
                f"NTK-alpha needs head_dim > 2 (alpha ** (head_dim / (head_dim - 2))), got {head_size}"
            )
        base = base * rope["alpha"] ** (head_size / (head_size - 2))
    return MRotaryEmbedding(
        head_size,
        int(head_size * factor),
        max_position,
        base,
        [int(s) for s in need("mrope_section", section)],
        layout=layout,
        is_neox_style=is_neox_style,
        dtype=dtype,
        backend=backend,
        check_positions=check_positions,
    )


class RotaryFamily(Protocol):
    """What :func:`rotary_embedding_for` reads of a family (:class:`mrope.Family` has it)."""

    model_type: str
    #: rows of positions the family gives
    num_dims: int

    def rotary_arguments(self) -> dict[str, Any]:
        """The arguments of :func:`rotary_embedding_from_config` the family decides."""
        ...


def rotary_embedding_for(family: RotaryFamily, **options: Any) -> MRotaryEmbedding:
    """The :class:`MRotaryEmbedding` of a family's text config, taking the family's rows of positions.

    Parameters
    ----------
    family : mrope.Family
        From :func:`mrope.from_config`: its :meth:`~mrope.Family.rotary_arguments` give the text config,
        the layout, the pairing and the default ``mrope_section``.
    **options
        ``dtype``, ``backend``, ``check_positions``, ``max_position``, ``positions_factor``: as in
        :func:`rotary_embedding_from_config` (``check_positions=False`` for engines and CUDA graphs;
        ``positions_factor`` or ``max_position`` to size the cache past the token count).

    Returns
    -------
    MRotaryEmbedding
        Taking the family's ``num_dims`` rows of positions (layout ``"hunyuan"``: one per
        ``mrope_section`` entry).

    Raises
    ------
    MRopeError
        As :func:`rotary_embedding_from_config`, and where the layout and ``mrope_section`` take another
        number of rows than the family gives.

    Examples
    --------
    >>> family = mrope.from_config(config)  # doctest: +SKIP
    >>> rope = rotary_embedding_for(family, dtype=torch.bfloat16)  # doctest: +SKIP
    """
    rope = rotary_embedding_from_config(**family.rotary_arguments(), **options)
    if rope.num_rows != family.num_dims:
        raise MRopeError(
            f"{family.model_type} gives {family.num_dims} rows of positions, but its rotary layout "
            f"{rope.layout!r} with mrope_section {list(rope.mrope_section)} takes {rope.num_rows}"
        )
    return rope


def is_real(value: Any) -> bool:
    """A Python or numpy real number, not a bool (a config's float field)."""
    numeric = isinstance(value, (int, float, np.integer, np.floating))
    return numeric and not isinstance(value, (bool, np.bool_))


__all__ = ["RotaryFamily", "rotary_embedding_for", "rotary_embedding_from_config"]
