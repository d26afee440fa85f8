"""mrope inside vLLM's Model Runner V2 (vLLM's default runner): admission as the engine calls it, and
the M-RoPE state's memory, vLLM's ``RopeState`` against mrope's ``TableRopeState`` in one engine run, on
the same requests.

Usage (in the vLLM environment that ``make test`` creates, where V2 runs on the CPU)::

    .venv-vllm/bin/python benchmarks/vllm_v2.py [--max-num-seqs 4 256] [--requests 24] [--quick]
        [--json bench-results/vllm-v2.json]

For each ``max_num_seqs`` a tiny random Qwen2.5-VL V2 engine (tests/integrations/vllm/checkpoints.py,
its processors allowed large frames) is started with the integration enabled and generates ``--requests``
prompts of each case (2 tokens each; videos 4 prompts per ``generate``, images all at once), after one
warm-up prompt per case (not counted):

- ``video 8k`` / ``video 32k``: one video of 8,192 / 32,768 tokens (64 / 128 frames) with text;
- ``image``: the first seed's prompt, ~300 text tokens and one image of 8 x 8 merged tokens.

The engine's model state calls ``rope_state.init_prefill_positions(req_idx, model, prefill_token_ids,
mm_features=...)`` once per admitted request. A wrapper installed on the state object (the attribute
that call resolves) receives exactly that call and passes it to both states, mrope's (the one the
integration installed, which serves the engine) and vLLM's own ``RopeState`` (made by vLLM's
``get_rope_state`` with the engine's model), each call timed whole with ``perf_counter_ns`` around
it, nothing left out (vLLM's positions from the model's ``get_mrope_input_positions`` and their staging;
mrope's reading of the features and the table's admission). The two alternate in going first, so that
each meets the state the engine left (the first admission of a step follows the forward pass, with
cold caches) as often as the other. vLLM's staged writes are applied where the runner applies
mrope's, and then every request admitted since is compared: the positions mrope's table renders with
those vLLM stored, and the deltas (equal, or the run stops).

Then the bytes each state holds at ``max_num_reqs=1024, max_model_len=262144`` (Qwen3-VL's context),
read from the live objects (every tensor and array they hold, once). vLLM's Triton step kernel runs in
Triton's interpreter here, so the step is timed on a GPU only (``scripts/gpu_check.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the runner lives in this process

from _timing import median_us, percentile_us, write_json  # noqa: E402
from support import checkpoints  # noqa: E402
from support import vllm_harness as harness  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TARGETS = {"video 8k": 5.0, "video 32k": 20.0, "image": 2.0}  # admission, vLLM / mrope (median)
MEMORY_TARGET = 1000.0  # state bytes, vLLM / mrope
BIG_REQS, BIG_LEN = 1024, 262_144
MAX_MODEL_LEN = 40_000
#: videos go to the engine this many at a time (their frames, processed up front, take ~0.6 GB each);
#: the engine admits at most 4 such prompts at once anyway (max_num_batched_tokens, the KV cache)
VIDEO_CHUNK = 4


def _large_frames(model: Path) -> None:
    """Let the tiny checkpoint's processors keep large frames and the model long prompts."""
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        path = model / name
        config = json.loads(path.read_text())
        unit = 28 * 28
        config["max_pixels"] = unit * 1024
        config["size"] = {"shortest_edge": config.get("min_pixels", unit * 4), "longest_edge": unit * 1024}
        if "max_frames" in config:
            config["max_frames"] = 256
        path.write_text(json.dumps(config))
    config_path = model / "config.json"
    config = json.loads(config_path.read_text())
    for section in (config, config["text_config"]):
        section["max_position_embeddings"] = MAX_MODEL_LEN
    config_path.write_text(json.dumps(config))


