"""mrope inside SGLang's engine: the per-step position time and the prompt positions, SGLang's own code
against mrope's, on the same batches.

Usage (in the SGLang environment that ``make venv-sglang`` creates)::

    .venv-sglang/bin/python benchmarks/sglang_engine.py [--quick] [--json bench-results/sglang-engine.json]

A tiny random Qwen2.5-VL (tests/integrations/vllm/checkpoints.py) serves B = 8, 64 and 256 concurrent
requests of ~200 text tokens and one image (4 x 6 merged tokens), chunked prefill of 512 tokens per
step (chunks end inside images), 32 output tokens each, one engine, rounds one after another. The
integration runs in check mode (``MROPE_SGLANG=check``): each step SGLang's
``ForwardBatch._compute_mrope_positions`` (its per-request loops, the concatenation, the copy) and
mrope's (one ``PositionTable`` call) both run on the same batch, timed apart (host time; on this CPU
the device is the host), and compared; each prompt's ``get_rope_index`` likewise, in the tokenizer
(this) process. Targets: mrope's step at most SGLang's at every B, decode steps at least 5x faster at
B >= 64 (an extend step holds the few requests its chunk reaches, whatever B); prompt positions at
least 5x faster. The device-side decode is measured on a GPU only
(``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from _timing import format_table, percentile_us, write_json
from support import checkpoints
from support import sglang_engine as _engine

ROOT = Path(__file__).resolve().parents[1]

BATCH_SIZES = (8, 64, 256)
OUTPUT_TOKENS = 32
#: B = 8 runs several batches (:func:`rounds`); 64 and 256 one each
MIN_EXTEND_REQUESTS = 48
CHUNK = 512
TEXT = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. A photo of a cat, "
    "a dog and a bird on the table in the kitchen at night. Please answer with one word. "
)
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


def batch(size: int, offset: int) -> tuple[list[str], list[list[Any]]]:
    """``size`` distinct prompts (no radix-cache hit between them): text, one image, text."""
    texts = [f"Request {offset + i}. {TEXT * 3}{IMAGE} Describe it, {offset + i}." for i in range(size)]
    images = [[_engine.image("qwen2_5_vl", 4, 6, seed=offset + i)] for i in range(size)]
    return texts, images


def rounds(size: int) -> int:
    """Batches of ``size`` requests run one after another: enough that the extend steps (the few a
    512-token chunk reaches per batch, about 6 at B = 8) give a median of some 30 samples."""
    return max(1, MIN_EXTEND_REQUESTS // size)


def summarize(samples: list[list[Any]], kind: str) -> dict[str, float] | None:
    """Median and p99 (us) of mrope's and SGLang's times for the samples of ``kind``."""
    chosen = [s for s in samples if s[0] == kind]
    if not chosen:
        return None
    ours = [s[2] * 1e-9 for s in chosen]
    theirs = [s[3] * 1e-9 for s in chosen]
    result = {"n": len(chosen), "size": sorted(s[1] for s in chosen)[len(chosen) // 2]}
    for name, values in (("mrope", ours), ("sglang", theirs)):
        result[f"{name}_median_us"] = percentile_us(values, 50)
        result[f"{name}_p99_us"] = percentile_us(values, 99)
    result["speedup_median"] = result["sglang_median_us"] / result["mrope_median_us"]
    result["speedup_p99"] = result["sglang_p99_us"] / result["mrope_p99_us"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="B = 8 and 64 only")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    for key, value in _engine.ENV.items():
        os.environ.setdefault(key, value)
    import sglang

    from mrope.integrations import sglang as plugin

    sizes = BATCH_SIZES[:2] if args.quick else BATCH_SIZES
    with tempfile.TemporaryDirectory() as folder:
        model = checkpoints.build("qwen2_5_vl", Path(folder) / "qwen2_5_vl")
        _engine.released_names(model)
        os.environ["SGLANG_CACHE_DIR"] = str(Path(folder) / "cache")
        os.environ[plugin.ENV_VAR] = "check"
        plugin.register()
        engine_args = {
            **_engine.ENGINE_ARGS,
            "chunked_prefill_size": CHUNK,
            "max_running_requests": max(sizes),
            "max_total_tokens": max(sizes) * 320,
        }
        engine = sglang.Engine(model_path=str(model), **engine_args)
        stats_file = Path(folder) / "stats.json"
        steps: dict[int, dict[str, Any]] = {}
        seen = 0
        try:
            offset = 0
            for size in sizes:
                for _ in range(rounds(size)):
                    texts, images = batch(size, offset)
                    offset += size
                    engine.generate(
                        texts,
                        {"temperature": 0, "max_new_tokens": OUTPUT_TOKENS, "ignore_eos": True},
                        image_data=images,
                    )
                engine.collective_rpc(plugin.STATS_RPC, path=str(stats_file))
                samples = json.loads(stats_file.read_text())["timings"][seen:]
                seen += len(samples)
                # decode steps at the most running requests SGLang reached (its KV reservation may hold
                # some back); extend steps hold the few requests a 512-token chunk reaches
                top = max((s[1] for s in samples if s[0] == "decode"), default=0)
                full = [s for s in samples if s[0] != "decode" or s[1] == top]
                steps[size] = {kind: summarize(full, kind) for kind in ("extend", "decode")}
        finally:
            engine.shutdown()
        prompt = summarize([list(t) for t in plugin.timings()], "prompt")
    rows = []
    for size, kinds in steps.items():
        for kind, result in kinds.items():
            if result is None:
                continue
            target = 5.0 if size >= 64 and kind == "decode" else 1.0
            met = "yes" if result["speedup_median"] >= target else "no"
            rows.append(
                [
                    size,
                    kind,
                    result["n"],
                    result["size"],
                    result["sglang_median_us"],
                    result["mrope_median_us"],
                    result["sglang_p99_us"],
                    result["mrope_p99_us"],
                    result["speedup_median"],
                    f">= {target:g}x: {met}",
                ]
            )
    header = [
        "B",
        "step",
        "steps",
        "requests per step",
        "SGLang median us",
        "mrope median us",
        "SGLang p99 us",
        "mrope p99 us",
        "speedup (median)",
        "target",
    ]
    print("Per-step positions (ForwardBatch._compute_mrope_positions), tiny Qwen2.5-VL, CPU")
    print(format_table(header, rows))
    if prompt is not None:
        met = "yes" if prompt["speedup_median"] >= 5 else "no"
        print("\nPrompt positions (get_rope_index, tokenizer process)")
        print(
            format_table(
                ["prompts", "tokens", "SGLang median us", "mrope median us", "speedup", "target"],
                [
                    [
                        prompt["n"],
                        prompt["size"],
                        prompt["sglang_median_us"],
                        prompt["mrope_median_us"],
                        prompt["speedup_median"],
                        f">= 5x: {met}",
                    ]
                ],
            )
        )
    write_json(args.json, {"steps": {str(k): v for k, v in steps.items()}, "prompt": prompt})


if __name__ == "__main__":
    main()
