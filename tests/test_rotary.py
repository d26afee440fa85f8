"""The native M-RoPE path (mrope.rotary) against each family's rotary code in transformers 5.24."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mrope._errors import MRopeError
from mrope.rotary import (
    MRotaryEmbedding,
    apply_mrope,
    build_cos_sin_cache,
    pair_rows,
    rotary_embedding_for,
    rotary_embedding_from_config,
    section_rows,
)
from support.hunyuan_rotary import HunyuanCase, hunyuan_cases, hunyuan_reference, hunyuan_text_config
from support.peers import require_module

transformers = require_module("transformers")
from transformers import CONFIG_MAPPING  # noqa: E402


def _rope(theta, section, **extra):
    return {
        "rope_parameters": {"rope_type": "default", "rope_theta": theta, "mrope_section": section, **extra}
    }


_QWEN2 = {"hidden_size": 256, "num_attention_heads": 2, **_rope(1e6, [16, 24, 24])}
_QWEN3 = {"head_dim": 128, "hidden_size": 256, "num_attention_heads": 2, **_rope(5e6, [24, 20, 20])}
_QWEN35 = {"head_dim": 256, "hidden_size": 512, "num_attention_heads": 2}
_QWEN35.update(_rope(1e7, [11, 11, 10], partial_rotary_factor=0.25))
_GLM = {"hidden_size": 256, "num_attention_heads": 2, **_rope(1e4, [8, 12, 12], partial_rotary_factor=0.5)}

# model_type: (modeling module, text rotary class, layout, is_neox_style, checkpoint-like text config)
FAMILIES = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLRotaryEmbedding", "chunked", True, _QWEN2),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding", "chunked", True, _QWEN2),
    "qwen2_5_omni": ("qwen2_5_omni", "Qwen2_5OmniRotaryEmbedding", "chunked", True, _QWEN2),
    "paddleocr_vl": (
        "paddleocr_vl",
        "PaddleOCRRotaryEmbedding",
        "chunked",
        True,
        {**_QWEN2, **_rope(5e5, [16, 24, 24])},
    ),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLTextRotaryEmbedding", "interleaved", True, _QWEN3),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeTextRotaryEmbedding", "interleaved", True, _QWEN3),
    "qwen3_omni_moe": (
        "qwen3_omni_moe",
        "Qwen3OmniMoeThinkerTextRotaryEmbedding",
        "interleaved",
        True,
        _QWEN3,
    ),
    "qwen3_5": ("qwen3_5", "Qwen3_5TextRotaryEmbedding", "interleaved", True, _QWEN35),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeTextRotaryEmbedding", "interleaved", True, _QWEN35),
    "glm4v": ("glm4v", "Glm4vTextRotaryEmbedding", "chunked", False, _GLM),
    "glm46v": ("glm4v", "Glm4vTextRotaryEmbedding", "chunked", False, _GLM),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeTextRotaryEmbedding", "chunked", True, {**_GLM, "head_dim": 128}),
    "glm_ocr": ("glm_ocr", "GlmOcrTextRotaryEmbedding", "chunked", False, _GLM),
    # the rope slice of its MLA heads (qk_rope_head_dim), Qwen3-VL's interleaved sections, GPT-J pairs
    "hy_v4_vl": (
        "hy_v4_vl",
        "HYV4VLRotaryEmbedding",
        "interleaved",
        False,
        {"qk_rope_head_dim": 64, "hidden_size": 256, "num_attention_heads": 2, **_rope(1e4, [12, 10, 10])},
    ),
    "ernie4_5_vl_moe": (
        "ernie4_5_vl_moe",
        "Ernie4_5_VLMoeTextRotaryEmbedding",
        "ernie",
        False,
        _QWEN2 | _rope(5e5, [22, 22, 20]),
    ),
}
NUM_TOKENS, NUM_Q_HEADS, NUM_KV_HEADS = 37, 3, 2


def _text_config(model_type: str):
    text = FAMILIES[model_type][4]
    if "omni" in model_type:
        return CONFIG_MAPPING[model_type](thinker_config={"text_config": text}).thinker_config.text_config
    return CONFIG_MAPPING[model_type](text_config=text).text_config


def _reference(model_type: str, positions, q, k):
    """transformers' text rotary class and ``apply_rotary_pos_emb``; q/k in (1, heads, N, head_dim)."""
    module, cls, *_ = FAMILIES[model_type]
    modeling = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    rotary = getattr(modeling, cls)(_text_config(model_type))
    cos, sin = rotary(q, positions[:, None, :])
    return modeling.apply_rotary_pos_emb(q, k, cos, sin)


def _to_engine(x):  # (1, heads, N, D) -> (N, heads * D)
    return x[0].transpose(0, 1).reshape(x.shape[2], -1)


def _inputs(head_size, dtype, *, max_pos=30000, seed=0):
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, max_pos, (3, NUM_TOKENS), generator=g)
    positions[:, :6] = positions[0, :6]  # text tokens: equal rows
    q = torch.randn(1, NUM_Q_HEADS, NUM_TOKENS, head_size, generator=g).to(dtype)
    k = torch.randn(1, NUM_KV_HEADS, NUM_TOKENS, head_size, generator=g).to(dtype)
    return positions, q, k


