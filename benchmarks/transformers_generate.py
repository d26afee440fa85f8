"""``python benchmarks/transformers_generate.py``: mrope inside transformers, against transformers.

Three parts, every timing on the same inputs with and without mrope, in one run:

1. **position step**: the prefill position step of ``generate()`` (the model's
   ``_prepare_position_ids_for_generation``, which calls ``get_rope_index`` once) on the prefill
   benchmark's cases (a)-(g), without and with :func:`~mrope.integrations.transformers.patch`. The models
   are tiny (one layer) with the released token ids and merge sizes, so only the position code differs.
2. **whole prefill**: ``generate(max_new_tokens=1)`` of tiny Qwen2.5-Omni and Qwen3-Omni thinkers on
   cases (f) and (g) (a 60-second video with its audio, ~8k tokens; the placeholders are embedded as
   tokens, no pixel or audio features), where transformers' position code is most of the time.
3. **data pipeline**: samples per second of positions computed per sample, as in a ``Dataset``:
   :func:`~mrope.integrations.transformers.rope_index` on the processor's output against transformers'
   ``get_rope_index`` called per sample.

Each part checks first that both sides give the same positions (at real tokens) and the same tokens,
then prints medians and ratios. torch runs on one thread (as ``benchmarks/step.py``).

Usage::

    python benchmarks/transformers_generate.py [--json bench-results/transformers-generate.json] [--quick]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from _common import main
from _timing import format_table, median_us, time_interleaved, write_json
from mrope.integrations import transformers as mt  # noqa: E402
from support import tiny_vlms  # noqa: E402

VISION_START, VISION_END = 151652, 151653
OMNI_SEQLEN = 6000  # audio feature length of the 60 s video (100 per second)
IMAGE, VIDEO = 151655, 151656


@dataclass
class Case:
    """A prefill case: a tiny model of the case's family and generate's inputs (ids + model kwargs)."""

    title: str
    model: Any
    input_ids: Any
    kwargs: dict[str, Any]


def _padded(rows: list[list[int]]) -> tuple[Any, Any]:
    """Left-padded (B, L) int64 ids and mask, as torch tensors."""
    import torch

    length = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, length - len(r) :] = torch.tensor(r)
        mask[i, length - len(r) :] = 1
    return ids, mask


def _image_row(rng: np.random.Generator, num_text: int, pads: int, token: int) -> list[int]:
    """Text with one vision block (as the prefill benchmark's prompts)."""
    before = int(rng.integers(1, num_text))
    text = rng.integers(0, 150000, size=num_text).tolist()
    return text[:before] + [VISION_START] + [token] * pads + [VISION_END] + text[before:]


def _vlm_case(
    title: str, model_type: str, rows: list[list[int]], grids: dict[str, Any], **vision: Any
) -> Case:
    import torch

    model = tiny_vlms.model_class(model_type)(
        tiny_vlms.tiny_config(model_type, keep_token_ids=True, vision=vision)
    )
    ids, mask = _padded(rows)
    kwargs = {
        "attention_mask": mask,
        "mm_token_type_ids": tiny_vlms.token_types(model_type, model.config, ids),
    }
    kwargs.update({k: torch.as_tensor(v) for k, v in grids.items()})
    return Case(title, model.eval(), ids, kwargs)


def _omni_video_row(config: Any, seqlen: int) -> list[int]:
    """Case (f)/(g)'s prompt: text, a 60 s video (grid 60x16x28) with its audio, text; ``config`` is an
    Omni thinker's (its token ids)."""
    import mrope

    family = mrope.from_config(config)
    low, high = tiny_vlms.TEXT_IDS  # text inside the tiny vocabulary, apart from its special ids
    text = np.random.default_rng(5).integers(low, high, size=40).tolist()
    audio = int(family.audio_tokens(np.array([seqlen]))[0])
    start, audio_start = family.vision_start_token_id, family.audio_start_token_id
    # the released audio_end (Qwen3-Omni's config does not name it), or text where a tiny config has
    # another special id there
    audio_end = getattr(config, "audio_end_token_id", audio_start + 1)
    if audio_end in (start, family.image_token_id, family.video_token_id, family.audio_token_id):
        audio_end = text[1]
    return (
        text[:25]
        + [start, audio_start]
        + [family.video_token_id] * (60 * 8 * 14)
        + [family.audio_token_id] * audio
        + [audio_end, text[0]]  # text closes the video
        + text[25:]
    )


def _omni_kwargs(ids: Any, seqlen: int) -> dict[str, Any]:
    """generate()'s keyword arguments for case (f)/(g), as the Omni processor names them."""
    import torch

    return {
        "attention_mask": torch.ones_like(ids),
        "video_grid_thw": torch.tensor([[60, 16, 28]]),
        "feature_attention_mask": torch.ones(1, seqlen, dtype=torch.int64),
        "use_audio_in_video": True,
        "video_second_per_grid": torch.tensor([1.0]),
    }


def _omni_case(title: str, model_type: str, **thinker: Any) -> Case:
    import torch

    config = tiny_vlms.tiny_config(model_type, keep_token_ids=True, **thinker)
    model = tiny_vlms.model_class(model_type)(config).eval()
    ids = torch.tensor([_omni_video_row(config, OMNI_SEQLEN)])
    return Case(title, model, ids, _omni_kwargs(ids, OMNI_SEQLEN))


def prefill_cases() -> dict[str, Callable[[], Case]]:
    """The prefill benchmark's cases (same prompts, seeds and grids), each with a tiny model."""

    def a() -> Case:
        row = _image_row(np.random.default_rng(0), 300, 18 * 18, IMAGE)
        grids = {"image_grid_thw": [[1, 36, 36]]}
        return _vlm_case(
            "(a) Qwen2.5-VL, 300 text + 1 image", "qwen2_5_vl", [row], grids, tokens_per_second=2
        )

    def b() -> Case:
        rng = np.random.default_rng(1)
        rows = [_image_row(rng, int(rng.integers(250, 351)), 18 * 18, IMAGE) for _ in range(64)]
        grids = {"image_grid_thw": [[1, 36, 36]] * 64}
        return _vlm_case("(b) Qwen2.5-VL, padded batch of 64", "qwen2_5_vl", rows, grids, tokens_per_second=2)

    def c() -> Case:
        row = _image_row(np.random.default_rng(2), 40, 16 * 18 * 32, VIDEO)
        grids = {"video_grid_thw": [[16, 36, 64]], "second_per_grid_ts": np.array([1.0], dtype=np.float32)}
        return _vlm_case(
            "(c) Qwen2.5-VL, 1 video (16x36x64)", "qwen2_5_vl", [row], grids, tokens_per_second=2
        )

    def d() -> Case:
        rng = np.random.default_rng(3)
        rows = []
        for _ in range(4):
            row = rng.integers(0, 150000, size=int(rng.integers(20, 60))).tolist()
            for _ in range(4):
                row += (
                    [VISION_START] + [IMAGE] * 144 + [VISION_END] + rng.integers(0, 150000, size=8).tolist()
                )
            for frame in range(64):
                row += [27, 15 + frame % 10, 13, 20, 6504, 29] + [VISION_START] + [VIDEO] * 64 + [VISION_END]
            rows.append(row + rng.integers(0, 150000, size=int(rng.integers(10, 40))).tolist())
        grids = {"image_grid_thw": [[1, 24, 24]] * 16, "video_grid_thw": [[64, 16, 16]] * 4}
        return _vlm_case("(d) Qwen3-VL, 4 x (64-frame video + 4 images)", "qwen3_vl", rows, grids)

    def e() -> Case:
        from transformers import AutoConfig

        config = AutoConfig.for_model("ernie4_5_vl_moe")
        text = np.random.default_rng(4).integers(0, 100000, size=60).tolist()
        video = (
            [config.video_start_token_id]
            + [config.video_token_id] * (16 * 14 * 26)
            + [config.video_end_token_id]
        )
        grids = {"video_grid_thw": [[32, 28, 52]]}
        return _vlm_case(
            "(e) Ernie-4.5-VL, 1 video (32x28x52)", "ernie4_5_vl_moe", [text[:20] + video + text[20:]], grids
        )

    def f() -> Case:
        return _omni_case("(f) Qwen2.5-Omni, 60 s video with audio", "qwen2_5_omni_thinker")

    def g() -> Case:
        return _omni_case(
            "(g) Qwen3-Omni, 60 s video with audio", "qwen3_omni_moe_thinker", position_id_per_seconds=13
        )

    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g}


