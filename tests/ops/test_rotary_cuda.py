"""The rotary path on CUDA without synchronisation: sync-debug mode and CUDA graph capture.

An engine constructs the module with ``check_positions=False`` and calls it inside a CUDA graph, so no
call may synchronise, integer positions (Triton kernel or native) or float32 positions (Qwen3-Omni,
always native). Skipped without CUDA; ``scripts/gpu_check.sh`` and ``scripts/gpu_rotary_check.py``
run them where a GPU is lent. Values are compared with the checked native module on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from mrope.rotary import MRotaryEmbedding

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run by gpu_check.sh)")

HEAD, ROTARY, MAX_POS, SECTION = 64, 48, 512, (8, 8, 8)
NUM_TOKENS, Q_HEADS, KV_HEADS = 9, 4, 2


def _modules(backend):
    kw = {"layout": "interleaved", "dtype": torch.float32}
    cuda = MRotaryEmbedding(HEAD, ROTARY, MAX_POS, 1e4, SECTION, backend=backend, check_positions=False, **kw)
    ref = MRotaryEmbedding(HEAD, ROTARY, MAX_POS, 1e4, SECTION, backend="native", **kw)
    return cuda.to("cuda"), ref


def _positions(kind, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "int3":
        return torch.randint(0, MAX_POS, (3, NUM_TOKENS), generator=g)
    if kind == "int1":
        return torch.randint(0, MAX_POS, (NUM_TOKENS,), generator=g)
    whole = torch.randint(0, MAX_POS - 1, (3, NUM_TOKENS), generator=g)
    return whole + torch.rand(3, NUM_TOKENS, generator=g)  # fractional float32 (Qwen3-Omni)


def _qk(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(NUM_TOKENS, Q_HEADS * HEAD, generator=g)
    return q, torch.randn(NUM_TOKENS, KV_HEADS * HEAD, generator=g)


def _close(out, exp):
    torch.testing.assert_close(out[0].cpu(), exp[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[1].cpu(), exp[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["auto", "native"])
@pytest.mark.parametrize("kind", ["int3", "int1", "float32"])
def test_unchecked_forward_and_decode_do_not_synchronise(backend, kind):
    rope, ref = _modules(backend)
    pos, (q, k) = _positions(kind), _qk()
    deltas = pos.reshape(-1)[:NUM_TOKENS] - 6  # decode at seq_len 7: position 6 + delta
    cpos, cq, ck, cdeltas = pos.cuda(), q.cuda(), k.cuda(), deltas.cuda()
    seq_lens = torch.full((NUM_TOKENS,), 7, device="cuda")
    rope(cpos, cq.clone(), ck.clone())  # warm-up: the Triton kernel compiles outside the check
    rope.forward_decode(seq_lens, cdeltas, cq.clone(), ck.clone())
    torch.cuda.synchronize()
    out, dec = (cq.clone(), ck.clone()), (cq.clone(), ck.clone())
    torch.cuda.set_sync_debug_mode("error")
    try:
        rope(cpos, *out)
        rope.forward_decode(seq_lens, cdeltas, *dec)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    _close(out, ref(pos, q.clone(), k.clone()))
    _close(dec, ref(deltas + 6, q.clone(), k.clone()))


@pytest.mark.parametrize("backend", ["auto", "native"])
@pytest.mark.parametrize("kind", ["int3", "int1", "float32"])
def test_forward_is_captured_and_replayed_by_a_cuda_graph(backend, kind):
    rope, ref = _modules(backend)
    pos, (q, k) = _positions(kind), _qk()
    static_pos, static_q, static_k = pos.cuda(), q.cuda(), k.cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph asks
        rope(static_pos, static_q.clone(), static_k.clone())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rope(static_pos, static_q, static_k)
    for seed in (1, 2):  # new inputs written into the captured buffers, then replayed
        pos, (q, k) = _positions(kind, seed), _qk(seed)
        static_pos.copy_(pos)
        static_q.copy_(q)
        static_k.copy_(k)
        graph.replay()
        torch.cuda.synchronize()
        _close((static_q, static_k), ref(pos, q.clone(), k.clone()))