def _prompts(count: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """``count`` distinct prompts of each case (distinct pixels and text)."""
    rng = np.random.default_rng(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "kilo"]
    ph = harness.placeholders("qwen2_5_vl")
    u = harness.unit("qwen2_5_vl")
    cases: dict[str, list[dict[str, Any]]] = {"video 8k": [], "video 32k": [], "image": []}
    for i in range(count):
        text = " ".join(rng.choice(words, size=70).tolist())
        cut = int(rng.integers(5, 65))
        head, tail = " ".join(text.split(" ")[:cut]), " ".join(text.split(" ")[cut:])
        cases["image"].append(
            {
                "prompt": f"{head} {ph['image']} {tail}",
                "multi_modal_data": {"image": harness.image(8 * u, 8 * u, seed=seed * 1000 + i)},
            }
        )
        for name, frames, width in (("video 8k", 64, 16), ("video 32k", 128, 32)):
            video = harness.video(frames, 16 * u, width * u, fps=2.0, seed=seed * 1000 + i)
            cases[name].append(
                {"prompt": f"Describe {ph['video']} {head}", "multi_modal_data": {"video": video}}
            )
    return cases


class AdmissionTimer:
    """The wrapper installed as ``rope_state.init_prefill_positions`` of the engine's model state (and
    around its ``apply_staged_writes``): each admission the engine makes goes to both states, each call
    timed whole; vLLM's staged writes are applied with the runner's, then the admitted requests'
    positions are compared (see the module docstring)."""

    def __init__(self, ours: Any, theirs: Any) -> None:
        self.ours, self.theirs = ours, theirs
        self.init_ours = ours.init_prefill_positions  # the bound methods the engine would have called
        self.apply_ours = ours.apply_staged_writes
        self.samples: dict[str, list[tuple[int, int, bool]]] = {"vllm": [], "mrope": []}
        self.pending: dict[int, int] = {}  # slot -> prompt length, admitted since the last apply
        self.admissions = 0
        self.compared = 0

    def install(self) -> None:
        self.ours.init_prefill_positions = self.init_prefill_positions
        self.ours.apply_staged_writes = self.apply_staged_writes

    def uninstall(self) -> None:
        del self.ours.init_prefill_positions, self.ours.apply_staged_writes

    def init_prefill_positions(
        self, req_idx: int, model: Any, prefill_token_ids: list[int], mm_features: list
    ) -> None:
        clock = time.perf_counter_ns
        calls = (("vllm", self.theirs.init_prefill_positions), ("mrope", self.init_ours))
        if self.admissions % 2:
            calls = calls[::-1]
        self.admissions += 1
        for first, (path, method) in zip((True, False), calls, strict=True):
            start = clock()
            method(req_idx, model, prefill_token_ids, mm_features=mm_features)
            elapsed = clock() - start
            self.samples[path].append((len(prefill_token_ids), elapsed, first))
        self.pending[req_idx] = len(prefill_token_ids)

    def apply_staged_writes(self) -> None:
        self.apply_ours()
        if self.pending:
            self.theirs.apply_staged_writes()
            for slot, length in self.pending.items():
                _check_equal(self.ours, self.theirs, slot, length)
            self.compared += len(self.pending)
            self.pending.clear()

    def take(self) -> dict[str, list[tuple[int, int, bool]]]:
        """The samples since the last take: (prompt tokens, nanoseconds, called first) per path."""
        samples, self.samples = self.samples, {"vllm": [], "mrope": []}
        return samples


def _summary(samples: list[tuple[int, int, bool]]) -> dict[str, float]:
    """Median, p90 and p99 in microseconds, and the median of the calls made first."""
    seconds = [ns / 1e9 for _, ns, _ in samples]
    first = [ns / 1e9 for _, ns, was_first in samples if was_first]
    return {
        "n": len(seconds),
        "median": median_us(seconds),
        "p90": percentile_us(seconds, 90),
        "p99": percentile_us(seconds, 99),
        "first median": median_us(first) if first else float("nan"),
    }


def _run_engine(model_dir: Path, max_num_seqs: int, requests: int, v2: Any, memory: bool) -> dict[str, Any]:
    """One engine of ``max_num_seqs``: the cases' admissions, both states timed (see the docstring);
    ``memory``: the states' bytes at ``BIG_REQS, BIG_LEN`` too."""
    engine = harness.Engine(
        model_dir,
        runner="v2",
        max_model_len=MAX_MODEL_LEN,
        max_num_batched_tokens=MAX_MODEL_LEN,  # the encoder cache holds a 32k-token video
        max_num_seqs=max_num_seqs,
        limit_mm_per_prompt={"image": 1, "video": 1},
        kv_cache_tokens=MAX_MODEL_LEN + 256,
    )
    try:
        runner = harness.in_process_runner(engine)
        ours = runner.model_state.rope_state
        assert isinstance(ours, v2.TableRopeState), type(ours)
        timer = AdmissionTimer(ours, ours.make_vllm_state())
        timer.install()
        try:
            warm = _prompts(1, seed=2)
            engine.generate([case[0] for case in warm.values()], max_tokens=2)
            timer.take()
            out: dict[str, Any] = {}
            for name, prompts in _prompts(requests, seed=1).items():
                chunk = len(prompts) if name == "image" else VIDEO_CHUNK
                for i in range(0, len(prompts), chunk):
                    engine.generate(prompts[i : i + chunk], max_tokens=2)
                samples = timer.take()
                out[name] = {
                    "tokens": int(np.median([n for n, _, _ in samples["mrope"]])),
                    "vllm": _summary(samples["vllm"]),
                    "mrope": _summary(samples["mrope"]),
                    "pool capacity": ours.table.pool_capacity,
                }
            out["compared requests"] = timer.compared
        finally:
            timer.uninstall()
        state_bytes = _memory(runner.model_state, runner, v2) if memory else None
    finally:
        engine.close()
    return {"admission": out, "memory": state_bytes}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from mrope.integrations import vllm as plugin
    from mrope.integrations.vllm import v2 as _vllm_v2

    results: dict[str, Any] = {"admission": {}, "memory": None}
    plugin.enable()
    try:
        with tempfile.TemporaryDirectory() as folder:
            model_dir = checkpoints.build("qwen2_5_vl", Path(folder) / "qwen2_5_vl")
            _large_frames(model_dir)
            for i, seqs in enumerate(args.max_num_seqs):
                run_out = _run_engine(model_dir, seqs, args.requests, _vllm_v2, memory=i == 0)
                results["admission"][str(seqs)] = run_out["admission"]
                results["memory"] = results["memory"] or run_out["memory"]
    finally:
        plugin.disable()
    return results


def _check_equal(ours: Any, theirs: Any, slot: int, length: int) -> None:
    """The admitted request's positions: mrope's table renders what vLLM stored."""
    rows = np.empty((3, length), dtype=np.int64)
    ours.table.fill(rows, np.array([slot]), np.zeros(1, dtype=np.int64), np.array([length]))
    stored = theirs.prefill_positions.gpu[3 * slot : 3 * slot + 3, :length].numpy()
    if not np.array_equal(rows, stored) or ours.table.delta(slot) != int(theirs.prefill_delta.np[slot]):
        raise AssertionError(f"slot {slot}: mrope's positions differ from vLLM's")


def _memory(model_state: Any, runner: Any, v2: Any) -> dict[str, int]:
    """Bytes of both states at ``max_num_reqs=1024, max_model_len=262144``, from vLLM's factory."""
    from vllm.v1.worker.gpu.model_states import default

    args = (model_state.model_config, runner.model, BIG_REQS, 8192, BIG_LEN, model_state.device)
    ours = default.get_rope_state(*args)  # the integration's
    assert isinstance(ours, v2.TableRopeState)
    ours_bytes = ours.nbytes()
    theirs = ours.make_vllm_state()
    theirs_bytes = v2.tensor_bytes(theirs)
    return {"vllm": theirs_bytes, "mrope": ours_bytes}


def _print(results: dict[str, Any]) -> None:
    print(
        "| max_num_seqs | request | prompt tokens | admissions | vLLM us (median / p90 / p99) "
        "| mrope us (median / p90 / p99) | mrope p90 / median | vLLM / mrope (median) | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    firsts = []
    for seqs, cases in results["admission"].items():
        for name, row in cases.items():
            if name not in TARGETS:
                continue
            v, m = row["vllm"], row["mrope"]
            print(
                f"| {seqs} | {name} | {row['tokens']} | {m['n']} | {v['median']:.1f} / {v['p90']:.1f} / "
                f"{v['p99']:.1f} | {m['median']:.1f} / {m['p90']:.1f} / {m['p99']:.1f} | "
                f"{m['p90'] / m['median']:.1f} | {v['median'] / m['median']:.1f}x | {TARGETS[name]:.0f}x |"
            )
            firsts.append(f"{seqs} {name}: vLLM {v['first median']:.1f}, mrope {m['first median']:.1f}")
        print(f"(max_num_seqs {seqs}: positions compared for {cases['compared requests']} requests, equal)")
    print()
    print("Median us of the calls made first (the other state's call did not warm the caches):")
    for line in firsts:
        print(f"- {line}")
    mem = results["memory"]
    if mem:
        print()
        print(f"| M-RoPE state at max_num_reqs={BIG_REQS}, max_model_len={BIG_LEN} | bytes |")
        print("|---|---|")
        print(f"| vLLM RopeState | {mem['vllm']:,} |")
        print(f"| mrope TableRopeState | {mem['mrope']:,} |")
        print(f"| vLLM / mrope | {mem['vllm'] / mem['mrope']:,.0f}x (target {MEMORY_TARGET:,.0f}x) |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="4 requests of each case, max_num_seqs 4")
    parser.add_argument("--requests", type=int, default=24, help="requests (admissions) per case")
    parser.add_argument(
        "--max-num-seqs", type=int, nargs="+", default=[4, 256], help="one engine run for each"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.max_num_seqs = 4, [4]
    results = run(args)
    _print(results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
