"""mrope inside SGLang's engine, timed whole: ``ForwardBatch._compute_mrope_positions`` as the scheduler
calls it (a timer around the engine's call of the installed method: mrope's with its registrations and
per-step bookkeeping, or SGLang's own), SGLang alone against SGLang with mrope, on the same requests.

Usage (in the SGLang environment that ``make venv-sglang`` creates)::

    .venv-sglang/bin/python benchmarks/sglang_engine.py [--quick] [--json bench-results/sglang-engine.json]

A tiny random Qwen2.5-VL (tests/support/checkpoints.py) serves B = 8, 64 and 256 concurrent requests of
~200 text tokens and one image (4 x 6 merged tokens), chunked prefill of 512 tokens per step (chunks end
inside images), 32 output tokens each, rounds one after another. The same requests run in an engine of
SGLang alone, then in one with mrope (``MROPE_SGLANG=1``: prompts packed in the tokenizer process,
registered by copying in the scheduler), ``--repeats`` times alternated, each engine started afresh (no
radix-cache hit between them). The timer is an SGLang plugin of the benchmark's (``_sglang_timer.py``,
SGLang's own hook registry, an AROUND hook applied after every plugin ran). Targets: mrope's extend step
at most SGLang's median and p99 at every B (an extend step holds the few requests a 512-token chunk
reaches, each registered in its first one); decode steps at least 5x faster by median at B >= 64. The
device-side decode is measured on a GPU only (``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import _sglang_timer
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


def summarize(times: list[float]) -> dict[str, float]:
    """Median, p90 and p99 (us) of samples in seconds."""
    return {f"p{q}_us": percentile_us(times, q) for q in (50, 90, 99)}


def run_engine(model: Path, sizes: tuple[int, ...], mode: str, folder: Path) -> list[list[Any]]:
    """Every timed call of one engine (``mode``: ``"sglang"`` alone or ``"mrope"``) over the workload:
    ``[B, kind, requests, new requests, ns]``."""
    from mrope.integrations import sglang as plugin

    if mode == "mrope":  # this process (the tokenizer's); the scheduler reads the variable at its start
        os.environ[plugin.ENV_VAR] = "1"
        plugin.enable("mrope")
    else:
        os.environ.pop(plugin.ENV_VAR, None)
        plugin.disable()
    import sglang

    engine_args = {
        **_engine.ENGINE_ARGS,
        "chunked_prefill_size": CHUNK,
        "max_running_requests": max(sizes),
        "max_total_tokens": max(sizes) * 320,
    }
    engine = sglang.Engine(model_path=str(model), **engine_args)
    samples_file = folder / f"steps-{mode}.json"
    rows: list[list[Any]] = []
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
            engine.collective_rpc(_sglang_timer.RPC, path=str(samples_file))
            samples = json.loads(samples_file.read_text())
            rows += [[size, *sample] for sample in samples[seen:]]
            seen = len(samples)
        if mode == "mrope":
            engine.collective_rpc(plugin.STATS_RPC, path=str(folder / "stats.json"))
            stats = json.loads((folder / "stats.json").read_text())["stats"]
            assert stats["fallback_steps"] == stats["fallback_requests"] == 0, stats
            assert stats["from_packed"] > 0 and stats["materialized"] == 0, stats
    finally:
        engine.shutdown()
    return rows


def table_rows(runs: dict[str, list[list[Any]]], sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """Per B and kind: both engines' median, p90 and p99 and the ratios (decode: at the most running
    requests the engine reached; extend: every extend step)."""
    results = []
    for size in sizes:
        for kind in ("extend", "decode"):
            result: dict[str, Any] = {"B": size, "kind": kind}
            for mode, rows in runs.items():
                chosen = [r for r in rows if r[0] == size and r[1] == kind]
                if kind == "decode" and chosen:
                    top = max(r[2] for r in chosen)
                    chosen = [r for r in chosen if r[2] == top]
                if not chosen:
                    break
                result[mode] = summarize([r[4] * 1e-9 for r in chosen])
                result[f"{mode}_n"] = len(chosen)
                result["requests"] = sorted(r[2] for r in chosen)[len(chosen) // 2]
                result["new"] = sum(r[3] for r in chosen) / len(chosen)
            else:
                for q in (50, 90, 99):
                    result[f"ratio_p{q}"] = result["sglang"][f"p{q}_us"] / result["mrope"][f"p{q}_us"]
                if kind == "decode" and size >= 64:
                    result["target"] = "median >= 5x"
                    result["met"] = result["ratio_p50"] >= 5
                elif kind == "extend":
                    result["target"] = "median, p99 <= SGLang's"
                    result["met"] = result["ratio_p50"] >= 1 and result["ratio_p99"] >= 1
                else:
                    result["target"], result["met"] = "-", None
                results.append(result)
    return results


def new_request_rows(runs: dict[str, list[list[Any]]]) -> list[list[Any]]:
    """Extend steps grouped by how many of their requests are new (0, 1, 2, 3+): each engine's median,
    so that the cost of a registration in the step reads off the difference."""
    rows = []
    for new in range(4):
        row: list[Any] = [f"{new}+" if new == 3 else new]
        for mode in ("sglang", "mrope"):
            times = [r[4] * 1e-9 for r in runs[mode] if r[1] == "extend" and min(r[3], 3) == new]
            row.append(f"{percentile_us(times, 50):.0f} ({len(times)})" if times else "-")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="B = 8 and 64 only")
    parser.add_argument("--repeats", type=int, default=1, help="engine pairs (SGLang, mrope), alternated")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    for key, value in _engine.ENV.items():
        os.environ.setdefault(key, value)
    sizes = BATCH_SIZES[:2] if args.quick else BATCH_SIZES
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        _sglang_timer.install(folder / "plugins")  # SGLang's processes load the timer from here
        paths = [str(folder / "plugins"), str(Path(__file__).resolve().parent)]
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])
        sys.path[:0] = paths
        model = checkpoints.build("qwen2_5_vl", folder / "qwen2_5_vl")
        _engine.released_names(model)
        os.environ["SGLANG_CACHE_DIR"] = str(folder / "cache")
        runs: dict[str, list[list[Any]]] = {"sglang": [], "mrope": []}
        for _ in range(args.repeats):
            for mode in runs:
                runs[mode] += run_engine(model, sizes, mode, folder)
    results = table_rows(runs, sizes)
    header = ["B", "step", "steps", "requests", "new per step", "SGLang p50 / p90 / p99 us"]
    header += ["mrope p50 / p90 / p99 us", "ratio p50 / p99", "target"]
    rows = []
    for r in results:
        sg, mr = r["sglang"], r["mrope"]
        met = "" if r["met"] is None else (": yes" if r["met"] else ": no")
        rows.append(
            [
                r["B"],
                r["kind"],
                f"{r['sglang_n']} / {r['mrope_n']}",
                r["requests"],
                f"{r['new']:.1f}",
                f"{sg['p50_us']:.0f} / {sg['p90_us']:.0f} / {sg['p99_us']:.0f}",
                f"{mr['p50_us']:.0f} / {mr['p90_us']:.0f} / {mr['p99_us']:.0f}",
                f"{r['ratio_p50']:.1f}x / {r['ratio_p99']:.1f}x",
                f"{r['target']}{met}",
            ]
        )
    by_new = new_request_rows(runs)
    print(
        "ForwardBatch._compute_mrope_positions timed whole where SGLang's scheduler calls it (SGLang alone "
        f"vs SGLang with mrope), tiny Qwen2.5-VL, CPU, {args.repeats} engine pair(s)"
    )
    print(format_table(header, rows))
    print("\nExtend steps by the requests in their first step (registered there), every B: median us (steps)")
    print(format_table(["requests new to the table", "SGLang", "mrope"], by_new))
    write_json(args.json, {"steps": results, "repeats": args.repeats, "extend_by_new": by_new})


if __name__ == "__main__":
    main()
