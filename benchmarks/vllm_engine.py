"""The vLLM plugin measured inside vLLM: the per-step position hook and admission, vLLM's own code
against mrope's, in one engine, on the same prompts.

Usage (in the vLLM environment that ``make test`` creates)::

    .venv-vllm/bin/python benchmarks/vllm_engine.py [--quick] [--json bench-results/vllm_engine.json]

A tiny random Qwen2.5-VL (tests/integrations/vllm/checkpoints.py) serves B = 8, 64 and 256
concurrent requests of ~300 text tokens and one image, chunked prefill of 2048 tokens per step, 64
output tokens each. The same engine runs the prompts with vLLM's own M-RoPE path and with the plugin
enabled, alternately, ``--rounds`` times each. Timers wrap the runner's ``_calc_mrope_positions``
(the per-step hook: vLLM's per-request loop, or the plugin's one ``fill``; not timed: the plugin's
stash of the scheduled counts in ``_prepare_inputs``, an attribute lookup and store) and
``_init_mrope_positions`` (admission: vLLM's ``get_mrope_input_positions``, or ``PositionTable.add``).
The greedy tokens of the two paths are compared: they must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the runner lives in this process

from support import checkpoints  # noqa: E402
from support import vllm_harness as harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

OUTPUT_TOKENS = 64
TOKEN_BUDGET = 2048


class HookTimer:
    """Wraps runner methods with timers (ns per call); :meth:`remove` puts the methods back."""

    def __init__(self, cls: type, names: tuple[str, ...]) -> None:
        self.cls = cls
        self.saved = {name: cls.__dict__[name] for name in names}
        self.times: dict[str, list[int]] = {name: [] for name in names}
        self.prefill_steps: list[bool] = []
        for name, method in self.saved.items():
            setattr(cls, name, self._timed(name, method))

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        record = self.times[name].append
        clock = time.perf_counter_ns
        flags = self.prefill_steps

        def timed(runner: Any, *args: Any) -> Any:
            start = clock()
            result = method(runner, *args)
            record(clock() - start)
            if name == "_calc_mrope_positions":
                batch = runner.input_batch
                n = batch.num_reqs
                flags.append(bool((batch.num_computed_tokens_cpu[:n] < batch.num_prompt_tokens[:n]).any()))
            return result

        return timed

    def remove(self) -> None:
        for name, method in self.saved.items():
            setattr(self.cls, name, method)


def _prompts(family: str, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` prompts of ~300 text tokens around one image of 8 x 8 merged tokens (distinct text
    and pixels, so prefix caching does not skip the work)."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "kilo"]
    image = harness.placeholders(family)["image"]
    u = harness.unit(family)
    result = []
    for i in range(count):
        text = " ".join(rng.choice(words, size=70).tolist())
        cut = int(rng.integers(5, 65))
        head, tail = text.split(" ")[:cut], text.split(" ")[cut:]
        result.append(
            {
                "prompt": f"{' '.join(head)} {image} {' '.join(tail)}",
                "multi_modal_data": {"image": harness.image(8 * u, 8 * u, seed=seed * 10_000 + i)},
            }
        )
    return result


def _summary(values: list[int]) -> tuple[float, float]:
    us = np.asarray(values, dtype=np.float64) / 1000
    return float(np.median(us)), float(np.percentile(us, 99))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from mrope.integrations import vllm as plugin

    results: dict[str, Any] = {"batches": {}}
    with tempfile.TemporaryDirectory() as folder:
        model = checkpoints.build("qwen2_5_vl", Path(folder) / "qwen2_5_vl")
        for batch in args.batches:
            prompts = _prompts("qwen2_5_vl", batch, seed=batch)
            max_len = 640
            engine = harness.Engine(
                model,
                max_num_seqs=batch,
                max_num_batched_tokens=TOKEN_BUDGET,
                max_model_len=max_len,
                kv_cache_tokens=batch * max_len + 256,
                limit_mm_per_prompt={"image": 1, "video": 0},
            )
            times: dict[str, dict[str, list]] = {}
            tokens: dict[str, list] = {}
            try:
                for _ in range(args.rounds):
                    for path in ("vllm", "mrope"):
                        if path == "mrope":
                            plugin.enable()
                        timer = HookTimer(GPUModelRunner, ("_calc_mrope_positions", "_init_mrope_positions"))
                        try:
                            out = engine.generate(prompts, max_tokens=OUTPUT_TOKENS)
                        finally:
                            timer.remove()
                            plugin.disable()
                        if tokens.setdefault(path, out) != out:
                            raise AssertionError(f"{path}: tokens differ between rounds")
                        record = times.setdefault(path, {"step": [], "prefill": [], "admit": []})
                        record["step"] += timer.times["_calc_mrope_positions"]
                        record["prefill"] += timer.prefill_steps
                        record["admit"] += timer.times["_init_mrope_positions"]
                        prompt_lengths = engine.last.prompt_lengths
            finally:
                engine.close()
            if tokens["vllm"] != tokens["mrope"]:
                raise AssertionError(f"B={batch}: the plugin changed the greedy tokens")
            results["batches"][batch] = _batch_result(times, prompt_lengths)
    return results


def _batch_result(times: dict[str, dict[str, list]], prompt_lengths: list[int]) -> dict[str, Any]:
    row: dict[str, Any] = {"prompt_tokens": int(np.median(prompt_lengths))}
    for path, record in times.items():
        steps = np.asarray(record["step"])
        prefill = np.asarray(record["prefill"], dtype=bool)
        row[path] = {
            "steps": int(steps.size),
            "step": _summary(steps.tolist()),
            "decode_step": _summary(steps[~prefill].tolist()) if (~prefill).any() else None,
            "prefill_step": _summary(steps[prefill].tolist()) if prefill.any() else None,
            "admit": _summary(record["admit"]),
        }
    return row


def _print(results: dict[str, Any]) -> None:
    print(
        "| running requests | steps | hook, vLLM us (median / p99) | hook, mrope us (median / p99) "
        "| vLLM / mrope (median / p99) | prefill steps vLLM / mrope us | admission vLLM / mrope us |"
    )
    print("|---|---|---|---|---|---|---|")
    for batch, row in results["batches"].items():
        v, m = row["vllm"], row["mrope"]
        pv, pm = v["prefill_step"], m["prefill_step"]
        print(
            f"| {batch} | {m['steps']} | {v['step'][0]:.1f} / {v['step'][1]:.1f} | {m['step'][0]:.1f} / "
            f"{m['step'][1]:.1f} | {v['step'][0] / m['step'][0]:.2f}x / {v['step'][1] / m['step'][1]:.2f}x | "
            f"{pv[0]:.1f} / {pm[0]:.1f} | {v['admit'][0]:.1f} / {m['admit'][0]:.1f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="B = 8 only, one round (smoke test)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each path per batch size")
    args = parser.parse_args(argv)
    args.batches = (8,) if args.quick else (8, 64, 256)
    if args.quick:
        args.rounds = 1
    results = run(args)
    _print(results)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