@contextmanager
def patched(model: Any) -> Any:
    mt.patch(model)
    try:
        yield model
    finally:
        mt.unpatch(model)


def toggled(model: Any, call: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``call`` with the patch and without it, for interleaved timing: each patches or unpatches the
    model when the other ran last (once per round), not per call."""
    patched_now = [False]

    def with_patch() -> Any:
        if not patched_now[0]:
            mt.patch(model)
            patched_now[0] = True
        return call()

    def without_patch() -> Any:
        if patched_now[0]:
            mt.unpatch(model)
            patched_now[0] = False
        return call()

    return with_patch, without_patch


def position_step(case: Case) -> Callable[[], Any]:
    """generate()'s prefill position step on the case: (4, B, L) positions (text row + 3-D rows)."""
    return lambda: case.model._prepare_position_ids_for_generation(case.input_ids, dict(case.kwargs))


def _same_at_real_tokens(a: Any, b: Any, mask: Any) -> bool:
    real = mask.bool()
    return a.shape == b.shape and bool((a[:, real] == b[:, real]).all())


def run_position_steps(quick: bool) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    import torch

    rows, results = [], []
    for name, build in prefill_cases().items():
        # the patched side is a second model of the case (same inputs), patched once: a call at ~1 ms
        # would otherwise carry the patch and unpatch of every round
        case, patched_case = build(), build()
        if not torch.equal(case.input_ids, patched_case.input_ids):
            raise SystemExit(f"case {name}: the two builds differ")
        without_patch = position_step(case)
        with_patch = position_step(patched_case)
        mt.patch(patched_case.model)
        if not _same_at_real_tokens(with_patch(), without_patch(), case.kwargs["attention_mask"]):
            raise SystemExit(f"case {name}: the patched position step differs from transformers'")
        samples = time_interleaved({"transformers": without_patch, "mrope patch": with_patch}, quick=quick)
        times = {k: median_us(v) for k, v in samples.items()}
        tokens = int(case.kwargs["attention_mask"].sum())
        ratio = times["transformers"] / times["mrope patch"]
        rows.append([case.title, tokens, times["transformers"], times["mrope patch"], ratio])
        results.append(
            {"case": name, "title": case.title, "num_tokens": tokens, "median_us": times, "speedup": ratio}
        )
        print(f"position step {name} done: {ratio:.1f}x", flush=True)
    return rows, results


WHOLE_PREFILL = {  # the Omni thinkers of cases (f) and (g)
    "qwen2_5_omni_thinker": ("Qwen2.5-Omni thinker (tiny), 60 s video with audio", {}),
    "qwen3_omni_moe_thinker": (
        "Qwen3-Omni thinker (tiny), 60 s video with audio",
        {"position_id_per_seconds": 13},
    ),
}


def run_whole_prefill() -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """generate(max_new_tokens=1) of tiny Omni thinkers on cases (f) and (g), their special ids moved
    into the tiny vocabulary so that the prompt can be embedded (5 rounds: each call takes ~1 s)."""
    import torch

    rows, results = [], []
    for model_type, (title, thinker) in WHOLE_PREFILL.items():
        config = tiny_vlms.tiny_config(model_type, **thinker)
        model = tiny_vlms.model_class(model_type)(config).eval()
        ids = torch.tensor([_omni_video_row(config, OMNI_SEQLEN)])
        kwargs = _omni_kwargs(ids, OMNI_SEQLEN)

        def prefill(model: Any = model, ids: Any = ids, kwargs: dict[str, Any] = kwargs) -> Any:
            with torch.no_grad():
                return model.generate(ids, **kwargs, max_new_tokens=1, do_sample=False, pad_token_id=0)

        expected = prefill()
        with patched(model):
            if not torch.equal(prefill(), expected):
                raise SystemExit(f"whole prefill {model_type}: the patched model generates another token")
        with_patch, without_patch = toggled(model, prefill)
        samples = time_interleaved({"transformers": without_patch, "mrope patch": with_patch}, quick=True)
        mt.unpatch(model)
        times = {k: median_us(v) / 1000 for k, v in samples.items()}
        ratio = times["transformers"] / times["mrope patch"]
        rows.append([title, ids.shape[1], times["transformers"], times["mrope patch"], ratio])
        results.append({"title": title, "num_tokens": ids.shape[1], "median_ms": times, "speedup": ratio})
        print(f"whole prefill {model_type} done: {ratio:.1f}x", flush=True)
    return rows, results


def _samples(kind: str, count: int) -> tuple[Any, list[dict[str, Any]]]:
    """``count`` processor outputs of one sample each (batch dim 1) and the model their positions are for."""
    import torch

    rng = np.random.default_rng(7)
    model_type = "qwen2_5_vl" if kind == "image" else "qwen3_vl"
    model = tiny_vlms.model_class(model_type)(tiny_vlms.tiny_config(model_type, keep_token_ids=True)).eval()
    samples = []
    for _ in range(count):
        if kind == "image":
            side = int(rng.integers(8, 19))
            row = _image_row(rng, int(rng.integers(100, 400)), side * side, IMAGE)
            grids = {"image_grid_thw": torch.tensor([[1, 2 * side, 2 * side]])}
        else:
            frames = int(rng.integers(8, 33))
            row = rng.integers(0, 150000, size=int(rng.integers(20, 60))).tolist()
            for frame in range(frames):
                row += [27, 15 + frame % 10, 13] + [VISION_START] + [VIDEO] * 64 + [VISION_END]
            grids = {"video_grid_thw": torch.tensor([[frames, 16, 16]])}
        ids = torch.tensor([row])
        types = tiny_vlms.token_types(model_type, model.config, ids)
        samples.append(
            {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": types, **grids}
        )
    return model, samples


def run_pipeline(quick: bool) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    count = 16 if quick else 64
    rows, results = [], []
    for kind, title in (
        ("image", "Qwen2.5-VL, text + 1 image"),
        ("video", "Qwen3-VL, text + 8-32 frame video"),
    ):
        model, samples = _samples(kind, count)
        inner, config = model.model, model.config

        def mrope_per_sample(samples: list[dict[str, Any]] = samples, config: Any = config) -> list[Any]:
            return [mt.rope_index(config, s) for s in samples]

        def transformers_per_sample(samples: list[dict[str, Any]] = samples, inner: Any = inner) -> list[Any]:
            return [inner.get_rope_index(**s) for s in samples]

        for ours, theirs in zip(mrope_per_sample(), transformers_per_sample(), strict=True):
            if not (bool((ours[0] == theirs[0]).all()) and bool((ours[1] == theirs[1]).all())):
                raise SystemExit(f"pipeline {kind}: rope_index differs from transformers' get_rope_index")
        samples_t = time_interleaved(
            {"transformers": transformers_per_sample, "mrope rope_index": mrope_per_sample}, quick=quick
        )
        rates = {k: count / (median_us(v) / 1e6) for k, v in samples_t.items()}
        ratio = rates["mrope rope_index"] / rates["transformers"]
        tokens = sum(int(s["input_ids"].shape[1]) for s in samples) // count
        rows.append([title, tokens, rates["transformers"], rates["mrope rope_index"], ratio])
        results.append(
            {"kind": kind, "title": title, "mean_tokens": tokens, "samples_per_s": rates, "speedup": ratio}
        )
        print(f"pipeline {kind} done: {ratio:.1f}x", flush=True)
    return rows, results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--skip-prefill", action="store_true", help="leave out the whole-prefill part")


def run(args: argparse.Namespace) -> int:
    import torch

    # as benchmarks/step.py: torch's small calls (transformers' position code, generate's text
    # positions) are slowest with OpenMP workers spinning on a small, busy machine; one thread for all
    torch.set_num_threads(1)
    step_rows, step_results = run_position_steps(args.quick)
    prefill_rows, prefill_results = ([], []) if args.skip_prefill else run_whole_prefill()
    pipeline_rows, pipeline_results = run_pipeline(args.quick)
    print()
    print("generate()'s prefill position step (tiny models, released token ids), median us:")
    print(format_table(["case", "tokens", "transformers", "mrope patch", "transformers / mrope"], step_rows))
    if prefill_rows:
        print("\nwhole prefill, generate(max_new_tokens=1), median ms:")
        print(
            format_table(
                ["case", "tokens", "transformers", "mrope patch", "transformers / mrope"], prefill_rows
            )
        )
    print("\npositions per sample (a Dataset's __getitem__), samples per second:")
    print(
        format_table(
            ["samples", "mean tokens", "transformers", "mrope rope_index", "mrope / transformers"],
            pipeline_rows,
        )
    )
    write_json(
        args.json,
        {
            "benchmark": "transformers_generate",
            "position_step": step_results,
            "whole_prefill": prefill_results,
            "pipeline": pipeline_results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(__doc__, add_arguments, run))