def _ours(model_type, dtype, layout=None):
    _, _, fam_layout, neox, _ = FAMILIES[model_type]
    cfg = _text_config(model_type).to_dict()
    return rotary_embedding_from_config(cfg, layout=layout or fam_layout, is_neox_style=neox, dtype=dtype)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_float32_matches_transformers(model_type):
    rope = _ours(model_type, torch.float32)
    positions, q, k = _inputs(rope.head_size, torch.float32)
    ref_q, ref_k = _reference(model_type, positions, q, k)
    out_q, out_k = rope(positions, _to_engine(q).clone(), _to_engine(k).clone())
    # float32: same formula and same float32 angles; 1e-6 relative leaves room for a last-bit cos/sin
    # difference between torch's vectorised and scalar kernels.
    torch.testing.assert_close(out_q, _to_engine(ref_q), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_k, _to_engine(ref_k), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
@pytest.mark.parametrize(("dtype", "unit_roundoff"), [(torch.bfloat16, 2.0**-8), (torch.float16, 2.0**-11)])
def test_low_precision_is_transformers_float32_rounded_once(model_type, dtype, unit_roundoff):
    rope = _ours(model_type, dtype)
    positions, q, k = _inputs(rope.head_size, dtype, seed=1)
    out_q, out_k = rope(positions, _to_engine(q).clone(), _to_engine(k).clone())
    # (1) mrope computes in float32 with transformers' float32 operations and rounds once: it is
    # transformers' float32 result on the same inputs, rounded to the dtype, bit for bit.
    exact_q, exact_k = (_to_engine(x) for x in _reference(model_type, positions, q.float(), k.float()))
    assert torch.equal(out_q, exact_q.to(dtype)) and torch.equal(out_k, exact_k.to(dtype)), model_type
    # (2) transformers in the low precision rounds cos, sin, both products and their sum (Ernie:
    # once). Its error is below 3u(|q cos| + |rot(q) sin|) and ours below u|sum|, so they differ by less
    # than 4u(...). With x1 the element and x2 its partner, |x2 sin| <= |out| + |x1 cos|, so the terms
    # are below 2(|x1| + |out|): the bound checked is 8u(|x1| + |out|).
    out_q = out_q.float()
    ref_q, _ = _reference(model_type, positions, q, k)
    ref_q = _to_engine(ref_q).float()
    terms = _to_engine(q.float()).abs() + exact_q.abs()
    assert ((out_q - ref_q).abs() <= 8 * unit_roundoff * terms + 1e-6).all(), model_type
    if model_type == "ernie4_5_vl_moe":  # Ernie also computes in float32 and rounds once
        assert torch.equal(out_q, ref_q)


def test_comparison_detects_a_wrong_layout():
    rope = _ours("qwen3_vl", torch.float32, layout="chunked")
    positions, q, k = _inputs(rope.head_size, torch.float32)
    ref_q, _ = _reference("qwen3_vl", positions, q, k)
    out_q, _ = rope(positions, _to_engine(q).clone(), _to_engine(k).clone())
    assert (out_q - _to_engine(ref_q)).abs().max() > 1e-2


def test_fractional_positions_match_transformers():
    """Qwen3-Omni positions can be fractional float32: computed directly, as transformers does."""
    rope = _ours("qwen3_omni_moe", torch.float32)
    positions, q, k = _inputs(rope.head_size, torch.float32)
    positions = positions.float() + torch.rand(positions.shape, generator=torch.Generator().manual_seed(3))
    ref_q, ref_k = _reference("qwen3_omni_moe", positions, q, k)
    out_q, out_k = rope(positions, _to_engine(q).clone(), _to_engine(k).clone())
    torch.testing.assert_close(out_q, _to_engine(ref_q), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_k, _to_engine(ref_k), rtol=1e-6, atol=1e-6)


def _hunyuan(case, dtype, *, layout="hunyuan", backend="native"):
    """mrope's module from the case's transformers config (the peer's own reading of it)."""
    cfg = hunyuan_text_config(case.section, alpha=case.alpha)
    rope = rotary_embedding_from_config(
        cfg.to_dict(), layout=layout, is_neox_style=True, dtype=dtype, backend=backend
    )
    return cfg, rope


@given(case=hunyuan_cases(), dtype=st.sampled_from([torch.float32, torch.bfloat16]), flat=st.booleans())
def test_hunyuan_layout_matches_transformers(case, dtype, flat):
    """HunYuan-VL's rotary: the two channels of a pair can take different rows (transformers' split of
    cat(freqs, freqs)), any number of rows, with its NTK-alpha base."""
    cfg, rope = _hunyuan(case, dtype)
    assert rope.num_rows == len(case.section) and rope.layout == "hunyuan"
    positions, q, k = case.tensors(dtype)
    shaped = (lambda x: x.reshape(x.shape[0], -1)) if flat else (lambda x: x)
    out_q, out_k = rope(positions, shaped(q.clone()), shaped(k.clone()))
    exact_q, exact_k = (shaped(x) for x in hunyuan_reference(cfg, positions, q.float(), k.float()))
    if dtype == torch.float32:
        torch.testing.assert_close(out_q, exact_q, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out_k, exact_k, rtol=1e-6, atol=1e-6)
        return
    # as test_low_precision_is_transformers_float32_rounded_once: transformers' float32 result rounded
    # once, bit for bit, and within 8u(|x1| + |out|) of transformers in bfloat16
    assert torch.equal(out_q, exact_q.to(dtype)) and torch.equal(out_k, exact_k.to(dtype))
    ref_q, _ = hunyuan_reference(cfg, positions, q, k)
    terms = shaped(q.float()).abs() + exact_q.abs()
    assert ((out_q.float() - shaped(ref_q).float()).abs() <= 8 * 2.0**-8 * terms + 1e-6).all()


@given(case=hunyuan_cases(max_tokens=5))
def test_hunyuan_one_row_floating_positions_and_apply_mrope_match_transformers(case):
    """One row of positions (all rows equal), fractional positions (computed, not gathered) and the
    differentiable apply_mrope rotate as transformers does; cos_sin gives transformers' cos and sin."""
    cfg, rope = _hunyuan(case, torch.float32)
    positions, q, k = case.tensors(torch.float32)
    for pos in (positions[0], positions.float() + 0.25):
        exp_q, exp_k = hunyuan_reference(cfg, pos, q, k)
        out_q, out_k = rope(pos, q.clone(), k.clone())
        torch.testing.assert_close(out_q, exp_q, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(out_k, exp_k, rtol=1e-6, atol=1e-6)
    new_q, new_k = apply_mrope(rope, positions, q, k)
    exp_q, exp_k = hunyuan_reference(cfg, positions, q, k)
    torch.testing.assert_close(new_q, exp_q, rtol=1e-6, atol=1e-6)
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLRotaryEmbedding

    exp_cos, exp_sin = HunYuanVLRotaryEmbedding(cfg)(q, positions[:, None, :])
    cos, sin = rope.cos_sin(positions)
    torch.testing.assert_close(cos, exp_cos[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sin, exp_sin[0], rtol=1e-6, atol=1e-6)


def test_hunyuan_comparison_detects_one_row_per_frequency():
    """Negative control: the one-row-per-frequency layouts (both channels of a pair from the first
    channel's row) rotate HunYuan-VL's three-row sections differently, as does ignoring alpha."""
    case = HunyuanCase([32, 16, 16], 1000.0, 9, 3, 2, 0, seed=7)
    positions, q, k = case.tensors(torch.float32)
    cfg, right = _hunyuan(case, torch.float32)
    exp_q, _ = hunyuan_reference(cfg, positions, q, k)
    for layout in ("chunked", "interleaved"):  # the same sections and NTK-alpha base
        wrong = MRotaryEmbedding(128, 128, 4096, right.base, (32, 16, 16), layout=layout, dtype=torch.float32)
        out_q, _ = wrong(positions, q.clone(), k.clone())
        assert (out_q - exp_q).abs().max() > 1e-2, layout
    plain = HunyuanCase([32, 16, 16], None, 9, 3, 2, 0, seed=7)
    _, no_alpha = _hunyuan(plain, torch.float32)
    out_q, _ = no_alpha(positions, q.clone(), k.clone())
    assert (out_q - exp_q).abs().max() > 1e-2


def test_hunyuan_pair_rows_and_tables():
    """Each channel's row: chunk i of 2 * section[i] channels of [first channels | second channels]."""
    assert pair_rows("hunyuan", (1, 1, 2)) == (0, 0, 1, 1, 2, 2, 2, 2)
    assert pair_rows("chunked", (1, 2, 1)) == (0, 1, 1, 2) * 2
    rope = MRotaryEmbedding(16, 8, 64, 1e4, (1, 1, 2), layout="hunyuan", dtype=torch.float32)
    assert rope.freq_rows.tolist() == [0, 0, 1, 1, 2, 2, 2, 2] and rope.column_index.shape == (16,)
    # both channels of every pair on row 0: the one-row-per-frequency tables and gather
    shared = MRotaryEmbedding(16, 8, 64, 1e4, (4, 0), layout="hunyuan", dtype=torch.float32)
    assert shared.num_rows == 2 and shared.freq_rows.tolist() == [0] * 4 and shared.column_index.shape == (8,)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        ({"mrope_section": ()}, r"mrope_section must be a sequence of non-negative ints, got \(\)"),
        ({"mrope_section": (16, 16, 16, -16)}, r"sequence of non-negative ints, got \(16, 16, 16, -16\)"),
        ({"mrope_section": (16, 16, 16, 8)}, r"sums to 56, expected rotary_dim // 2 = 64"),
        ({"layout": "chunked"}, r"mrope_section must be a sequence of 3 non-negative ints"),
    ],
)
def test_hunyuan_layout_errors(make, match):
    args = {"layout": "hunyuan", "mrope_section": (16, 16, 16, 16), "dtype": torch.float32, **make}
    with pytest.raises(MRopeError, match=match):
        MRotaryEmbedding(128, 128, 64, 1e4, **args)
    with pytest.raises(MRopeError, match=r"layout 'hunyuan' gives the two channels of a pair their own rows"):
        section_rows("hunyuan", (16, 16, 16, 16))


def test_hunyuan_positions_have_its_rows():
    rope = MRotaryEmbedding(128, 128, 64, 1e4, (16, 16, 16, 16), layout="hunyuan", dtype=torch.float32)
    q, k = torch.randn(5, 128), torch.randn(5, 128)
    shape = r"positions must have shape \(4, num_tokens\) or \(num_tokens,\), got \(3, 5\)"
    with pytest.raises(MRopeError, match=shape):
        rope(torch.zeros(3, 5, dtype=torch.int64), q, k)
    with pytest.raises(MRopeError, match=shape):
        apply_mrope(rope, torch.zeros(3, 5, dtype=torch.int64), q, k)


@pytest.mark.parametrize(
    ("rope", "layout", "match"),
    [
        (
            {"rope_type": "dynamic", "factor": 2.0},
            "hunyuan",
            r"rope type 'dynamic' needs a fixed alpha > 0 .* got None",
        ),
        ({"rope_type": "xdrope", "alpha": True}, "hunyuan", r"needs a fixed alpha > 0 .* got True"),
        ({"rope_type": "dynamic", "alpha": 1000.0}, "chunked", r"rope type 'dynamic' is not supported"),
    ],
)
def test_hunyuan_config_errors(rope, layout, match):
    cfg = {"model_type": "hunyuan_vl_text", "head_dim": 24, "max_position_embeddings": 64}
    cfg["rope_parameters"] = {"rope_theta": 1e4, "mrope_section": [4, 4, 4], **rope}
    with pytest.raises(MRopeError, match=match):
        rotary_embedding_from_config(cfg, layout=layout, is_neox_style=True)


def test_hunyuan_legacy_config_json_reads_like_5x():
    """The checkpoints' config.json: rope_scaling type "xdrope", alpha, xdrope_section, top-level theta."""
    legacy = {
        "model_type": "hunyuan_vl_text",
        "head_dim": 128,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "rope_scaling": {"type": "xdrope", "alpha": 1000.0, "factor": 1.0, "xdrope_section": [16] * 4},
    }
    rope = rotary_embedding_from_config(legacy, layout="hunyuan", is_neox_style=True, dtype=torch.float32)
    cfg = hunyuan_text_config([16] * 4, alpha=1000.0)
    fresh = rotary_embedding_from_config(
        cfg.to_dict(), layout="hunyuan", is_neox_style=True, dtype=torch.float32
    )
    assert rope.mrope_section == (16,) * 4 and rope.base == fresh.base == 1e4 * 1000.0 ** (128 / 126)
    assert torch.equal(rope.inv_freq, fresh.inv_freq)


def _small(layout, *, neox=True, rotary_dim=32, head_size=48, dtype=torch.float32):
    section = {"chunked": (4, 6, 6), "interleaved": (6, 5, 5), "ernie": (6, 6, 4)}[layout]
    return MRotaryEmbedding(
        head_size, rotary_dim, 512, 1e4, section, layout=layout, is_neox_style=neox, dtype=dtype
    )


@pytest.mark.parametrize("layout", ["chunked", "interleaved", "ernie"])
@pytest.mark.parametrize("neox", [True, False])
def test_one_row_positions_equal_three_equal_rows(layout, neox):
    rope = _small(layout, neox=neox)
    pos = torch.randint(0, 512, (11,))
    q, k = torch.randn(11, 2 * 48), torch.randn(11, 48)
    a = rope(pos, q.clone(), k.clone())
    b = rope(pos.expand(3, -1), q.clone(), k.clone())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("layout", ["chunked", "interleaved", "ernie"])
def test_partial_rotary_passes_the_tail_through(layout):
    rope = _small(layout, rotary_dim=32, head_size=48)
    q, k = torch.randn(9, 3, 48), torch.randn(9, 1, 48)
    out_q, out_k = rope(torch.randint(1, 512, (3, 9)), q.clone(), k.clone())
    assert torch.equal(out_q[..., 32:], q[..., 32:]) and torch.equal(out_k[..., 32:], k[..., 32:])
    assert not torch.equal(out_q[..., :32], q[..., :32])


@pytest.mark.parametrize("neox", [True, False])
def test_views_into_fused_qkv_are_rotated_in_place(neox):
    rope = _small("interleaved", neox=neox, dtype=torch.bfloat16)
    qkv = torch.randn(13, (4 + 2 + 2) * 48).to(torch.bfloat16)
    before = qkv.clone()
    q, k = qkv[:, : 4 * 48], qkv[:, 4 * 48 : 6 * 48]
    pos = torch.randint(0, 512, (3, 13))
    out_q, out_k = rope(pos, q, k)
    assert out_q is q and out_k is k
    exp_q, exp_k = rope(pos, before[:, : 4 * 48].contiguous(), before[:, 4 * 48 : 6 * 48].contiguous())
    assert torch.equal(qkv[:, : 4 * 48], exp_q) and torch.equal(qkv[:, 4 * 48 : 6 * 48], exp_k)
    assert torch.equal(qkv[:, 6 * 48 :], before[:, 6 * 48 :])  # v untouched


@pytest.mark.parametrize("layout", ["chunked", "interleaved", "ernie"])
def test_apply_mrope_matches_in_place_and_leaves_inputs(layout):
    rope = _small(layout, neox=layout != "ernie", dtype=torch.bfloat16)
    pos = torch.randint(0, 512, (3, 7))
    q, k = torch.randn(7, 2 * 48).bfloat16(), torch.randn(7, 48).bfloat16()
    q0, k0 = q.clone(), k.clone()
    new_q, new_k = apply_mrope(rope, pos, q, k)
    assert torch.equal(q, q0) and torch.equal(k, k0)
    in_q, in_k = rope(pos, q, k)
    assert torch.equal(new_q, in_q) and torch.equal(new_k, in_k)


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "glm4v", "ernie4_5_vl_moe"])
def test_gradients_match_transformers(model_type):
    rope = _ours(model_type, torch.float32)
    positions, q, k = _inputs(rope.head_size, torch.float32)
    q.requires_grad_(True)
    ref_q, ref_k = _reference(model_type, positions, q, k)
    w = torch.randn(ref_q.shape)
    (ref_grad,) = torch.autograd.grad((ref_q * w).sum(), q)
    q2 = _to_engine(q.detach()).requires_grad_(True)
    out_q, _ = apply_mrope(rope, positions, q2, _to_engine(k))
    (grad,) = torch.autograd.grad((out_q * _to_engine(w)).sum(), q2)
    torch.testing.assert_close(grad, _to_engine(ref_grad), rtol=1e-6, atol=1e-6)


