"""HunYuan-VL's rotary in transformers 5.24 (``HunYuanVLRotaryEmbedding`` and ``apply_rotary_pos_emb``),
the peer of mrope's rotary layout ``"hunyuan"``, and the hypothesis cases both paths are checked on
(tests/test_rotary.py: native; tests/ops/test_mrope_rotary.py: Triton)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

#: head_dim of the drawn cases: half 4, 10 (not a power of two), 24, 64 (the checkpoints' 128)
HEAD_DIMS = (8, 20, 48, 128)
MAX_POSITION = 4096


def hunyuan_text_config(
    section: list[int], *, alpha: float | None = None, theta: float = 1e4, max_position: int = MAX_POSITION
) -> Any:
    """transformers' ``HunYuanVLTextConfig`` of head_dim ``2 * sum(section)``: rope type ``"default"``, or
    ``"dynamic"`` with a fixed ``alpha`` (its NTK-alpha, as the checkpoints' legacy ``"xdrope"`` reads)."""
    from transformers import CONFIG_MAPPING

    rope = {"rope_type": "default", "rope_theta": theta, "mrope_section": list(section)}
    if alpha is not None:
        rope.update(rope_type="dynamic", alpha=alpha, factor=1.0)
    head_dim = 2 * sum(section)
    text = {
        "head_dim": head_dim,
        "hidden_size": 2 * head_dim,
        "num_attention_heads": 2,
        "max_position_embeddings": max_position,
        "rope_parameters": rope,
    }
    return CONFIG_MAPPING["hunyuan_vl"](text_config=text).text_config


def hunyuan_reference(text_config: Any, positions: Any, query: Any, key: Any) -> tuple[Any, Any]:
    """transformers' rotation of ``query`` and ``key`` (``(num_tokens, heads, head_dim)``, returned so)
    at ``positions`` (``(num_dims, num_tokens)``, or ``(num_tokens,)`` for all rows equal)."""
    from transformers.models.hunyuan_vl import modeling_hunyuan_vl as modeling

    rotary = modeling.HunYuanVLRotaryEmbedding(text_config)
    q, k = (x.transpose(0, 1)[None] for x in (query, key))  # (1, heads, num_tokens, head_dim)
    cos, sin = rotary(q, positions[..., None, :])
    out_q, out_k = modeling.apply_rotary_pos_emb(q, k, cos, sin)
    return out_q[0].transpose(0, 1), out_k[0].transpose(0, 1)


@dataclass
class HunyuanCase:
    """One drawn case: sections, NTK alpha (None: default rope), tokens, heads and a seed for the tensors."""

    section: list[int]
    alpha: float | None
    num_tokens: int
    num_q_heads: int
    num_kv_heads: int
    text_tokens: int  # leading tokens whose rows are equal (text)
    seed: int

    @property
    def head_dim(self) -> int:
        return 2 * sum(self.section)

    def tensors(self, dtype: Any) -> tuple[Any, Any, Any]:
        """``(positions, query, key)``: positions ``(num_dims, num_tokens)`` int64 below
        :data:`MAX_POSITION`, query and key ``(num_tokens, heads, head_dim)`` of ``dtype``."""
        import torch

        g = torch.Generator().manual_seed(self.seed)
        positions = torch.randint(0, MAX_POSITION, (len(self.section), self.num_tokens), generator=g)
        positions[1:, : self.text_tokens] = positions[0, : self.text_tokens].clone()
        shape = (self.num_tokens, self.head_dim)
        q = torch.randn(shape[0], self.num_q_heads, shape[1], generator=g).to(dtype)
        k = torch.randn(shape[0], self.num_kv_heads, shape[1], generator=g).to(dtype)
        return positions, q, k


@st.composite
def hunyuan_cases(draw: Any, *, max_dims: int = 5, max_tokens: int = 9, max_heads: int = 4) -> HunyuanCase:
    """HunYuan-VL rotary cases: 1 to ``max_dims`` rows (4 as often as the rest together), sections
    splitting half of a head of :data:`HEAD_DIMS` (zero-width ones too), default or NTK-alpha rope."""
    num_dims = draw(st.one_of(st.just(4), st.integers(1, max_dims)), label="num_dims")
    half = draw(st.sampled_from(HEAD_DIMS), label="head_dim") // 2
    cuts = sorted(draw(st.lists(st.integers(0, half), min_size=num_dims - 1, max_size=num_dims - 1)))
    section = [b - a for a, b in zip([0, *cuts], [*cuts, half], strict=True)]
    alpha = draw(st.sampled_from([None, 1000.0, 2.5]), label="alpha")
    num_tokens = draw(st.integers(1, max_tokens), label="num_tokens")
    return HunyuanCase(
        section=section,
        alpha=alpha,
        num_tokens=num_tokens,
        num_q_heads=draw(st.integers(1, max_heads), label="q heads"),
        num_kv_heads=draw(st.integers(1, 2), label="kv heads"),
        text_tokens=draw(st.integers(0, num_tokens), label="text tokens"),
        seed=draw(st.integers(0, 2**16), label="seed"),
    )


__all__ = [
    "HEAD_DIMS",
    "MAX_POSITION",
    "HunyuanCase",
    "hunyuan_cases",
    "hunyuan_reference",
    "hunyuan_text_config",
]
