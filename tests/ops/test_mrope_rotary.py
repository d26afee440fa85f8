"""The fused Triton kernel (mrope.ops.mrope_rotary) against the native torch path.

On a machine without a GPU the kernel runs under ``TRITON_INTERPRET=1`` (set in ``conftest.py``
before triton is imported), so shapes stay tiny; with CUDA the same tests run the compiled kernel.
"""

from __future__ import annotations

import os

import pytest
import torch

from support.peers import require, require_module

require_module("triton")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mrope._errors import MRopeError  # noqa: E402
from mrope.rotary import MRotaryEmbedding, rotary_embedding_from_config  # noqa: E402
from support.hunyuan_rotary import hunyuan_cases, hunyuan_reference, hunyuan_text_config  # noqa: E402
from support.sm90 import compile_for_sm90  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    assert os.environ.get("TRITON_INTERPRET") == "1", "tests/ops/conftest.py must set TRITON_INTERPRET"

# rotary_dim 40 (20 frequencies, not a power of two) inside head_size 48; sections per layout (hunyuan:
# four rows, the two channels of a pair on different rows)
SECTIONS = {"chunked": (6, 7, 7), "interleaved": (8, 6, 6), "ernie": (7, 7, 6), "hunyuan": (4, 4, 6, 6)}
# float32: the kernel may contract a product into an FMA, a last-bit difference. bfloat16: both paths
# round the same float32 value once, so they differ by at most one bf16 ulp (relative 2**-7) where an
# FMA moves the value across a rounding boundary.
TOLERANCES = [(torch.float32, 1e-6, 1e-6), (torch.bfloat16, 2**-7, 1e-6)]


def _pair(layout, dtype, *, neox=True, head_size=48, rotary_dim=40, max_position=256, **kw):
    section = SECTIONS[layout] if rotary_dim == 40 else kw.pop("section")
    make = {
        "head_size": head_size,
        "rotary_dim": rotary_dim,
        "max_position": max_position,
        "base": 1e4,
        "mrope_section": section,
        "layout": layout,
        "is_neox_style": neox,
        "dtype": dtype,
        **kw,
    }
    native = MRotaryEmbedding(**make, backend="native").to(DEVICE)
    triton = MRotaryEmbedding(**make, backend="triton").to(DEVICE)
    return native, triton


