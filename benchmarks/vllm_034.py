"""mrope against vLLM 0.34's own M-RoPE states, in vLLM 0.34's code: admission per request (both runners),
the CPU runner's step against vLLM's C++ op, and the state's bytes.

Usage (the vLLM environment with vLLM 0.34's source on the path, as ``make bench`` runs it)::

    PYTHONPATH=.venv-vllm/vllm-0.34.0 .venv-vllm/bin/python benchmarks/vllm_034.py [--quick] [--json F]

vLLM 0.34 has no CPU wheel, so its engine cannot start here; its runners' M-RoPE code can. Each state is
made by vLLM 0.34's own ``get_rope_state`` (``vllm/v1/worker/cpu/rope.py``: the CPU runner;
``vllm/v1/worker/gpu/mm/rope.py``: Model Runner V2, its pinned host buffers stood in by plain ones)
and by the one :func:`mrope.integrations.vllm.enable` installs in the runner's model-state module, and
is called as the runner calls it, with what the runner hands over (the prefill ids as a Python list, the
``MultiModalFeatureSpec`` list), on vLLM 0.34's Qwen2.5-VL class:

- ``admission``: ``init_prefill_positions(req_idx, model, ids, mm_features)`` whole, per request, on the
  first seed's image prompt (~300 text tokens and an 8 x 8 image) and one video of 8,192 / 32,768
  tokens; each state in alternating rounds, 30 admissions each (median, p90). The V2 state's staging is
  applied by a Triton kernel (interpreted here), so V2 is timed without ``apply_staged_writes``.
- ``cpu step``: ``prepare_positions`` of the CPU runner, vLLM's C++ op ``prepare_mrope_positions_cpu``
  (compiled from vLLM 0.34's source) against mrope's step, 8 / 64 / 256 requests of image prompts,
  decode only (1 token each) and mixed (a quarter in prefill, chunks of 64 tokens).
- ``bytes``: the position state each holds at ``max_num_reqs=1024, max_model_len=262144``.
"""

from __future__ import annotations

import importlib
import sys
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np

from _common import main
from _timing import format_table, median_us, percentile_us, time_once, write_json
from support import vllm034
from support.vllm_models import stand_in

ADMISSION_TARGETS = {"image": 2.0, "video 8k": 5.0, "video 32k": 20.0}  # vLLM / mrope, median
MEMORY_TARGET = 1000.0
BIG_REQS, BIG_LEN = 1024, 262_144
ROPE_MODULES = {"v2-cpu": "vllm.v1.worker.cpu.rope", "v2": "vllm.v1.worker.gpu.mm.rope"}


def setup() -> SimpleNamespace:
    import torch
    from transformers import Qwen2_5_VLConfig

    config = Qwen2_5_VLConfig(vision_config={"tokens_per_second": 2, "spatial_merge_size": 2})
    model = stand_in("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", config)
    model_config = SimpleNamespace(
        uses_mrope=True, mrope_num_dims=3, hf_config=config, multimodal_config=None
    )
    return SimpleNamespace(config=config, model=model, model_config=model_config, torch=torch)


def prompt(s: SimpleNamespace, kind: str, seed: int) -> tuple[list[int], list[Any]]:
    """A request as the runner receives it: prompt ids (a Python list) and its features."""
    from mrope.integrations.vllm.features import feature_spec

    rng = np.random.default_rng(seed)
    cfg, torch = s.config, s.torch
    head = rng.integers(1000, 9000, size=int(rng.integers(20, 280))).tolist()
    tail = rng.integers(1000, 9000, size=300 - len(head)).tolist()
    if kind == "image":
        grid, count, modality, token = [1, 16, 16], 64, "image", cfg.image_token_id
        data = {"image_grid_thw": torch.tensor(grid)}
    else:
        frames, plane = (64, 128) if kind == "video 8k" else (128, 256)
        side = (8, 16) if plane == 128 else (16, 16)
        grid, count, modality, token = (
            [frames, 2 * side[0], 2 * side[1]],
            frames * plane,
            "video",
            cfg.video_token_id,
        )
        data = {"video_grid_thw": torch.tensor(grid), "second_per_grid_ts": torch.tensor(1.0)}
    ids = head + [cfg.vision_start_token_id]
    feature = feature_spec(modality, len(ids), count, data)
    ids += [token] * count + [cfg.vision_end_token_id] + tail
    return ids, [feature]


def states(s: SimpleNamespace, runner: str, max_reqs: int, max_len: int, max_tokens: int = 8192) -> dict:
    """``{"vllm": vLLM 0.34's state, "mrope": the state enable() installs}`` of one runner."""
    from mrope.integrations.vllm import v2

    rope = importlib.import_module(ROPE_MODULES[runner])
    module = importlib.import_module(v2.MODEL_STATE_MODULES[runner])
    sizes = (max_reqs, max_tokens, max_len, s.torch.device("cpu"))
    return {
        "vllm": rope.get_rope_state(s.model_config, s.model, *sizes),
        "mrope": module.get_rope_state(s.model_config, s.model, *sizes),
    }


def admission(s: SimpleNamespace, quick: bool, runners: list[str]) -> list[dict[str, Any]]:
    count = 8 if quick else 30
    rows = []
    for runner in runners:
        for kind in ADMISSION_TARGETS:
            pair = states(s, runner, max_reqs=8, max_len=40_000)
            requests = [prompt(s, kind, seed) for seed in range(count)]
            samples: dict[str, list[float]] = {"vllm": [], "mrope": []}
            for i, (ids, features) in enumerate(requests):
                for name, state in pair.items():  # alternating: machine load hits both alike
                    admit = partial(state.init_prefill_positions, i % 8, s.model, ids, features)
                    samples[name].append(time_once(admit))
            ratio = median_us(samples["vllm"]) / median_us(samples["mrope"])
            rows.append(
                {
                    "runner": runner,
                    "case": kind,
                    "tokens": len(requests[0][0]),
                    **{f"{n}_median_us": median_us(v) for n, v in samples.items()},
                    **{f"{n}_p90_us": percentile_us(v, 90) for n, v in samples.items()},
                    "speedup": ratio,
                    "target": ADMISSION_TARGETS[kind],
                }
            )
    return rows


