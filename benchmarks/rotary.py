"""``python benchmarks/rotary.py``: applying M-RoPE to q and k, mrope's native torch path against
transformers' own rotary (each model's rotary module producing cos/sin from position ids, then
``apply_rotary_pos_emb``), the fused Triton kernel and Liger-Kernel's ``qwen2vl_mrope`` (CUDA; Liger
when installed, chunked layout only).

Usage::

    python benchmarks/rotary.py [--quick] [--tokens 1 1024 65536] [--models qwen2_5_vl_7b]
                                [--dtypes bf16 fp16 fp32] [--threads 1] [--json out.json]

Each row reports the median time of one rotation of all q and k heads of ``tokens`` tokens (mrope in
place on ``(tokens, heads * head_dim)``; transformers out of place on its ``(1, heads, tokens, head_dim)``
view), the achieved bandwidth against the bytes that must move (q and k read and written once, plus the
positions), that bandwidth as a share of a same-size copy, and the speed against transformers and
Liger (their time over the row's). Positions are those of a prompt (text, an image grid, text), the
same for every provider. Before timing, each mrope output is checked against transformers' (float32:
1e-6; bfloat16/float16: the bound of ``tests/test_rotary.py``, transformers rounding every step in
that dtype). Liger's kernel is timed with its cos/sin already computed (as a model shares them across
layers), so its row excludes that work. On CUDA the timing uses CUDA events; on the CPU the providers
are timed in alternating rounds (a change of load hits all alike) with ``--threads`` torch threads
(default 1), on capped sizes.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable
from typing import Any

from _common import main
from _timing import cuda_event_seconds, format_table, median_us, time_interleaved, write_json

# name: (num_q_heads, num_kv_heads, head_size, mrope_section, layout, rope_theta)
MODELS = {
    "qwen2_5_vl_7b": (28, 4, 128, (16, 24, 24), "chunked", 1e6),
    "qwen3_vl_8b": (32, 8, 128, (24, 20, 20), "interleaved", 5e6),
    # four rows (index, w, h, image ordinal); the two channels of a pair take different rows
    "hunyuan_vl": (16, 8, 128, (16, 16, 16, 16), "hunyuan", 1e4),
}
# name: (transformers model_type, its text rotary class)
TRANSFORMERS_ROTARY = {
    "qwen2_5_vl_7b": ("qwen2_5_vl", "Qwen2_5_VLRotaryEmbedding"),
    "qwen3_vl_8b": ("qwen3_vl", "Qwen3VLTextRotaryEmbedding"),
    "hunyuan_vl": ("hunyuan_vl", "HunYuanVLRotaryEmbedding"),
}
DTYPES = ("bf16", "fp16", "fp32")
GPU_TOKENS = [1, 16, 256, 1024, 4096, 16384, 65536]
CPU_TOKENS = [1, 16, 256, 1024]
MAX_POSITION = 65536


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, nargs="+", default=None, help="num_tokens sizes to run")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")


def prompt_positions(torch: Any, num_tokens: int) -> Any:
    """``(3, num_tokens)`` M-RoPE positions of a prompt: a quarter text, an image grid of about half
    the tokens (t fixed, h and w its rows and columns), then text again after the grid's largest
    position, as Qwen2.5-VL numbers them."""
    side = math.isqrt(num_tokens // 2)
    text = num_tokens // 4 if side else num_tokens
    after = num_tokens - text - side * side
    first = torch.arange(text).expand(3, -1)
    grid = torch.stack(
        (
            torch.full((side * side,), text),
            text + torch.arange(side).repeat_interleave(side),
            text + torch.arange(side).repeat(side),
        )
    )
    last = (text + side + torch.arange(after)).expand(3, -1)
    return torch.cat((first, grid, last), dim=1)


def _providers(
    torch: Any, model: str, num_tokens: int, dtype: Any, device: str
) -> tuple[dict[str, Callable], int, int]:
    """Callables per provider on fresh inputs, the bytes that must move, and the q+k bytes; checks first
    that mrope's native output agrees with transformers'."""
    from mrope.rotary import MRotaryEmbedding

    num_q, num_kv, head, section, layout, theta = MODELS[model]
    g = torch.Generator().manual_seed(0)
    positions = prompt_positions(torch, num_tokens)
    if len(section) > 3:  # HunYuan-VL's rows: the index, then the rendered rows reversed
        index = torch.arange(num_tokens).expand(len(section) - 3, -1)
        positions = torch.cat((index, positions.flip(0)))
    positions = positions.to(device)
    q = torch.randn(num_tokens, num_q * head, generator=g).to(dtype).to(device)
    k = torch.randn(num_tokens, num_kv * head, generator=g).to(dtype).to(device)
    qk_bytes = (q.numel() + k.numel()) * q.element_size()
    must_move = 2 * qk_bytes + positions.numel() * positions.element_size()
    args = (head, head, MAX_POSITION, theta, section)
    fns: dict[str, Callable] = {}
    native = MRotaryEmbedding(*args, layout=layout, dtype=dtype, backend="native").to(device)
    fns["native"] = lambda: native(positions, q, k)
    reference = _transformers(torch, model, positions, q, k)
    if reference is not None:
        _check_agreement(torch, native(positions, q.clone(), k.clone()), reference(), (q, k))
        fns["transformers"] = reference
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


def _transformers(torch: Any, model: str, positions: Any, q: Any, k: Any) -> Callable | None:
    """transformers' rotary of ``model`` on the same q and k, viewed ``(1, heads, tokens, head_dim)`` as
    its attention layers hold them; ``None`` without transformers."""
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:
        return None
    num_q, num_kv, head, section, _, theta = MODELS[model]
    model_type, rotary_class = TRANSFORMERS_ROTARY[model]
    text = {
        "hidden_size": num_q * head,
        "num_attention_heads": num_q,
        "num_key_value_heads": num_kv,
        "head_dim": head,
        "max_position_embeddings": MAX_POSITION,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta, "mrope_section": list(section)},
    }
    config = CONFIG_MAPPING[model_type](text_config=text).text_config
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    rotary = getattr(modeling, rotary_class)(config).to(q.device)
    num_tokens = q.shape[0]
    q4 = q.view(1, num_tokens, num_q, head).transpose(1, 2)
    k4 = k.view(1, num_tokens, num_kv, head).transpose(1, 2)
    position_ids = positions[:, None, :]

    def call() -> tuple[Any, Any]:
        cos, sin = rotary(q4, position_ids)
        return modeling.apply_rotary_pos_emb(q4, k4, cos, sin)

    return call


def _check_agreement(
    torch: Any, ours: tuple[Any, Any], theirs: tuple[Any, Any], inputs: tuple[Any, Any]
) -> None:
    """mrope (float32 arithmetic, one rounding) against transformers: equal to 1e-6 in float32; in
    bfloat16/float16, where transformers rounds cos, sin, both products and the sum, within
    ``8u(|x| + |out|)`` (u the unit roundoff), the bound tests/test_rotary.py derives."""
    dtype = inputs[0].dtype
    unit = {torch.float32: 1e-6 / 8, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
    for name, mine, ref, x in zip(("query", "key"), ours, theirs, inputs, strict=True):
        ref = ref[0].transpose(0, 1).reshape(mine.shape).float()
        mine = mine.float()
        bound = 8 * unit * (x.float().abs() + mine.abs()) + 1e-6
        if not bool(((mine - ref).abs() <= bound).all()):
            worst = float((mine - ref).abs().max())
            raise SystemExit(f"mrope and transformers disagree on {name} ({dtype}): max difference {worst}")


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
    if device == "cpu":
        torch.set_num_threads(args.threads)
        timer = lambda fns: time_interleaved(fns, quick=args.quick)  # noqa: E731
    else:
        repeats = 10 if args.quick else 50
        timer = lambda fns: {name: cuda_event_seconds(fn, repeats) for name, fn in fns.items()}  # noqa: E731
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    rows, results = [], []
    with torch.no_grad():
        for model in args.models:
            for num_tokens in sizes:
                for dtype_name in args.dtypes:
                    dtype = dtypes[dtype_name]
                    fns, must_move, qk_bytes = _providers(torch, model, num_tokens, dtype, device)
                    src = torch.empty(qk_bytes, dtype=torch.uint8, device=device)
                    dst = torch.empty_like(src)
                    fns["copy"] = lambda d=dst, s=src: d.copy_(s)
                    times = {name: median_us(samples) for name, samples in timer(fns).items()}
                    copy_gbs = 2 * qk_bytes / (times.pop("copy") * 1e-6) / 1e9
                    for name, us in times.items():
                        gbs = must_move / (us * 1e-6) / 1e9
                        vs = {
                            ref: times[ref] / us if ref in times else None
                            for ref in ("transformers", "liger")
                        }
                        rows.append(
                            [
                                num_tokens,
                                f"{model} ({MODELS[model][4]})",
                                dtype_name,
                                name,
                                us,
                                gbs,
                                100 * gbs / copy_gbs,
                                *("-" if v is None else f"{v:.2f}x" for v in vs.values()),
                            ]
                        )
                        results.append(
                            {
                                "model": model,
                                "layout": MODELS[model][4],
                                "num_tokens": num_tokens,
                                "dtype": dtype_name,
                                "provider": name,
                                "median_us": us,
                                "bytes": must_move,
                                "gb_per_s": gbs,
                                "copy_gb_per_s": copy_gbs,
                                "speedup_vs_transformers": vs["transformers"],
                                "speedup_vs_liger": vs["liger"],
                            }
                        )
    header = ["tokens", "model (layout)", "dtype", "provider", "median us", "GB/s", "% of copy"]
    header += ["speed vs transformers", "speed vs Liger"]
    threads = f", {torch.get_num_threads()} thread(s)" if device == "cpu" else ""
    print(f"M-RoPE rotation of q and k, device {device}{threads}")
    print(format_table(header, rows))
    write_json(
        args.json,
        {"benchmark": "rotary", "device": device, "threads": torch.get_num_threads(), "results": results},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(__doc__, add_arguments, run))