def _qk(num_tokens, num_q_heads, num_kv_heads, head_size, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(num_tokens, num_q_heads * head_size, generator=g).to(dtype).to(DEVICE)
    k = torch.randn(num_tokens, num_kv_heads * head_size, generator=g).to(dtype).to(DEVICE)
    return q, k


@pytest.mark.parametrize(("dtype", "rtol", "atol"), TOLERANCES)
@pytest.mark.parametrize("layout", ["chunked", "interleaved", "ernie", "hunyuan"])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rows", ["all", 1])
def test_kernel_matches_native(layout, neox, rows, dtype, rtol, atol):
    native, triton = _pair(layout, dtype, neox=neox)
    num_tokens = 5
    shape = (native.num_rows, num_tokens) if rows == "all" else (num_tokens,)
    positions = torch.randint(0, 256, shape, device=DEVICE)
    q, k = _qk(num_tokens, 3, 2, 48, dtype)
    exp_q, exp_k = native(positions, q.clone(), k.clone())
    out_q, out_k = triton(positions, q.clone(), k.clone())
    torch.testing.assert_close(out_q, exp_q, rtol=rtol, atol=atol)
    torch.testing.assert_close(out_k, exp_k, rtol=rtol, atol=atol)
    # the tail past rotary_dim passes through bit for bit
    assert torch.equal(out_q.view(num_tokens, 3, 48)[..., 40:], q.view(num_tokens, 3, 48)[..., 40:])


@pytest.mark.parametrize(
    ("layout", "section", "neox"), [("chunked", (16, 24, 24), True), ("interleaved", (24, 20, 20), True)]
)
def test_kernel_checkpoint_heads(layout, section, neox):
    """Qwen2.5-VL-7B / Qwen3-VL head counts (28 q, 4 kv, head 128: padded to 32 and 4 in the kernel)."""
    native, triton = _pair(layout, torch.bfloat16, head_size=128, rotary_dim=128, section=section, neox=neox)
    positions = torch.randint(0, 256, (3, 3), device=DEVICE)
    q, k = _qk(3, 28, 4, 128, torch.bfloat16, seed=1)
    exp = native(positions, q.clone(), k.clone())
    out = triton(positions, q.clone(), k.clone())
    torch.testing.assert_close(out[0], exp[0], rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(out[1], exp[1], rtol=2**-7, atol=1e-6)


@pytest.mark.parametrize("layout", ["chunked", "ernie"])
def test_kernel_in_place_on_fused_qkv_views_and_strided_positions(layout):
    native, triton = _pair(layout, torch.bfloat16, neox=layout == "chunked")
    num_tokens = 6
    qkv = torch.randn(num_tokens, (2 + 1 + 1) * 48).bfloat16().to(DEVICE)
    before = qkv.clone()
    q, k = qkv[:, : 2 * 48], qkv[:, 2 * 48 : 3 * 48]
    buffer = torch.randint(0, 256, (3, num_tokens + 1), device=DEVICE)
    positions = buffer[:, :num_tokens]  # non-contiguous, as an engine's position buffer slice
    out_q, out_k = triton(positions, q, k)
    assert out_q is q and out_k is k
    exp_q, exp_k = native(positions, before[:, : 2 * 48].clone(), before[:, 2 * 48 : 3 * 48].clone())
    torch.testing.assert_close(qkv[:, : 2 * 48], exp_q, rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(qkv[:, 2 * 48 : 3 * 48], exp_k, rtol=2**-7, atol=1e-6)
    assert torch.equal(qkv[:, 3 * 48 :], before[:, 3 * 48 :])


def test_kernel_three_d_and_non_unit_channel_stride():
    native, triton = _pair("interleaved", torch.float32)
    positions = torch.randint(0, 256, (3, 4), device=DEVICE)
    q = torch.randn(2 * 48, 4, device=DEVICE).t()  # channel stride 4: rotated in a copy, written back
    k = torch.randn(4, 1, 48, device=DEVICE)
    exp_q, exp_k = native(positions, q.contiguous(), k.clone())
    out_q, out_k = triton(positions, q, k)
    assert out_q is q and out_k is k
    torch.testing.assert_close(q, exp_q, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k, exp_k, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("delta_dtype", [torch.int64, torch.int32])
def test_decode_entry_matches_positions(delta_dtype):
    native, triton = _pair("interleaved", torch.bfloat16)
    seq_lens = torch.tensor([3, 17, 1, 40], device=DEVICE)
    deltas = torch.tensor([[-1], [100], [0], [-20]], dtype=delta_dtype, device=DEVICE)
    q, k = _qk(4, 3, 1, 48, torch.bfloat16)
    exp = native(seq_lens - 1 + deltas[:, 0], q.clone(), k.clone())
    out = triton.forward_decode(seq_lens, deltas, q.clone(), k.clone())
    torch.testing.assert_close(out[0], exp[0], rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(out[1], exp[1], rtol=2**-7, atol=1e-6)


def test_unchecked_out_of_range_positions_are_clamped():
    native, triton = _pair("chunked", torch.float32, check_positions=False)
    positions = torch.tensor([[0, 300, 5], [1, -4, 255], [2, 2, 999]], device=DEVICE)
    q, k = _qk(3, 2, 1, 48, torch.float32)
    exp = native(positions.clamp(0, 255), q.clone(), k.clone())
    out = triton(positions, q.clone(), k.clone())
    torch.testing.assert_close(out[0], exp[0], rtol=1e-6, atol=1e-6)


def test_checked_positions_raise_before_launch():
    _, triton = _pair("chunked", torch.float32)
    q, k = _qk(2, 2, 1, 48, torch.float32)
    q0 = q.clone()
    with pytest.raises(MRopeError, match=r"positions span \[0, 256\]"):
        triton(torch.tensor([0, 256], device=DEVICE), q, k)
    with pytest.raises(MRopeError, match=r"positions span \[-1, 2\]"):
        triton.forward_decode(torch.tensor([1, 2], device=DEVICE), torch.tensor([-1, 1], device=DEVICE), q, k)
    assert torch.equal(q, q0)


def test_empty_batch_is_a_no_op():
    native, triton = _pair("chunked", torch.bfloat16)
    q, k = _qk(0, 2, 1, 48, torch.bfloat16)
    for rope in (native, triton):
        out = rope(torch.zeros(3, 0, dtype=torch.int64, device=DEVICE), q, k)
        assert out[0].shape == (0, 96)
        out = rope(torch.zeros(0, dtype=torch.int64, device=DEVICE), q.view(0, 2, 48), k.view(0, 1, 48))
        assert out[0].shape == (0, 2, 48)
        empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
        assert rope.forward_decode(empty, empty, q, k)[1].shape == (0, 48)


def test_float32_positions_take_the_native_path_and_bf16_positions_are_refused():
    native, triton = _pair("interleaved", torch.float32, check_positions=False)
    positions = torch.tensor([[3.5, 200.25], [3.5, 17.0], [3.5, 250.75]], device=DEVICE)
    q, k = _qk(2, 2, 1, 48, torch.float32)
    exp = native(positions, q.clone(), k.clone())
    out = triton(positions, q.clone(), k.clone())
    assert torch.equal(out[0], exp[0]) and torch.equal(out[1], exp[1])
    with pytest.raises(MRopeError, match=r"torch.bfloat16, which holds integers exactly only up to 256"):
        triton(positions.bfloat16(), q, k)
    with pytest.raises(MRopeError, match=r"got torch.uint8 \(bool and uint8 tensors index as masks"):
        triton(positions.to(torch.uint8), q, k)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="auto picks the kernel only for CUDA tensors")
def test_auto_backend_uses_the_kernel_on_cuda(monkeypatch):
    import mrope.ops.mrope_rotary as ops

    calls = []
    original = ops.mrope_rotary_inplace
    monkeypatch.setattr(ops, "mrope_rotary_inplace", lambda *a: calls.append(1) or original(*a))
    rope = MRotaryEmbedding(48, 40, 256, 1e4, SECTIONS["chunked"], dtype=torch.bfloat16).to(DEVICE)
    q, k = _qk(2, 2, 1, 48, torch.bfloat16)
    rope(torch.zeros(3, 2, dtype=torch.int64, device=DEVICE), q, k)
    assert calls == [1]


def _graph_targets(fn, *args):
    """Run ``torch.compile(fn, fullgraph=True)`` once; return its result and the call targets of the
    one graph Dynamo captured (a graph break would raise)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(fn, fullgraph=True, backend=record)(*args)
    assert len(graphs) == 1
    return out, [str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"]


@pytest.mark.parametrize("rows", [3, 1])
def test_compiled_forward_is_one_custom_op_node_that_mutates_query_and_key(rows):
    """torch.compile sees the kernel as the custom op, not the Triton launch, and keeps its mutation:
    compiled (fullgraph; aot_eager functionalizes the in-place op) equals eager, in place."""
    native, triton = _pair("interleaved", torch.bfloat16, check_positions=False)
    positions = torch.randint(0, 256, (3, 5) if rows == 3 else (5,), device=DEVICE)
    q, k = _qk(5, 3, 2, 48, torch.bfloat16)
    exp = triton(positions, q.clone(), k.clone())
    (out_q, out_k), targets = _graph_targets(triton, positions, q.clone(), k.clone())
    assert targets == ["mrope.rotary_qk.default"]
    assert torch.equal(out_q, exp[0]) and torch.equal(out_k, exp[1])
    torch._dynamo.reset()
    compiled = torch.compile(triton, fullgraph=True, backend="aot_eager")
    in_q, in_k = q.clone(), k.clone()
    out_q, out_k = compiled(positions, in_q, in_k)
    assert torch.equal(in_q, exp[0]) and torch.equal(in_k, exp[1])
    assert torch.equal(out_q, exp[0]) and torch.equal(out_k, exp[1])
    torch.testing.assert_close(out_q, native(positions, q.clone(), k.clone())[0], rtol=2**-7, atol=1e-6)


def test_compiled_decode_is_one_custom_op_node():
    _, triton = _pair("chunked", torch.float32, check_positions=False)
    seq_lens = torch.tensor([3, 17, 1], device=DEVICE)
    deltas = torch.tensor([-1, 100, 0], device=DEVICE)
    q, k = _qk(3, 2, 1, 48, torch.float32)
    exp = triton.forward_decode(seq_lens, deltas, q.clone(), k.clone())
    (out_q, out_k), targets = _graph_targets(triton.forward_decode, seq_lens, deltas, q.clone(), k.clone())
    assert targets == ["mrope.rotary_qk_decode.default"]
    assert torch.equal(out_q, exp[0]) and torch.equal(out_k, exp[1])
    torch._dynamo.reset()
    in_q, in_k = q.clone(), k.clone()
    torch.compile(triton.forward_decode, fullgraph=True, backend="aot_eager")(seq_lens, deltas, in_q, in_k)
    assert torch.equal(in_q, exp[0]) and torch.equal(in_k, exp[1])


@pytest.mark.parametrize("neox", [True, False])
def test_custom_ops_pass_opcheck(neox):
    """Schema (declared mutations), fake implementation, autograd registration and AOT dispatch."""
    _, triton = _pair("ernie", torch.bfloat16, neox=neox)
    q, k = _qk(4, 2, 1, 48, torch.bfloat16)
    cache, rows = triton.cos_sin_cache, triton.freq_rows
    positions = torch.randint(0, 256, (3, 4), device=DEVICE)
    torch.library.opcheck(torch.ops.mrope.rotary_qk.default, (q, k, positions, cache, rows, 48, neox))
    torch.library.opcheck(torch.ops.mrope.rotary_qk.default, (q, k, positions[0], cache, rows, 48, neox))
    seq_lens, deltas = torch.tensor([3, 4, 9, 1], device=DEVICE), torch.tensor([0, 7, -2, 5], device=DEVICE)
    torch.library.opcheck(torch.ops.mrope.rotary_qk_decode.default, (q, k, seq_lens, deltas, cache, 48, neox))


def test_kernel_takes_the_layout_table_it_is_given():
    """The kernel reads each frequency's row from freq_rows, so a table of the other layout rotates as
    a module of that layout would (it does not derive the layout itself)."""
    chunked, _ = _pair("chunked", torch.float32)
    interleaved, _ = _pair("interleaved", torch.float32)
    positions = torch.randint(0, 256, (3, 5), device=DEVICE)
    q, k = _qk(5, 2, 1, 48, torch.float32)
    exp = interleaved(positions, q.clone(), k.clone())
    from mrope.ops.mrope_rotary import mrope_rotary_inplace

    out_q, out_k = q.clone(), k.clone()
    mrope_rotary_inplace(out_q, out_k, positions, chunked.cos_sin_cache, interleaved.freq_rows, 48, True)
    torch.testing.assert_close(out_q, exp[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_k, exp[1], rtol=1e-6, atol=1e-6)
    assert not torch.equal(chunked.freq_rows, interleaved.freq_rows)


@given(case=hunyuan_cases(max_tokens=4, max_heads=2), dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_kernel_matches_transformers_hunyuan(case, dtype):
    """HunYuan-VL's rotary (each channel of a pair from its own row, any number of rows) in the kernel:
    transformers' float32 result, rounded once (FMA: a last bit in float32, one bfloat16 ulp)."""
    require("transformers")
    cfg = hunyuan_text_config(case.section, alpha=case.alpha)
    triton = rotary_embedding_from_config(
        cfg.to_dict(), layout="hunyuan", is_neox_style=True, dtype=dtype, backend="triton"
    ).to(DEVICE)
    positions, q, k = case.tensors(dtype)
    exp_q, exp_k = hunyuan_reference(cfg, positions, q.float(), k.float())
    out_q, out_k = triton(positions.to(DEVICE), q.to(DEVICE), k.to(DEVICE))
    rtol = 1e-6 if dtype == torch.float32 else 2**-7
    torch.testing.assert_close(out_q.cpu(), exp_q.to(dtype), rtol=rtol, atol=1e-6)
    torch.testing.assert_close(out_k.cpu(), exp_k.to(dtype), rtol=rtol, atol=1e-6)


def test_kernel_split_table_on_strided_positions_and_opcheck():
    """The per-channel row table (rotary_dim rows) with an engine's strided position slice, and the
    custom op's checks with it."""
    native, triton = _pair("hunyuan", torch.bfloat16)
    assert triton.freq_rows.shape == (40,)
    buffer = torch.randint(0, 256, (4, 7), device=DEVICE)
    positions = buffer[:, :6]
    q, k = _qk(6, 2, 1, 48, torch.bfloat16)
    exp = native(positions, q.clone(), k.clone())
    out = triton(positions, q.clone(), k.clone())
    torch.testing.assert_close(out[0], exp[0], rtol=2**-7, atol=1e-6)
    torch.testing.assert_close(out[1], exp[1], rtol=2**-7, atol=1e-6)
    args = (q, k, positions, triton.cos_sin_cache, triton.freq_rows, 48, True)
    torch.library.opcheck(torch.ops.mrope.rotary_qk.default, args)


# -- compiling the kernel for sm_90 without a GPU ---------------------------------------------------

_COMPILE = """
from mrope.ops import mrope_rotary

kernel = mrope_rotary._mrope_rotary_kernel
constants = dict(NUM_Q_HEADS=4, NUM_KV_HEADS=2, Q_HEADS_PAD=4, KV_HEADS_PAD=2, HALF=20, HALF_PAD=32)
for dtype in ("bf16", "fp16", "fp32"):
    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(q_ptr="*" + dtype, k_ptr="*" + dtype, cache_ptr="*fp32", pos_ptr="*i64")
    signature.update(delta_ptr="*i64", rows_ptr="*i64")
    signature.update({name: "constexpr" for name in (*constants, "IS_NEOX", "POS_MODE", "SPLIT")})
    # 3-D positions with one row per frequency, and with a row per channel (HunYuan-VL's "hunyuan"
    # layout); one row of positions; decode
    for pos_mode, split in ((0, False), (0, True), (1, False), (2, False)):
        for neox in (True, False):
            values = dict(constants, IS_NEOX=neox, POS_MODE=pos_mode, SPLIT=split)
            source = ASTSource(kernel, signature, values)
            compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
            assert compiled.asm["cubin"], "no cubin"
            print("compiled", dtype, pos_mode, split, neox, len(compiled.asm["cubin"]))
"""


def test_kernel_compiles_for_sm90(tmp_path) -> None:
    """Triton's compiler down to a cubin for an H100/H200 target (its bundled ptxas), every position mode
    and the per-channel row table: catches what the interpreter does not. Skipped where Triton's NVIDIA
    compile machinery is missing."""
    output = compile_for_sm90(_COMPILE, tmp_path)
    assert output.count("compiled") == 24, output