def cpu_step(s: SimpleNamespace, quick: bool) -> list[dict[str, Any]]:
    torch = s.torch
    rows = []
    for num_reqs in (8, 64, 256):
        pair = states(s, "v2-cpu", max_reqs=num_reqs, max_len=2048, max_tokens=num_reqs * 64)
        prefill_lens = torch.zeros(num_reqs, dtype=torch.int32)
        for index in range(num_reqs):
            ids, features = prompt(s, "image", index)
            prefill_lens[index] = len(ids)
            for state in pair.values():
                state.init_prefill_positions(index, s.model, ids, features)
        for mix in ("decode", "mixed"):
            computed = prefill_lens.clone() + 5  # decoding, past the prompt
            counts = np.ones(num_reqs, dtype=np.int64)
            if mix == "mixed":  # a quarter of the requests in prefill, 64-token chunks inside the prompt
                prefilling = np.arange(0, num_reqs, 4)
                computed[prefilling] = torch.from_numpy((prefilling * 7 % 200).astype(np.int32))
                counts[prefilling] = 64
            idx = torch.arange(num_reqs, dtype=torch.int64)
            starts = torch.from_numpy(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            calls = {
                n: partial(st.prepare_positions, idx, starts, prefill_lens, computed)
                for n, st in pair.items()
            }
            samples: dict[str, list[float]] = {n: [] for n in calls}
            for _ in range(60 if quick else 400):
                for name, call in calls.items():
                    samples[name].append(time_once(call))
            num = int(starts[-1])
            assert torch.equal(pair["vllm"].get_positions(num), pair["mrope"].get_positions(num)), (
                num_reqs,
                mix,
            )
            rows.append(
                {
                    "requests": num_reqs,
                    "step": mix,
                    "tokens": num,
                    **{f"{n}_median_us": median_us(v) for n, v in samples.items()},
                    **{f"{n}_p90_us": percentile_us(v, 90) for n, v in samples.items()},
                    "ratio": median_us(samples["vllm"]) / median_us(samples["mrope"]),
                }
            )
    return rows


def state_bytes(s: SimpleNamespace, runners: list[str]) -> list[dict[str, Any]]:
    from mrope.integrations.vllm.v2 import tensor_bytes

    rows = []
    for runner in runners:
        pair = states(s, runner, max_reqs=BIG_REQS, max_len=BIG_LEN)
        theirs, ours = tensor_bytes(pair["vllm"]), pair["mrope"].nbytes()
        rows.append({"runner": runner, "vllm_bytes": theirs, "mrope_bytes": ours, "ratio": theirs / ours})
        del pair
    return rows


def run(args: Any) -> int:
    import vllm

    from mrope.integrations import vllm as plugin

    if not vllm.__version__.startswith("0.34."):
        print(f"vllm_034: vLLM 0.34's source is not on the path (found {vllm.__version__})", file=sys.stderr)
        return 1
    vllm034.load_prepare_mrope_positions()
    plugin.enable()
    s = setup()
    runners = args.runners.split(",")
    with vllm034.uva_on_cpu():  # Model Runner V2's pinned and UVA buffers as plain host tensors
        results = {"admission": admission(s, args.quick, runners), "cpu_step": cpu_step(s, args.quick)}
        results["bytes"] = state_bytes(s, runners)
    report(results)
    write_json(args.json, results)
    return 0


def report(results: dict[str, Any]) -> None:
    """The three tables, markdown."""
    columns = ["vllm_median_us", "vllm_p90_us", "mrope_median_us", "mrope_p90_us"]
    print("## vLLM 0.34: admission per request, vLLM's RopeState against mrope's (whole call)\n")
    header = ["runner", "case", "tokens", "vLLM median us", "vLLM p90", "mrope median us", "mrope p90"]
    rows = [
        [
            r["runner"],
            r["case"],
            r["tokens"],
            *(r[c] for c in columns),
            f"{r['speedup']:.1f}x",
            f"{r['target']:.0f}x",
        ]
        for r in results["admission"]
    ]
    print(format_table([*header, "speedup", "target"], rows))
    print("\n## vLLM 0.34's CPU runner: the step, vLLM's C++ op against mrope's\n")
    header = ["requests", "step", "tokens", "C++ op median us", "op p90", "mrope median us", "mrope p90"]
    rows = [
        [r["requests"], r["step"], r["tokens"], *(r[c] for c in columns), f"{r['ratio']:.2f}x"]
        for r in results["cpu_step"]
    ]
    print(format_table([*header, "op / mrope"], rows))
    print(f"\n## State bytes at max_num_reqs={BIG_REQS}, max_model_len={BIG_LEN}\n")
    rows = [
        [
            r["runner"],
            f"{r['vllm_bytes']:,}",
            f"{r['mrope_bytes']:,}",
            f"{r['ratio']:,.0f}x",
            f"{MEMORY_TARGET:.0f}x",
        ]
        for r in results["bytes"]
    ]
    print(format_table(["runner", "vLLM bytes", "mrope bytes", "vLLM / mrope", "target"], rows))


if __name__ == "__main__":
    sys.exit(
        main(
            __doc__,
            lambda parser: parser.add_argument(
                "--runners", default="v2-cpu,v2", help="runners whose admission and bytes to time"
            ),
            run,
        )
    )