def test_decode_uses_seq_lens_minus_one_plus_delta():
    rope = _small("chunked", dtype=torch.float32)
    seq_lens, deltas = torch.tensor([5, 9, 1]), torch.tensor([[-2], [30], [0]])
    q, k = torch.randn(3, 2 * 48), torch.randn(3, 48)
    a = rope.forward_decode(seq_lens, deltas, q.clone(), k.clone())
    b = rope(torch.tensor([2, 38, 0]), q.clone(), k.clone())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize(
    ("cast", "dtype"),
    [
        (lambda m: m.to(torch.bfloat16), torch.bfloat16),
        (lambda m: m.half(), torch.float16),
        (lambda m: m.to("cpu", torch.float16), torch.float16),
        (lambda m: m.bfloat16().float(), torch.float32),
        (lambda m: m.double(), torch.float64),
        (lambda m: m.to("cpu"), torch.float32),
    ],
)
def test_module_cast_keeps_the_cache_values_and_sets_dtype(cast, dtype):
    """A cast must not round the float32 cache through the new dtype, and the module then takes
    q and k of the new dtype, rotating them exactly as a module built with that dtype."""
    rope = cast(_small("chunked"))
    fresh = _small("chunked", dtype=dtype)
    # values, not just the dtype: bf16 rounding changes cos/sin by up to 2**-9
    assert torch.equal(rope.cos_sin_cache, build_cos_sin_cache(512, 32, 1e4))
    assert torch.equal(rope.inv_freq, fresh.inv_freq)
    assert rope.dtype == dtype
    pos = torch.randint(0, 512, (3, 7), generator=torch.Generator().manual_seed(5))
    q, k = torch.randn(7, 2 * 48).to(dtype), torch.randn(7, 48).to(dtype)
    out = rope(pos, q.clone(), k.clone())
    exp = fresh(pos, q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])


