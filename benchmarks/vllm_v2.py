"""mrope inside vLLM's Model Runner V2 (vLLM's default runner): admission and the M-RoPE state's memory,
vLLM's ``RopeState`` against mrope's ``TableRopeState``, in one engine, on the same requests.

Usage (in the vLLM environment that ``make test`` creates, where V2 runs on the CPU)::

    .venv-vllm/bin/python benchmarks/vllm_v2.py [--quick] [--json bench-results/vllm-v2.json]

A tiny random Qwen2.5-VL V2 engine (tests/integrations/vllm/checkpoints.py, its processors allowed
large frames) is started with the integration enabled. Each request is what the engine hands its
worker: the prompt ids as a Python list and the ``MultiModalFeatureSpec`` list, made by the engine's
own input processor from a prompt. Both states are made by vLLM's ``get_rope_state`` of the engine's
model state (vLLM's original, and the one the integration installs) with the engine's model, and
``init_prefill_positions(req_idx, model, ids, mm_features)`` of each is timed on the same requests,
as a step admits them: all requests of a case by one state, then all by the other, ``--rounds``
times; after each round the positions mrope's table renders are compared with those vLLM stored:

- ``video 8k`` / ``video 32k``: one video of 8,192 / 32,768 tokens (64 / 128 frames) with text;
- ``image``: the first seed's prompt, ~300 text tokens and one image of 8 x 8 merged tokens.

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


def _requests(llm: Any, prompts: list[dict[str, Any]]) -> list[tuple[list[int], list[Any]]]:
    """What the engine hands its worker for each prompt: (prompt ids as a list, mm_features)."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(max_tokens=1)
    out = []
    for i, prompt in enumerate(prompts):
        request = engine.input_processor.process_inputs(
            f"bench-{i}", prompt, params, supported_tasks=engine.get_supported_tasks()
        )
        ids = request.prompt_token_ids
        assert type(ids) is list
        out.append((ids, list(request.mm_features or [])))
    return out


def _summary(values: list[int]) -> tuple[float, float]:
    """Median and p99 in microseconds of nanosecond samples."""
    seconds = [v / 1e9 for v in values]
    return median_us(seconds), percentile_us(seconds, 99)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from mrope.integrations import vllm as plugin
    from mrope.integrations.vllm import v2 as _vllm_v2

    results: dict[str, Any] = {"admission": {}, "memory": {}}
    plugin.enable()
    with tempfile.TemporaryDirectory() as folder:
        model_dir = checkpoints.build("qwen2_5_vl", Path(folder) / "qwen2_5_vl")
        _large_frames(model_dir)
        engine = harness.Engine(
            model_dir,
            runner="v2",
            max_model_len=MAX_MODEL_LEN,
            max_num_batched_tokens=MAX_MODEL_LEN,  # the encoder cache holds a 32k-token video
            max_num_seqs=8,
            limit_mm_per_prompt={"image": 1, "video": 1},
            kv_cache_tokens=MAX_MODEL_LEN + 256,
        )
        try:
            runner = harness.in_process_runner(engine)
            model_state = runner.model_state
            ours = model_state.rope_state
            assert isinstance(ours, _vllm_v2.TableRopeState), type(ours)
            theirs = ours.make_vllm_state()
            model = runner.model
            cases = _prompts(args.requests, seed=1)
            for name, prompts in cases.items():
                requests = _requests(engine.llm, prompts)
                lengths = [len(ids) for ids, _ in requests]
                times: dict[str, list[int]] = {"vllm": [], "mrope": []}
                clock = time.perf_counter_ns
                for _ in range(args.rounds):
                    for path, state in (("vllm", theirs), ("mrope", ours)):  # a step's admissions each
                        for slot, (ids, features) in enumerate(requests):
                            start = clock()
                            state.init_prefill_positions(slot % ours.max_num_reqs, model, ids, features)
                            times[path].append(clock() - start)
                        if path == "vllm":
                            theirs.apply_staged_writes()
                    for slot, (ids, _) in enumerate(requests[: ours.max_num_reqs]):
                        _check_equal(ours, theirs, slot, len(ids))
                per_round = len(requests)  # the first admission of each round follows the other path's
                results["admission"][name] = {
                    "tokens": int(np.median(lengths)),
                    "vllm": _summary(times["vllm"]),
                    "mrope": _summary(times["mrope"]),
                    "first of round": {path: _summary(t[::per_round])[0] for path, t in times.items()},
                }
            del theirs
            results["memory"] = _memory(model_state, runner, _vllm_v2)
        finally:
            engine.close()
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
        "| request | prompt tokens | admission, vLLM us (median / p99) | admission, mrope us (median / p99) "
        "| vLLM / mrope (median) | target |"
    )
    print("|---|---|---|---|---|---|")
    for name, row in results["admission"].items():
        v, m = row["vllm"], row["mrope"]
        print(
            f"| {name} | {row['tokens']} | {v[0]:.1f} / {v[1]:.1f} | {m[0]:.1f} / {m[1]:.1f} | "
            f"{v[0] / m[0]:.1f}x | {TARGETS[name]:.0f}x |"
        )
    print()
    print("The first admission of each round, after the other state's (cold caches), median us:")
    for name, row in results["admission"].items():
        first = row["first of round"]
        print(f"- {name}: vLLM {first['vllm']:.1f}, mrope {first['mrope']:.1f}")
    mem = results["memory"]
    print()
    print(f"| M-RoPE state at max_num_reqs={BIG_REQS}, max_model_len={BIG_LEN} | bytes |")
    print("|---|---|")
    print(f"| vLLM RopeState | {mem['vllm']:,} |")
    print(f"| mrope TableRopeState | {mem['mrope']:,} |")
    print(f"| vLLM / mrope | {mem['vllm'] / mem['mrope']:,.0f}x (target {MEMORY_TARGET:,.0f}x) |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="2 requests of each case, one round")
    parser.add_argument("--requests", type=int, default=8, help="distinct requests per case")
    parser.add_argument("--rounds", type=int, default=5, help="admissions of each request per path")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 2, 1
    results = run(args)
    _print(results)
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
