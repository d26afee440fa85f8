"""``python benchmarks/rotary.py``: applying M-RoPE to q and k, native torch against the fused Triton kernel
against Liger-Kernel's ``qwen2vl_mrope`` (when installed; chunked layout only).

Usage::

    python benchmarks/rotary.py [--quick] [--tokens 1 1024 65536] [--models qwen2_5_vl_7b] [--json out.json]

Each row reports the median time of one in-place rotation of all q and k heads of ``tokens`` tokens in
bfloat16, the achieved bandwidth against the bytes that must move (q and k read and written once,
plus the positions), and that bandwidth as a share of a same-size device copy. Liger's kernel is timed
with its cos/sin already computed (as a model shares them across layers), so its row excludes that
work. On CUDA the timing uses CUDA events; on the CPU only the native path runs, on capped sizes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from _common import main
from _timing import format_table, median_us, time_call, write_json

# name: (num_q_heads, num_kv_heads, head_size, mrope_section, layout, rope_theta)
MODELS = {
    "qwen2_5_vl_7b": (28, 4, 128, (16, 24, 24), "chunked", 1e6),
    "qwen3_vl_8b": (32, 8, 128, (24, 20, 20), "interleaved", 5e6),
}
GPU_TOKENS = [1, 16, 256, 1024, 4096, 16384, 65536]
CPU_TOKENS = [1, 16, 256, 1024]
MAX_POSITION = 65536


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="num_tokens sizes to run")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))


def _timer(torch: Any, device: str, repeats: int) -> Callable[[Callable[[], Any]], list[float]]:
    if device != "cuda":
        return lambda fn: time_call(fn, repeats=repeats, min_seconds=0.05)

    def cuda_time(fn: Callable[[], Any]) -> list[float]:
        fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        return samples

    return cuda_time


def _providers(torch: Any, model: str, num_tokens: int, device: str) -> tuple[dict[str, Callable], int, int]:
    """Callables per provider on fresh bf16 inputs, the bytes that must move, and the q+k bytes."""
    from mrope.rotary import MRotaryEmbedding

    num_q, num_kv, head, section, layout, theta = MODELS[model]
    dtype = torch.bfloat16
    g = torch.Generator().manual_seed(0)
    positions = torch.randint(0, MAX_POSITION, (3, num_tokens), generator=g).to(device)
    q = torch.randn(num_tokens, num_q * head, generator=g).to(dtype).to(device)
    k = torch.randn(num_tokens, num_kv * head, generator=g).to(dtype).to(device)
    qk_bytes = (q.numel() + k.numel()) * q.element_size()
    must_move = 2 * qk_bytes + positions.numel() * positions.element_size()
    args = (head, head, MAX_POSITION, theta, section)
    fns: dict[str, Callable] = {}
    native = MRotaryEmbedding(*args, layout=layout, dtype=dtype, backend="native").to(device)
    fns["native"] = lambda: native(positions, q, k)
    if device == "cuda":
        kernel = MRotaryEmbedding(*args, layout=layout, dtype=dtype, backend="triton", check_positions=False)
        kernel = kernel.to(device)
        fns["triton"] = lambda: kernel(positions, q, k)
        liger = (
            _liger(torch, native, positions, q, k, num_q, num_kv, head, section)
            if layout == "chunked"
            else None
        )
        if liger is not None:
            fns["liger"] = liger
    return fns, must_move, qk_bytes


def _liger(torch, rope, positions, q, k, num_q, num_kv, head, section) -> Callable | None:
    try:
        from liger_kernel.ops.qwen2vl_mrope import qwen2vl_mrope_forward
    except ImportError:
        return None
    num_tokens, half = positions.shape[1], head // 2
    rows = rope.cos_sin_cache[positions]  # (3, N, head): [cos | sin] per row, as HF builds them
    cos = torch.cat((rows[..., :half], rows[..., :half]), -1)[:, None].to(q.dtype)
    sin = torch.cat((rows[..., half:], rows[..., half:]), -1)[:, None].to(q.dtype)
    q4 = q.view(1, num_tokens, num_q, head).transpose(1, 2)
    k4 = k.view(1, num_tokens, num_kv, head).transpose(1, 2)
    return lambda: qwen2vl_mrope_forward(q4, k4, cos, sin, list(section))


def run(args: argparse.Namespace) -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.tokens:
        sizes = args.tokens
    elif device == "cuda":
        sizes = [1, 1024, 16384, 65536] if args.quick else GPU_TOKENS
    else:
        sizes = [1, 256, 1024] if args.quick else CPU_TOKENS
    repeats = (10 if args.quick else 50) if device == "cuda" else (3 if args.quick else 5)
    timer = _timer(torch, device, repeats)
    rows, results = [], []
    for model in args.models:
        for num_tokens in sizes:
            fns, must_move, qk_bytes = _providers(torch, model, num_tokens, device)
            src = torch.empty(qk_bytes, dtype=torch.uint8, device=device)
            dst = torch.empty_like(src)
            copy_gbs = 2 * qk_bytes / (median_us(timer(lambda d=dst, s=src: d.copy_(s))) * 1e-6) / 1e9
            times = {name: median_us(timer(fn)) for name, fn in fns.items()}
            for name, us in times.items():
                gbs = must_move / (us * 1e-6) / 1e9
                vs_liger = times["liger"] / us if "liger" in times else None
                rows.append(
                    [
                        num_tokens,
                        f"{model} ({MODELS[model][4]})",
                        name,
                        us,
                        gbs,
                        100 * gbs / copy_gbs,
                        "-" if vs_liger is None else f"{vs_liger:.2f}x",
                    ]
                )
                results.append(
                    {
                        "model": model,
                        "layout": MODELS[model][4],
                        "num_tokens": num_tokens,
                        "provider": name,
                        "median_us": us,
                        "bytes": must_move,
                        "gb_per_s": gbs,
                        "copy_gb_per_s": copy_gbs,
                        "speedup_vs_liger": vs_liger,
                    }
                )
    header = ["tokens", "model (layout)", "provider", "median us", "GB/s", "% of copy", "speed vs Liger"]
    print(f"M-RoPE rotation of q and k, bfloat16, device {device}")
    print(format_table(header, rows))
    write_json(args.json, {"benchmark": "rotary", "device": device, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(__doc__, add_arguments, run))