def test_to_empty_after_meta_construction_rebuilds_the_cache_exactly():
    with torch.device("meta"):
        rope = _small("interleaved")
    rope.to_empty(device="cpu")
    fresh = _small("interleaved")
    assert torch.equal(rope.cos_sin_cache, build_cos_sin_cache(512, 32, 1e4))
    assert torch.equal(rope.inv_freq, fresh.inv_freq)
    assert torch.equal(rope.freq_rows, fresh.freq_rows) and torch.equal(rope.column_index, fresh.column_index)
    pos, q, k = torch.randint(0, 512, (3, 7)), torch.randn(7, 96), torch.randn(7, 48)
    out, exp = rope(pos, q.clone(), k.clone()), fresh(pos, q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])


def test_the_module_chooses_its_path_at_construction_and_on_a_move(monkeypatch):
    """``path`` is chosen once from ``backend`` and the cache's device, not per call: ``"auto"`` is native
    on the CPU without asking for triton, ``"triton"`` forces the kernel, and a move chooses again."""
    import mrope.rotary.module as module

    asked = []
    monkeypatch.setattr(module, "_triton_available", lambda: asked.append(1) or True)
    assert _small("chunked").path == "native" and not asked
    forced = MRotaryEmbedding(48, 32, 512, 1e4, (4, 6, 6), backend="triton", dtype=torch.float32)
    assert forced.path == "triton" and forced.to(torch.float64).path == "triton"
    native = MRotaryEmbedding(48, 32, 512, 1e4, (4, 6, 6), backend="native", dtype=torch.float32)
    assert native.to("meta").path == "native"
    with torch.device("meta"):
        rope = _small("interleaved")
    assert rope.path == "native"
    monkeypatch.setattr(module.MRotaryEmbedding, "_chosen_path", lambda self: "moved")
    assert rope.to_empty(device="cpu").path == "moved"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize(("layout", "neox"), [("chunked", True), ("ernie", False)])
