"""``python benchmarks/admission_ab.py``: one request's admission under two source trees of mrope, A and B,
timed in two processes on the same inputs, alternated.

Usage::

    .venv-vllm/bin/python benchmarks/admission_ab.py --kind vllm A/src B/src [--rounds 9]
    .venv-sglang/bin/python benchmarks/admission_ab.py --kind sglang A/src B/src [--rounds 9]

(``A/src``, ``B/src``: two checkouts' ``src``, e.g. ``git worktree add`` of main and of a branch.)

The cases, on a Qwen2.5-VL prompt of 626 tokens (one image of 1 x 36 x 36, or text only):

- ``--kind vllm`` (or ``core``, numpy only): :meth:`mrope.PositionTable.add` then ``remove`` of a text
  prompt (scanned; with empty offsets), of the image prompt (its grid, scanned; grid and offsets; items),
  :meth:`mrope.Family.positions` with grid and offsets; vLLM's V1 runner admission
  (``_RunnerState.admit`` then ``forget``, the features as vLLM's processor makes them) and V2's
  ``TableRopeState.init_prefill_positions`` (its slot replaced), text and image;
- ``--kind sglang``: the SGLang runner table's registration (``RunnerTable.register``) of a text prompt
  (a packed text prompt), of the image prompt from its items (``PositionTable.add``) and packed.

Each process imports mrope from its tree and warms every case up; then, round after round, each case
runs in A and in B back to back (which goes first alternates by round), each a best of 5 batches of
``--calls`` calls, in the CPU time of the thread (time the machine's other work takes is not counted).
Per case: the medians over rounds, their difference, and the median of the rounds' differences.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from _common import QWEN2_5_VL_3B

GRID = [1, 36, 36]
IMAGE = [151652] + [151655] * (36 * 36 // 4) + [151653]
TEXT = list(range(1000, 1300))
IDS_IMAGE = TEXT + IMAGE + TEXT[:1]  # 626 tokens, one image
OFFSET = len(TEXT) + 1  # the image's first placeholder
IDS_TEXT = list(range(1000, 1626))  # 626 text tokens


def core_cases() -> dict[str, Callable[[], Any]]:
    import mrope
    from mrope.families import PromptItem

    family = mrope.from_config(QWEN2_5_VL_3B)
    table = mrope.PositionTable(8)

    def add(ids: list[int], **inputs: Any) -> Callable[[], None]:
        def run() -> None:
            table.add(0, family, ids, **inputs)
            table.remove(0)

        return run

    item = PromptItem("image", OFFSET, (1, 36, 36), None)
    offsets = {"image_offsets": [OFFSET], "video_offsets": []}
    return {
        "add text": add(IDS_TEXT),
        "add text offsets=[]": add(IDS_TEXT, image_offsets=[], video_offsets=[]),
        "add image grid": add(IDS_IMAGE, image_grid_thw=[GRID]),
        "add image grid+offsets": add(IDS_IMAGE, image_grid_thw=[GRID], **offsets),
        "add image items": add(IDS_IMAGE, items=[item]),
        "positions image grid+offsets": lambda: family.positions(IDS_IMAGE, image_grid_thw=[GRID], **offsets),
    }


def vllm_cases() -> dict[str, Callable[[], Any]]:
    import numpy as np
    import torch

    import mrope
    from mrope.integrations.vllm import v1, v2
    from mrope.integrations.vllm.features import VLLM_SETTINGS, feature_spec

    family = mrope.from_config(QWEN2_5_VL_3B, **VLLM_SETTINGS)
    features = [feature_spec("image", OFFSET, len(IMAGE) - 2, {"image_grid_thw": torch.tensor(GRID)})]

    class Runner(SimpleNamespace):  # (the runner state keeps a weak reference to it)
        pass

    batch = SimpleNamespace(max_num_reqs=8, num_computed_tokens_cpu=np.zeros(8, np.int32), req_id_to_index={})
    runner = Runner(input_batch=batch, mrope_positions=SimpleNamespace(np=np.zeros((3, 1025), np.int64)))
    state = v1._RunnerState(runner, family, active=True)

    def admit(ids: list[int], mm_features: list[Any]) -> Callable[[], None]:
        request = SimpleNamespace(
            req_id="r", mm_features=mm_features, prompt_token_ids=ids, prompt_embeds=None
        )

        def run() -> None:
            state.admit(request)
            state.forget("r")

        return run

    rope = v2.TableRopeState(
        family,
        lambda: None,
        lambda: "mrope",
        collections.Counter(),
        num_dims=3,
        max_num_reqs=8,
        max_num_tokens=2048,
        max_model_len=4096,
        device="cpu",
    )
    return {
        **core_cases(),
        "V1 admit text": admit(IDS_TEXT, []),
        "V1 admit image": admit(IDS_IMAGE, features),
        "V2 init_prefill text": lambda: rope.init_prefill_positions(0, None, IDS_TEXT, []),
        "V2 init_prefill image": lambda: rope.init_prefill_positions(0, None, IDS_IMAGE, features),
    }


def sglang_cases() -> dict[str, Callable[[], Any]]:
    import torch
    from sglang.srt import runtime_context

    import mrope
    from mrope.integrations._sglang_step import PACKED_ATTRIBUTE, RunnerTable
    from mrope.integrations.sglang import SGLANG_SETTINGS
    from mrope.serving import PackedPrompt

    context = SimpleNamespace(deterministic=SimpleNamespace(rl_on_policy_target=None))
    runtime_context.get_exec = lambda: context  # (as an engine publishes it)
    family = mrope.from_config(QWEN2_5_VL_3B, **SGLANG_SETTINGS)
    pool = SimpleNamespace(req_generation=torch.zeros(9, dtype=torch.int64))
    table = RunnerTable(family, pool, "cpu", lambda name: None, lambda kind, error: None, host=True)
    text = SimpleNamespace(rid="t", session=None, origin_input_ids=IDS_TEXT)
    hashed = list(IDS_IMAGE)  # SGLang's scheduler holds the placeholders replaced by the image's hash
    hashed[OFFSET : OFFSET + len(IMAGE) - 2] = [987654321] * (len(IMAGE) - 2)
    image = SimpleNamespace(rid="i", session=None, origin_input_ids=hashed)
    item = SimpleNamespace(
        is_image=lambda: True,
        model_specific_data={"image_grid_thw": torch.tensor([GRID])},
        offsets=[(OFFSET, OFFSET + len(IMAGE) - 3)],
    )
    stored = SimpleNamespace(mm_items=[item], mrope_positions=None, mrope_position_delta=None)
    packed = SimpleNamespace(mm_items=[item], mrope_positions=None, mrope_position_delta=None)
    positions, delta = family.positions(IDS_IMAGE, image_grid_thw=[GRID])
    vars(packed)[PACKED_ATTRIBUTE] = PackedPrompt.from_positions(positions, int(delta))
    return {
        "SGLang register text (packed)": lambda: table.register(1, text, None),
        "SGLang register image (add)": lambda: table.register(1, image, stored),
        "SGLang register image (packed)": lambda: table.register(1, image, packed),
    }


def child(source: str, kind: str, calls: int) -> None:
    """Serve timings of ``source``'s cases: the case names first, then one best time (us) per case named
    on stdin."""
    cases = {"core": core_cases, "vllm": vllm_cases, "sglang": sglang_cases}[kind]()
    import mrope

    if not mrope.__file__.startswith(source):
        raise SystemExit(f"mrope imported from {mrope.__file__}, not {source}")
    for case in cases.values():
        for _ in range(200):
            case()
    print(json.dumps(list(cases)), flush=True)
    clock = time.thread_time_ns
    for line in sys.stdin:
        case = cases[line.strip()]
        best = []
        for _ in range(5):
            start = clock()
            for _ in range(calls):
                case()
            best.append((clock() - start) / calls / 1000)
        print(json.dumps(min(best)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--kind", choices=("core", "vllm", "sglang"), default="core")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.a, args.kind, args.calls)
    command = [sys.executable, __file__, "--child", "--kind", args.kind, "--calls", str(args.calls)]
    procs = {  # (each imports mrope from its tree: PYTHONPATH first)
        name: subprocess.Popen(
            [*command, src, src],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])},
        )
        for name, src in (("A", args.a), ("B", args.b))
    }
    cases = [json.loads(p.stdout.readline()) for p in procs.values()][0]
    times: dict[str, dict[str, list[float]]] = {name: {case: [] for case in cases} for name in procs}
    for r in range(args.rounds):
        for case in cases:
            for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
                proc = procs[name]
                proc.stdin.write(case + "\n")
                proc.stdin.flush()
                times[name][case].append(json.loads(proc.stdout.readline()))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    print(f"A = {args.a}\nB = {args.b}\n{args.rounds} rounds; us per call, thread CPU time")
    print(f"{'case':32s} {'A':>7s} {'B':>7s} {'B - A':>7s} {'paired':>7s}   A min..max / B min..max")
    for case in cases:
        a, b = times["A"][case], times["B"][case]
        paired = statistics.median([y - x for x, y in zip(a, b, strict=True)])
        print(
            f"{case:32s} {statistics.median(a):7.2f} {statistics.median(b):7.2f} "
            f"{statistics.median(b) - statistics.median(a):+7.2f} {paired:+7.2f}   "
            f"{min(a):.2f}..{max(a):.2f} / {min(b):.2f}..{max(b):.2f}"
        )


if __name__ == "__main__":
    main()
