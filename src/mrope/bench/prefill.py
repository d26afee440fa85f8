"""``mrope bench prefill``: prompt positions, mrope against transformers' and SGLang's ``get_rope_index``.

Every case runs all providers in one process on the same inputs, checks that mrope's positions equal
each peer's (in the peer's convention) and prints median times and the ratio of each peer to mrope.

Usage::

    mrope bench prefill [--json bench-results/prefill.json] [--quick] [--cases a,b]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import from_config, get_rope_index, peers
from ..families import Family
from ._timing import format_table, median_us, time_call, write_json

VISION_START, VISION_END = 151652, 151653


@dataclass
class CaseSetup:
    """One benchmark case: callables per provider (mrope first) and the checks run before timing."""

    title: str
    num_tokens: int
    providers: dict[str, Callable[[], Any]]
    # peer name -> (mrope callable in the peer's convention, peer callable); outputs must be equal
    checks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = field(default_factory=dict)


CASES: dict[str, Callable[[], CaseSetup]] = {}


def case(name: str) -> Callable[[Callable[[], CaseSetup]], Callable[[], CaseSetup]]:
    """Register a case builder under ``name`` (cases run in registration order)."""

    def register(builder: Callable[[], CaseSetup]) -> Callable[[], CaseSetup]:
        CASES[name] = builder
        return builder

    return register


def _families(model_type: str, **vision: Any) -> tuple[Any, Family, Family]:
    config = peers.transformers_config(model_type, **vision)
    return config, from_config(config, compat="vllm"), from_config(config, compat="transformers")


def _image_prompt(rng: np.random.Generator, num_text: int, pads: int, image_token_id: int) -> list[int]:
    before = int(rng.integers(1, num_text))
    text = rng.integers(0, 150000, size=num_text).tolist()
    return text[:before] + [VISION_START] + [image_token_id] * pads + [VISION_END] + text[before:]


def _padded(rows: list[list[int]], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded (B, L) ids and attention mask."""
    length = max(len(r) for r in rows)
    ids = np.full((len(rows), length), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, length - len(r) :] = r
        mask[i, length - len(r) :] = 1
    return ids, mask


def _batch_case(title: str, model_type: str, rows: list[list[int]], vision: dict[str, Any],
                grids: dict[str, np.ndarray], sglang_grids_per_row: list[dict[str, Any]]) -> CaseSetup:
    """Providers for a padded batch: mrope and transformers take the batch, SGLang each row (as engines)."""
    import torch

    config, vllm_family, hf_family = _families(model_type, **vision)
    ids, mask = _padded(rows)
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    grids_t = {k: torch.from_numpy(v) for k, v in grids.items()}
    rows_t = [torch.tensor([r]) for r in rows]
    sg_grids = [{k: torch.from_numpy(v) for k, v in g.items()} for g in sglang_grids_per_row]
    single = len(rows) == 1
    mask_arg = None if single else mask_t

    def mrope_batch(family: Family = vllm_family) -> Any:
        return get_rope_index(family, ids_t, attention_mask=mask_arg, **grids_t)

    def transformers_batch() -> Any:
        return peers.transformers_rope_index(hf_family, config, ids_t, attention_mask=mask_arg, **grids_t)

    def sglang_rows() -> list[Any]:
        return [peers.sglang_rope_index(vllm_family, r, **g) for r, g in zip(rows_t, sg_grids)]

    def mrope_rows_vllm() -> list[Any]:
        positions, deltas = mrope_batch()
        keep = mask.astype(bool)
        return [(positions[:, i : i + 1, torch.from_numpy(keep[i])], deltas[i : i + 1]) for i in range(len(rows))]

    providers: dict[str, Callable[[], Any]] = {"mrope get_rope_index": mrope_batch}
    if single:
        array_ids = ids[0]
        grid_arrays = {k: v for k, v in grids.items()}
        providers["mrope family.positions"] = lambda: vllm_family.positions(array_ids, **grid_arrays)
    providers["transformers"] = transformers_batch
    providers["sglang"] = sglang_rows
    return CaseSetup(
        title=title,
        num_tokens=int(mask.sum()),
        providers=providers,
        checks={"transformers": (lambda: mrope_batch(hf_family), transformers_batch),
                "sglang": (mrope_rows_vllm, sglang_rows)},
    )