def test_chunked_cpu_rotation_equals_the_whole_tensor_formula(dtype, layout, neox):
    """The in-place CPU path rotates chunks of tokens through reused buffers; across chunk boundaries,
    on strided views into a fused qkv, it gives the bits of apply_mrope's whole-tensor arithmetic."""
    rope = _small(layout, neox=neox, dtype=dtype)  # rotary 32 of head 48
    num_tokens = 2**19 // (4 * 32) + 37  # q: 4 heads of 32 rotated channels, 2 MiB: whole chunks and a part
    g = torch.Generator().manual_seed(4)
    positions = torch.randint(0, 512, (3, num_tokens), generator=g)
    qkv = torch.randn(num_tokens, (4 + 1 + 1) * 48, generator=g).to(dtype)
    q, k = qkv[:, : 4 * 48], qkv[:, 4 * 48 : 5 * 48]
    exp_q, exp_k = apply_mrope(rope, positions, q, k)
    before_v = qkv[:, 5 * 48 :].clone()
    out_q, out_k = rope(positions, q, k)
    assert out_q is q and out_k is k
    assert torch.equal(q, exp_q) and torch.equal(k, exp_k)
    assert torch.equal(qkv[:, 5 * 48 :], before_v)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend="aot_eager")


@pytest.mark.parametrize(
    ("dtype", "layout", "neox", "kind"),
    [
        (torch.bfloat16, "interleaved", True, "int3"),
        (torch.float32, "ernie", False, "int3"),
        (torch.bfloat16, "ernie", False, "int1"),
        (torch.float32, "interleaved", True, "float3"),
    ],
)
def test_compiled_native_forward_equals_eager(dtype, layout, neox, kind):
    """torch.compile(fullgraph=True) traces the native path (plain torch ops, no graph break with
    check_positions=False) and keeps the in-place writes: the same bits as eager."""
    section = {"interleaved": (6, 5, 5), "ernie": (6, 6, 4)}[layout]
    kw = {"layout": layout, "is_neox_style": neox, "dtype": dtype, "check_positions": False}
    rope = MRotaryEmbedding(48, 32, 512, 1e4, section, backend="native", **kw)
    g = torch.Generator().manual_seed(6)
    positions = {
        "int3": torch.randint(0, 512, (3, 9), generator=g),
        "int1": torch.randint(0, 512, (9,), generator=g),
        "float3": torch.rand(3, 9, generator=g) * 500,
    }[kind]
    q, k = torch.randn(9, 2 * 48, generator=g).to(dtype), torch.randn(9, 1, 48, generator=g).to(dtype)
    exp = rope(positions, q.clone(), k.clone())
    in_q, in_k = q.clone(), k.clone()
    out = _compiled(rope)(positions, in_q, in_k)
    assert torch.equal(in_q, exp[0]) and torch.equal(in_k, exp[1])
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])
    seq_lens, deltas = torch.tensor([5, 9, 1]), torch.tensor([-2, 30, 0])
    exp = rope.forward_decode(seq_lens, deltas, q[:3].clone(), k[:3].clone())
    out = _compiled(rope.forward_decode)(seq_lens, deltas, q[:3].clone(), k[:3].clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])


def test_compiled_checked_forward_still_raises():
    """With check_positions the range check runs outside the graph (it reads values back), so compiled
    code still refuses positions past the cache with the same error."""
    rope = _small("chunked")
    torch._dynamo.reset()
    compiled = torch.compile(rope, backend="aot_eager")
    pos, q, k = torch.randint(0, 512, (3, 4)), torch.randn(4, 96), torch.randn(4, 48)
    exp = rope(pos, q.clone(), k.clone())
    out = compiled(pos, q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])
    with pytest.raises(MRopeError, match=r"positions span \[0, 512\], outside the cos/sin cache"):
        compiled(torch.tensor([[0, 1, 2, 512]] * 3), q, k)


@pytest.mark.parametrize("backend", ["native", "auto"])
def test_zero_token_step_is_a_no_op(backend):
    rope = MRotaryEmbedding(48, 32, 512, 1e4, (4, 6, 6), dtype=torch.bfloat16, backend=backend)
    for positions in (torch.zeros(3, 0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)):
        for shape in ((0, 2 * 48), (0, 2, 48)):
            q, k = torch.zeros(shape, dtype=torch.bfloat16), torch.zeros(shape, dtype=torch.bfloat16)
            out_q, out_k = rope(positions, q, k)
            assert out_q is q and out_q.shape == shape
            new_q, _ = apply_mrope(rope, positions, q, k)
            assert new_q.shape == shape
    empty = torch.zeros(0, dtype=torch.int64)
    q = torch.zeros(0, 2 * 48, dtype=torch.bfloat16)
    assert rope.forward_decode(empty, empty, q, q[:, :48])[0].shape == (0, 96)


def test_small_signed_integer_positions_match_int64():
    rope = _small("ernie", neox=False)
    pos = torch.randint(0, 120, (3, 6), generator=torch.Generator().manual_seed(2))
    q, k = torch.randn(6, 96), torch.randn(6, 48)
    exp = rope(pos, q.clone(), k.clone())
    for dtype in (torch.int32, torch.int16, torch.int8):
        out = rope(pos.to(dtype), q.clone(), k.clone())
        assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1]), dtype


def test_decode_refuses_rounding_deltas_and_unsigned_seq_lens():
    rope = _small("chunked")
    q, k = torch.randn(2, 96), torch.randn(2, 48)
    with pytest.raises(MRopeError, match=r"deltas have dtype torch.bfloat16"):
        rope.forward_decode(torch.tensor([3, 4]), torch.tensor([1.0, 2.0]).bfloat16(), q, k)
    with pytest.raises(MRopeError, match=r"seq_lens must be a 1-D integer tensor"):
        rope.forward_decode(torch.tensor([3, 4], dtype=torch.uint8), torch.tensor([1, 2]), q, k)


def test_unchecked_native_path_clamps_like_the_kernel_and_float_positions_skip_the_cache():
    """check_positions=False: out-of-range integer positions are clamped (the documented rule), and
    floating positions are computed directly, even past the cache."""
    rope = MRotaryEmbedding(48, 32, 64, 1e4, (4, 6, 6), dtype=torch.float32, check_positions=False)
    checked = MRotaryEmbedding(48, 32, 4096, 1e4, (4, 6, 6), dtype=torch.float32)
    pos = torch.tensor([[0, 300, 5], [1, -4, 63], [2, 2, 999]])
    q, k = torch.randn(3, 96), torch.randn(3, 48)
    out = rope(pos, q.clone(), k.clone())
    exp = checked(pos.clamp(0, 63), q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])
    new_q, _ = apply_mrope(rope, pos, q, k)
    assert torch.equal(new_q, exp[0])
    fpos = torch.tensor([[0.5, 300.25, 5.0]] * 3)
    out = rope(fpos, q.clone(), k.clone())
    exp = checked(fpos, q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])
    with pytest.raises(
        MRopeError, match=r"positions span \[0.5, 300.25\], outside the cos/sin cache \[0, 64\)"
    ):
        MRotaryEmbedding(48, 32, 64, 1e4, (4, 6, 6), dtype=torch.float32)(fpos, q, k)


def test_family_rotary_embedding_defaults_and_options():
    from mrope.families import from_config

    cfg = CONFIG_MAPPING["qwen2_5_vl"](text_config=_QWEN2).to_dict()
    family = from_config(cfg)
    rope = rotary_embedding_for(family)
    assert rope.dtype == torch.bfloat16 and rope.check_positions and rope.backend == "auto"
    assert rope.max_position == cfg["text_config"]["max_position_embeddings"]
    fast = rotary_embedding_for(
        family, dtype=torch.float32, check_positions=False, backend="native", positions_factor=4
    )
    assert (fast.dtype, fast.check_positions, fast.backend) == (torch.float32, False, "native")
    assert fast.max_position == 4 * rope.max_position
    assert torch.equal(fast.cos_sin_cache[: rope.max_position], rope.cos_sin_cache)
    assert rotary_embedding_for(family, max_position=1000).max_position == 1000
    # the module built from the family rotates as the one built from its text config directly
    direct = rotary_embedding_from_config(
        cfg["text_config"], layout="chunked", is_neox_style=True, dtype=torch.float32, check_positions=False
    )
    positions, q, k = _inputs(128, torch.float32)
    a, b = (
        fast(positions, _to_engine(q).clone(), _to_engine(k).clone()),
        direct(positions, _to_engine(q).clone(), _to_engine(k).clone()),
    )
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(MRopeError, match=r"positions_factor must be a positive int, got 0"):
        rotary_embedding_for(family, positions_factor=0)
    with pytest.raises(MRopeError, match=r"backend 'cuda' is not one of"):
        rotary_embedding_for(family, backend="cuda")


def test_section_rows_tables():
    assert section_rows("chunked", (1, 2, 1)) == (0, 1, 1, 2)
    assert section_rows("interleaved", (3, 2, 1)) == (0, 1, 2, 0, 1, 0)
    assert section_rows("ernie", (2, 2, 1)) == (1, 2, 1, 2, 0)


def test_legacy_config_json_reads_like_5x():
    from mrope.families import from_config

    legacy = {
        "model_type": "glm4v_text",
        "hidden_size": 256,
        "num_attention_heads": 2,
        "max_position_embeddings": 4096,
        "rope_theta": 10000,
        "partial_rotary_factor": 0.5,
        "rope_scaling": {"type": "default", "mrope_section": [8, 12, 12]},
    }
    rope = rotary_embedding_from_config(legacy, layout="chunked", is_neox_style=False, dtype=torch.bfloat16)
    assert (rope.head_size, rope.rotary_dim, rope.max_position) == (128, 64, 4096)
    assert rope.base == 1e4 and rope.mrope_section == (8, 12, 12)
    no_section = {**legacy, "rope_scaling": {"type": "mrope"}}
    rope = rotary_embedding_from_config(
        no_section, layout="chunked", is_neox_style=False, default_mrope_section=(8, 12, 12)
    )
    assert rope.mrope_section == (8, 12, 12)  # the default given where the config states none
    with pytest.raises(MRopeError, match=r"text config \(model_type 'glm4v_text'\) has no mrope_section"):
        rotary_embedding_from_config(no_section, layout="chunked", is_neox_style=False)
    # a family gives transformers' class default for its text model type
    family = from_config({**CONFIG_MAPPING["glm4v"]().to_dict(), "text_config": no_section})
    assert family.rotary_arguments()["default_mrope_section"] == (8, 12, 12)
    assert rotary_embedding_for(family).mrope_section == (8, 12, 12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mrope_section": (16, 24, 20)}, r"sums to 60, expected rotary_dim // 2 = 64"),
        ({"layout": "zigzag"}, r"layout 'zigzag' is not one of"),
        ({"layout": "ernie", "mrope_section": (24, 20, 20)}, r"cannot be laid out 'ernie'"),
        ({"rotary_dim": 130}, r"rotary_dim 130 must be even and at most head_size 128"),
        ({"dtype": torch.int32}, r"dtype must be a floating"),
        ({"backend": "cuda"}, r"backend 'cuda' is not one of"),
        ({"mrope_section": None}, r"mrope_section must be a sequence of 3 non-negative ints, got None"),
        ({"mrope_section": (16, 24)}, r"mrope_section must be a sequence of 3 .* got \(16, 24\)"),
        ({"mrope_section": (16.0, 24, 24)}, r"mrope_section must be a sequence of 3"),
        ({"mrope_section": "abc"}, r"mrope_section must be a sequence of 3"),
        ({"max_position": 10**12}, r"max_position 1000000000000 exceeds 16777216 \(2\*\*24\)"),
        ({"max_position": 64.0}, r"max_position must be a positive int, got 64.0"),
        ({"base": float("nan")}, r"base \(rope_theta\) must be a finite number > 1, got nan"),
        ({"base": None}, r"base \(rope_theta\) must be a finite number > 1, got None"),
        ({"layout": ["chunked"]}, r"layout \['chunked'\] is not one of"),
        ({"layout": None}, r"layout None is not one of"),
    ],
)
def test_constructor_errors(kwargs, match):
    args = {
        "head_size": 128,
        "rotary_dim": 128,
        "max_position": 64,
        "base": 1e6,
        "mrope_section": (16, 24, 24),
    }
    with pytest.raises(MRopeError, match=match):
        MRotaryEmbedding(**{**args, **kwargs})