@case("a")
def single_image() -> CaseSetup:
    """The first seed's load: 300 text tokens + one 512x512 image (grid 1x36x36), Qwen2.5-VL."""
    rng = np.random.default_rng(0)
    row = _image_prompt(rng, 300, 18 * 18, 151655)
    grids = {"image_grid_thw": np.array([[1, 36, 36]])}
    return _batch_case("(a) Qwen2.5-VL, 300 text + 1 image (1x36x36)", "qwen2_5_vl", [row],
                       {"tokens_per_second": 2}, grids, [grids])


@case("b")
def padded_batch() -> CaseSetup:
    """64 prompts of 250-350 text tokens + one 512x512 image each, left-padded, Qwen2.5-VL."""
    rng = np.random.default_rng(1)
    rows = [_image_prompt(rng, int(rng.integers(250, 351)), 18 * 18, 151655) for _ in range(64)]
    grid = np.array([[1, 36, 36]])
    return _batch_case("(b) Qwen2.5-VL, padded batch of 64 image prompts", "qwen2_5_vl", rows,
                       {"tokens_per_second": 2}, {"image_grid_thw": np.repeat(grid, 64, axis=0)},
                       [{"image_grid_thw": grid}] * 64)


@case("c")
def long_video() -> CaseSetup:
    """Qwen2.5-VL, one video of grid 16x36x64, second_per_grid_ts 1.0."""
    rng = np.random.default_rng(2)
    row = _image_prompt(rng, 40, 16 * 18 * 32, 151656)
    grids = {"video_grid_thw": np.array([[16, 36, 64]]), "second_per_grid_ts": np.array([1.0], dtype=np.float32)}
    return _batch_case("(c) Qwen2.5-VL, 1 video (16x36x64)", "qwen2_5_vl", [row], {"tokens_per_second": 2},
                       grids, [grids])


@case("d")
def qwen3_video_batch() -> CaseSetup:
    """Qwen3-VL, batch of 4 prompts: each a 64-frame video with timestamps and 4 images (~21k tokens)."""
    rng = np.random.default_rng(3)
    image, video = 151655, 151656
    rows = []
    for _ in range(4):
        row = rng.integers(0, 150000, size=int(rng.integers(20, 60))).tolist()
        for _ in range(4):
            row += [VISION_START] + [image] * 144 + [VISION_END] + rng.integers(0, 150000, size=8).tolist()
        for frame in range(64):
            row += [27, 15 + frame % 10, 13, 20, 6504, 29] + [VISION_START] + [video] * 64 + [VISION_END]
        rows.append(row + rng.integers(0, 150000, size=int(rng.integers(10, 40))).tolist())
    images = np.repeat(np.array([[1, 24, 24]]), 4, axis=0)
    videos = np.array([[64, 16, 16]])
    return _batch_case("(d) Qwen3-VL, 4 prompts x (64-frame video + 4 images)", "qwen3_vl", rows, {},
                       {"image_grid_thw": np.repeat(images, 4, axis=0), "video_grid_thw": np.repeat(videos, 4, axis=0)},
                       [{"image_grid_thw": images, "video_grid_thw": videos}] * 4)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return np.array_equal(peers.as_numpy(a), peers.as_numpy(b))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", default=None, help=f"comma-separated subset of {','.join(CASES)}")


def run(args: argparse.Namespace) -> int:
    names = args.cases.split(",") if args.cases else list(CASES)
    repeats = 5 if args.quick else 30
    rows, results = [], []
    for name in names:
        setup = CASES[name]()
        for peer, (ours, theirs) in setup.checks.items():
            if not _equal(ours(), theirs()):
                raise SystemExit(f"case {name}: mrope's positions differ from {peer}'s")
        timings = {p: median_us(time_call(fn, repeats=repeats, min_seconds=0.05 if args.quick else 0.5))
                   for p, fn in setup.providers.items()}
        ours = timings["mrope get_rope_index"]
        fastest_peer = min(t for p, t in timings.items() if not p.startswith("mrope"))
        for provider, t in timings.items():
            rows.append([setup.title, setup.num_tokens, provider, t, t / ours])
        results.append({"case": name, "title": setup.title, "num_tokens": setup.num_tokens,
                        "median_us": timings, "speedup_vs_fastest_peer": fastest_peer / ours})
        print(f"case {name} done: mrope {ours:.1f} us, fastest peer {fastest_peer:.1f} us", flush=True)
    print()
    print(format_table(["case", "tokens", "provider", "median us", "x mrope"], rows))
    write_json(args.json, {"benchmark": "prefill", "results": results})
    return 0