def test_forward_errors_name_values_and_write_nothing():
    rope = _small("chunked", dtype=torch.float32)
    q, k = torch.randn(4, 2 * 48), torch.randn(4, 48)
    q0, k0 = q.clone(), k.clone()
    cases = [
        (
            torch.tensor([[0, 1, 2, 512]] * 3),
            (q, k),
            r"positions span \[0, 512\], outside the cos/sin cache \[0, 512\)",
        ),
        (torch.tensor([[0, -1, 2, 3]] * 3), (q, k), r"positions span \[-1, 3\]"),
        (
            torch.zeros(2, 4, dtype=torch.int64),
            (q, k),
            r"shape \(3, num_tokens\) or \(num_tokens,\), got \(2, 4\)",
        ),
        (torch.zeros(5, dtype=torch.int64), (q, k), r"query has 4 tokens, positions have 5"),
        (
            torch.zeros(4, dtype=torch.int64),
            (q.bfloat16(), k),
            r"dtype torch.bfloat16, expected torch.float32",
        ),
        (
            torch.zeros(4, dtype=torch.int64),
            (q[:, :50], k),
            r"50 channels per token, not a multiple of head_size 48",
        ),
        (torch.zeros(4, dtype=torch.bool), (q, k), r"positions must be signed integers .* got torch.bool"),
        (
            torch.zeros(4, dtype=torch.uint8),
            (q, k),
            r"got torch.uint8 \(bool and uint8 tensors index as masks",
        ),
        (
            torch.full((4,), 3001.0).bfloat16(),
            (q, k),
            r"torch.bfloat16, which holds integers exactly only up to 256",
        ),
        (
            torch.full((4,), 3001.0).half(),
            (q, k),
            r"torch.float16, which holds integers exactly only up to 2048",
        ),
    ]
    for positions, (qq, kk), match in cases:
        with pytest.raises(MRopeError, match=match):
            rope(positions, qq, kk)
    assert torch.equal(q, q0) and torch.equal(k, k0)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, r"rope type 'yarn' is not supported"),
        ({"model_type": "llama"}, r"has no mrope_section"),
        (
            {"rope_parameters": {"rope_theta": 1e6, "mrope_interleaved": True}},
            r"mrope_interleaved but layout is",
        ),
        ({"max_position_embeddings": None}, r"has no max_position_embeddings"),
        # zero heads raised ZeroDivisionError; a string or a bad factor, TypeError
        ({"num_attention_heads": 0}, r"has num_attention_heads = 0, expected a positive int"),
        ({"num_attention_heads": -2}, r"has num_attention_heads = -2, expected a positive int"),
        ({"hidden_size": "256"}, r"has hidden_size = '256', expected a positive int"),
        ({"head_dim": -64}, r"has head_dim = -64, expected a positive int"),
        ({"head_dim": 64.0}, r"has head_dim = 64.0, expected a positive int"),
        ({"partial_rotary_factor": 0}, r"partial_rotary_factor must be a number in \(0, 1\], got 0"),
        (
            {"partial_rotary_factor": "half"},
            r"partial_rotary_factor must be a number in \(0, 1\], got 'half'",
        ),
    ],
)
def test_config_errors(cfg, match):
    base = {"model_type": "qwen2_vl_text", "hidden_size": 256, "num_attention_heads": 2}
    base.update({"max_position_embeddings": 64, "rope_parameters": {"rope_theta": 1e6}})
    with pytest.raises(MRopeError, match=match):
        rotary_embedding_from_config(
            {**base, **cfg}, layout="chunked", is_neox_style=True, dtype=torch.float32
        )


def test_importing_rotary_does_not_import_triton():
    code = "import sys, mrope.rotary; assert 'triton' not in sys.modules, 'triton imported'"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the same mrope as this process
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_family_rotary_embedding_with_zero_heads_is_an_mrope_error():
    """It raised ZeroDivisionError (``hidden_size // num_attention_heads``)."""
    from mrope.families import from_config

    family = from_config(CONFIG_MAPPING["qwen2_5_vl"](text_config={**_QWEN2, "num_attention_heads": 0}))
    with pytest.raises(MRopeError, match=r"has num_attention_heads = 0, expected a positive int"):
        rotary_embedding_for(family)


def test_numpy_scalars_are_taken_as_position_table_takes_them():
    """numpy integers (and numpy floats for the base) were refused: PositionTable takes them."""
    plain = MRotaryEmbedding(48, 32, 512, 10000.0, (4, 6, 6), dtype=torch.float32)
    for head, rot, max_pos, base in (
        (np.int64(48), np.int32(32), np.int64(512), np.float32(10000.0)),
        (np.int16(48), np.int64(32), np.uint16(512), np.int64(10000)),
        (48, 32, 512, np.float64(1e4)),
    ):
        rope = MRotaryEmbedding(head, rot, max_pos, base, (np.int64(4), 6, 6), dtype=torch.float32)
        assert (rope.head_size, rope.rotary_dim, rope.max_position, rope.base) == (48, 32, 512, 1e4)
        assert type(rope.head_size) is int and type(rope.base) is float
        assert torch.equal(rope.cos_sin_cache, plain.cos_sin_cache)
    for bad in (np.bool_(True), np.float64(48.0)):
        with pytest.raises(MRopeError, match=r"head_size must be a positive int"):
            MRotaryEmbedding(bad, 32, 512, 1e4, (4, 6, 6))
    with pytest.raises(MRopeError, match=r"base \(rope_theta\) must be a finite number > 1"):
        MRotaryEmbedding(48, 32, 512, np.bool_(True), (4, 6, 6))
    with pytest.raises(MRopeError, match=r"base \(rope_theta\) must be a finite number > 1"):
        MRotaryEmbedding(48, 32, 512, np.float32("nan"), (4, 6, 6))
    cfg = {"model_type": "qwen2_vl_text", "hidden_size": 96, "num_attention_heads": np.int64(2)}
    cfg.update({"max_position_embeddings": 64, "rope_parameters": {"rope_theta": 1e4}})
    rope = rotary_embedding_from_config(
        {**cfg, "rope_parameters": {"rope_theta": 1e4, "mrope_section": [8, 8, 8]}},
        layout="chunked",
        is_neox_style=True,
        positions_factor=np.int64(4),
    )
    assert rope.max_position == 256 and rope.head_size == 48


def _unwritable() -> list:
    """(4, 48) tensors (one head of 48 channels) that cannot be rotated in place, and what the error says."""
    with torch.inference_mode():
        inference = torch.randn(4, 48)
    sharing = r"has elements sharing memory \(shape \(4, (1, )?48\), strides \((0|1), "
    return [
        (torch.randn(48).expand(4, 48), sharing),
        (torch.randn(64).as_strided((4, 48), (1, 1)), sharing),
        (torch.randn(1, 1, 48).expand(4, 1, 48), sharing),
        (inference, r"is an inference tensor \(made under torch.inference_mode\(\)\)"),
    ]


@pytest.mark.parametrize("call", ["forward", "forward_decode", "apply_mrope_inplace"])
def test_nothing_is_written_before_a_tensor_that_cannot_be_written_is_refused(call):
    """``query`` was rotated, then the write of ``key`` failed with torch's RuntimeError, so that a retry
    rotated ``query`` twice. Everything that can make a write fail is checked first, for both."""
    from mrope.rotary import apply_mrope_inplace

    rope = _small("chunked", dtype=torch.float32)
    positions, seq_lens, deltas = torch.tensor([3, 5, 7, 9]), torch.tensor([4, 6, 8, 10]), torch.zeros(4)

    def run(q, k):
        if call == "forward":
            return rope(positions, q, k)
        if call == "forward_decode":
            return rope.forward_decode(seq_lens, deltas.long(), q, k)
        return apply_mrope_inplace(rope, positions, q, k)

    for bad, what in _unwritable():
        for name in ("query", "key"):
            good = torch.randn(4, 96)
            before = good.clone()
            with pytest.raises(MRopeError, match=f"{name} {what}"):
                run(*((bad, good) if name == "query" else (good, bad)))
            assert torch.equal(good, before)
    q, k = torch.randn(4, 96), torch.randn(4, 48)
    expected = rope(positions, q.clone(), k.clone())
    with pytest.raises(MRopeError):
        run(q, torch.randn(48).expand(4, 48))
    run(q, k)  # the retry rotates query once
    assert torch.equal(q, expected[0]) and torch.equal(k, expected[1])


def test_inference_tensors_are_rotated_under_inference_mode():
    rope = _small("chunked", dtype=torch.float32)
    q, k = torch.randn(4, 96), torch.randn(4, 48)
    expected = rope(torch.arange(4), q.clone(), k.clone())
    with torch.inference_mode():
        qi, ki = q.clone(), k.clone()
        got = rope(torch.arange(4), qi, ki)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    qn, kn = q.clone(), k.clone()  # normal tensors, written under inference mode
    with torch.inference_mode():
        rope(torch.arange(4), qn, kn)
    assert torch.equal(qn, expected[0]) and torch.equal(kn, expected[1])


def test_strided_views_that_share_no_memory_are_rotated_in_place():
    """Only overlapping channels are refused: the rotated channels of a fused qkv view, a transposed
    layout, or heads whose pass-through tails overlap, are written."""
    rope = _small("chunked", dtype=torch.float32)  # rotary_dim 32 of head_size 48
    positions = torch.tensor([3, 5, 7, 9])
    q = torch.randn(96, 4).t()  # (4, 96), token stride 1
    k = torch.randn(4, 48)
    expected = rope(positions, q.contiguous(), k.clone())
    rope(positions, q, k)
    assert torch.equal(q, expected[0]) and torch.equal(k, expected[1])
    store = torch.randn(4, 2 * 48 - 16)  # each head's 16-channel tail is the next head's first channels
    heads = store.as_strided((4, 2, 48), (store.stride(0), 32, 1))
    rope(positions, heads, torch.randn(4, 48))  # rotated channels 0-31 and 32-63: disjoint


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_and_sparse_tensors_are_refused():
    """They raised RuntimeError ("NestedTensorImpl doesn't support sizes")."""
    rope = _small("chunked", dtype=torch.float32)
    q, k, positions = torch.randn(4, 96), torch.randn(4, 48), torch.arange(4)
    nested = torch.nested.nested_tensor([torch.randn(96)] * 4)
    jagged = torch.nested.nested_tensor([torch.randn(96), torch.randn(48)], layout=torch.jagged)
    sparse = torch.randn(4, 96).to_sparse()
    for bad, kind in ((nested, "nested"), (jagged, "nested"), (sparse, "sparse_coo")):
        with pytest.raises(MRopeError, match=rf"query is a {kind} tensor"):
            rope(positions, bad, k)
        with pytest.raises(MRopeError, match=rf"key is a {kind} tensor"):
            rope(positions, q, bad)
        with pytest.raises(MRopeError, match=rf"query is a {kind} tensor"):
            apply_mrope(rope, positions, bad, k)
    with pytest.raises(MRopeError, match=r"positions is a nested tensor"):
        rope(torch.nested.nested_tensor([torch.arange(4)] * 3), q, k)
    with pytest.raises(MRopeError, match=r"seq_lens is a nested tensor"):
        rope.forward_decode(torch.nested.nested_tensor([torch.arange(4)]), torch.zeros(4), q, k)
