"""``python benchmarks/prefill.py``: prompt positions, mrope against transformers' and SGLang's
``get_rope_index`` and, where vLLM is importable (the vLLM environment), vLLM's own
``get_mrope_input_positions``.

Every case runs all providers in one process on the same inputs, checks that mrope's positions equal
each peer's (in the peer's convention) and prints median times and the ratio of each peer to mrope.
Single Qwen2.5-VL prompts also time what an engine does at admission: ``family.positions`` and
``PositionTable.add`` given the items' placeholder offsets (as vLLM's processor records them, ids as a
list), and vLLM's ``get_mrope_input_positions`` on the same prompt (its ``mm_features``); the targets
printed after the table compare them. Peers that are not installed are left out.

Case (h) is a family with no transformers peer (OpenPangu-VL, one of the models mrope added for vLLM's
M-RoPE models): its only peer is vLLM's ``get_mrope_input_positions``, so it is skipped where vLLM is
not importable (``.venv``; ``make bench-vllm-prefill`` runs it in ``.venv-vllm``). mrope's providers are
what the vLLM plugin does at admission: ``admission_inputs`` of the request's ``mm_features``, then
``PositionTable.add``; and ``family.positions`` and ``table.add`` given those inputs.

Usage::

    python benchmarks/prefill.py [--json bench-results/prefill.json] [--quick] [--cases a,b]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from _common import main, peers
from _timing import format_table, median_us, time_interleaved, write_json
from mrope import from_config, get_rope_index
from mrope.families import Family
from mrope.serving import PositionTable

VISION_START, VISION_END = 151652, 151653


@dataclass
class CaseSetup:
    """One benchmark case: callables per provider (mrope first) and the checks run before timing."""

    title: str
    num_tokens: int
    providers: dict[str, Callable[[], Any]]
    # peer name -> (mrope callable in the peer's convention, peer callable); outputs must be equal
    checks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = field(default_factory=dict)
    # target name -> (numerator provider, denominator provider, bound, "max" or "min")
    targets: dict[str, tuple[str, str, float, str]] = field(default_factory=dict)
    # the provider the others are divided by (default: family.positions, else get_rope_index)
    primary: str | None = None


class SkipCase(Exception):
    """Raised by a case builder whose peers are not importable here: the case is skipped, with the reason."""


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


def _batch_case(
    title: str,
    model_type: str,
    rows: list[list[int]],
    vision: dict[str, Any],
    grids: dict[str, np.ndarray],
    sglang_grids_per_row: list[dict[str, Any]],
) -> CaseSetup:
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
        return [peers.sglang_rope_index(vllm_family, r, **g) for r, g in zip(rows_t, sg_grids, strict=True)]

    def mrope_rows_vllm() -> list[Any]:
        positions, deltas = mrope_batch()
        keep = mask.astype(bool)
        return [
            (positions[:, i : i + 1, torch.from_numpy(keep[i])], deltas[i : i + 1]) for i in range(len(rows))
        ]

    providers: dict[str, Callable[[], Any]] = {"mrope get_rope_index": mrope_batch}
    checks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "transformers": (lambda: mrope_batch(hf_family), transformers_batch)
    }
    if single:  # the engine's call at admission, on the same tensors the peers get
        providers["mrope family.positions"] = lambda: vllm_family.positions(ids_t[0], **grids_t)
        if model_type == "qwen2_5_vl":
            engine_providers(providers, checks, config, rows[0], grids)
    providers["transformers"] = transformers_batch
    if _installed("sglang"):
        providers["sglang"] = sglang_rows
        checks["sglang"] = (mrope_rows_vllm, sglang_rows)
    return CaseSetup(title=title, num_tokens=int(mask.sum()), providers=providers, checks=checks)


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# provider names of the admission targets (single Qwen2.5-VL prompts)
OFFSETS = "mrope family.positions, offsets"
TABLE_ADD = "mrope table.add, offsets"
ADMISSION = "mrope admission_inputs + table.add"  # the vLLM plugin's admission, from the mm_features
VLLM = "vllm"
#: target name -> (numerator, denominator, bound, "max" or "min")
TARGETS = {
    "table.add / family.positions (offsets)": (TABLE_ADD, OFFSETS, 1.2, "max"),
    "vllm / family.positions (offsets)": (VLLM, OFFSETS, 5.0, "min"),
}


def engine_providers(
    providers: dict[str, Callable[[], Any]],
    checks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]],
    config: Any,
    row: list[int],
    grids: dict[str, np.ndarray],
) -> None:
    """Admission of one Qwen2.5-VL prompt as an engine has it (ids as a list, each item's placeholder
    offset): ``family.positions`` and ``PositionTable.add`` with the vLLM plugin's family, and vLLM's own
    ``get_mrope_input_positions`` where vLLM is importable."""
    from mrope.integrations.vllm.features import VLLM_SETTINGS

    family = from_config(config, **VLLM_SETTINGS)
    inputs = {**grids, "image_offsets": [], "video_offsets": []}
    for kind, token in (("image", family.image_token_id), ("video", family.video_token_id)):
        # the first placeholder of each run of the item's token (markers separate the items)
        inputs[f"{kind}_offsets"] = [
            i for i, t in enumerate(row) if t == token and (i == 0 or row[i - 1] != token)
        ]
    providers[OFFSETS] = lambda: family.positions(row, **inputs)
    providers[TABLE_ADD] = _TableAdds(family, row, inputs)
    if not _installed("vllm"):
        return
    vllm_call = _vllm_call(config, inputs, len(row))
    providers[VLLM] = lambda: vllm_call(row)
    checks[VLLM] = (lambda: family.positions(row, **inputs), lambda: vllm_call(row))


class _TableAdds:
    """``PositionTable.add`` of one prompt into the next free row of a large table (a new table when it
    is full: one allocation per 4096 calls), so that the time is the add alone."""

    ROWS = 4096

    def __init__(self, family: Family, row: list[int], inputs: dict[str, Any]) -> None:
        self.family, self.row, self.inputs = family, row, inputs
        self.table, self.next = PositionTable(self.ROWS), 0

    def __call__(self) -> None:
        if self.next == self.ROWS:
            self.table, self.next = PositionTable(self.ROWS), 0
        self.table.add(self.next, self.family, self.row, **self.inputs)
        self.next += 1


class _Admissions(_TableAdds):
    """The vLLM plugin's admission of one request: its inputs derived from the request's ``mm_features``
    (``admission_inputs``), then ``PositionTable.add`` as :class:`_TableAdds`."""

    def __init__(self, family: Family, row: list[int], features: list[Any]) -> None:
        super().__init__(family, row, {})
        self.features = features

    def __call__(self) -> None:
        from mrope.integrations.vllm.features import admission_inputs

        self.inputs = admission_inputs(self.family, self.features)
        super().__call__()


def _table_row(family: Family, row: list[int], inputs: dict[str, Any]) -> tuple[np.ndarray, int]:
    """The prompt's positions and delta as a ``PositionTable`` row holds them after ``add``."""
    table = PositionTable(1)
    table.add(0, family, row, **inputs)
    out = np.zeros((3, len(row)), dtype=np.int64)
    table.fill(out, np.array([0]), np.array([0]), np.array([len(row)]))
    return out, table.delta(0)


def _vllm_call(config: Any, inputs: dict[str, Any], length: int) -> Callable[[list[int]], Any]:
    """vLLM's ``Qwen2_5_VLForConditionalGeneration.get_mrope_input_positions`` on a stand-in ``self``
    (an instance made without ``__init__`` that holds the config, all the method reads), with the
    prompt's ``mm_features`` built as vLLM's processor builds them."""
    import torch

    from mrope.integrations.vllm.features import feature_spec
    from support.vllm_models import stand_in

    model = stand_in("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", config)
    merge = config.vision_config.spatial_merge_size
    features = []
    for kind in ("image", "video"):
        grid_list = inputs.get(f"{kind}_grid_thw")
        for i, offset in enumerate(inputs[f"{kind}_offsets"]):
            grid = torch.as_tensor(grid_list[i])
            data = {f"{kind}_grid_thw": grid}
            seconds = inputs.get("second_per_grid_ts")
            if kind == "video" and seconds is not None:
                data["second_per_grid_ts"] = torch.tensor(float(seconds[i]), dtype=torch.float32)
            features.append(feature_spec(kind, offset, int(grid.prod()) // merge**2, data))
    return lambda ids: type(model).get_mrope_input_positions(model, ids, features)


@case("a")
def single_image() -> CaseSetup:
    """The first seed's load: 300 text tokens + one 512x512 image (grid 1x36x36), Qwen2.5-VL."""
    rng = np.random.default_rng(0)
    row = _image_prompt(rng, 300, 18 * 18, 151655)
    grids = {"image_grid_thw": np.array([[1, 36, 36]])}
    setup = _batch_case(
        "(a) Qwen2.5-VL, 300 text + 1 image (1x36x36)",
        "qwen2_5_vl",
        [row],
        {"tokens_per_second": 2},
        grids,
        [grids],
    )
    setup.targets = TARGETS
    return setup


@case("b")
def padded_batch() -> CaseSetup:
    """64 prompts of 250-350 text tokens + one 512x512 image each, left-padded, Qwen2.5-VL."""
    rng = np.random.default_rng(1)
    rows = [_image_prompt(rng, int(rng.integers(250, 351)), 18 * 18, 151655) for _ in range(64)]
    grid = np.array([[1, 36, 36]])
    return _batch_case(
        "(b) Qwen2.5-VL, padded batch of 64 image prompts",
        "qwen2_5_vl",
        rows,
        {"tokens_per_second": 2},
        {"image_grid_thw": np.repeat(grid, 64, axis=0)},
        [{"image_grid_thw": grid}] * 64,
    )


@case("c")
def long_video() -> CaseSetup:
    """Qwen2.5-VL, one video of grid 16x36x64, second_per_grid_ts 1.0."""
    rng = np.random.default_rng(2)
    row = _image_prompt(rng, 40, 16 * 18 * 32, 151656)
    grids = {
        "video_grid_thw": np.array([[16, 36, 64]]),
        "second_per_grid_ts": np.array([1.0], dtype=np.float32),
    }
    return _batch_case(
        "(c) Qwen2.5-VL, 1 video (16x36x64)", "qwen2_5_vl", [row], {"tokens_per_second": 2}, grids, [grids]
    )


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
    return _batch_case(
        "(d) Qwen3-VL, 4 prompts x (64-frame video + 4 images)",
        "qwen3_vl",
        rows,
        {},
        {"image_grid_thw": np.repeat(images, 4, axis=0), "video_grid_thw": np.repeat(videos, 4, axis=0)},
        [{"image_grid_thw": images, "video_grid_thw": videos}] * 4,
    )


@case("e")
def ernie_video() -> CaseSetup:
    """Ernie-4.5-VL, one video of grid 32x28x52 (16 temporal steps after the merge of 2) in text."""
    rng = np.random.default_rng(4)
    config = peers.transformers_config("ernie4_5_vl_moe")
    text = rng.integers(0, 100000, size=60).tolist()
    row = (
        text[:20]
        + [config.video_start_token_id]
        + [config.video_token_id] * (16 * 14 * 26)
        + [config.video_end_token_id]
        + text[20:]
    )
    grids = {"video_grid_thw": np.array([[32, 28, 52]])}
    return _batch_case("(e) Ernie-4.5-VL, 1 video (32x28x52)", "ernie4_5_vl_moe", [row], {}, grids, [grids])


def _omni_case(title: str, model_type: str, with_sglang: bool, **thinker: Any) -> CaseSetup:
    """A 60-second video with its audio (use_audio_in_video): grid 60x16x28 (2 fps, 1 s per grid step),
    audio of feature length 6000 (100 per second), between text; transformers needs the mask."""
    import torch

    config = peers.transformers_omni_config(model_type, **thinker)
    family = from_config(config, compat="vllm")
    seqlen = 6000
    num_video, num_audio = 60 * 8 * 14, int(family.audio_tokens(np.array([seqlen]))[0])
    rng = np.random.default_rng(5)
    text = rng.integers(0, 150000, size=40).tolist()
    vision_start, audio_start = family.vision_start_token_id, family.audio_start_token_id
    row = (
        text[:25]
        + [vision_start, audio_start]
        + [family.video_token_id] * num_video
        + [family.audio_token_id] * num_audio
        + [audio_start + 1, vision_start + 1]
        + text[25:]
    )
    ids = torch.tensor([row])
    mask = torch.ones_like(ids)
    inputs = {
        "video_grid_thw": np.array([[60, 16, 28]]),
        "audio_seqlens": np.array([seqlen]),
        "second_per_grid_ts": np.array([1.0], dtype=np.float32),
    }
    inputs_t = {k: torch.from_numpy(v) for k, v in inputs.items()}

    def mrope_batch() -> Any:
        return get_rope_index(family, ids, attention_mask=mask, use_audio_in_video=True, **inputs_t)

    def transformers_batch() -> Any:
        return peers.transformers_rope_index(
            family, config, ids, attention_mask=mask, use_audio_in_video=True, **inputs_t
        )

    def sglang_row() -> Any:
        return peers.sglang_rope_index(family, ids, use_audio_in_video=True, **inputs_t)

    providers: dict[str, Callable[[], Any]] = {
        "mrope get_rope_index": mrope_batch,
        "mrope family.positions": lambda: family.positions(ids[0], use_audio_in_video=True, **inputs_t),
        "transformers": transformers_batch,
    }
    checks = {"transformers": (mrope_batch, transformers_batch)}
    if with_sglang:
        providers["sglang"] = sglang_row
        checks["sglang"] = (mrope_batch, sglang_row)
    return CaseSetup(title=title, num_tokens=len(row), providers=providers, checks=checks)


@case("f")
def qwen2_5_omni_video_with_audio() -> CaseSetup:
    """Qwen2.5-Omni, a 60 s video with its audio (chunked interleave). SGLang has no Qwen2.5-Omni code."""
    return _omni_case("(f) Qwen2.5-Omni, 60 s video with audio", "qwen2_5_omni", with_sglang=False)


@case("g")
def qwen3_omni_video_with_audio() -> CaseSetup:
    """Qwen3-Omni (position_id_per_seconds 13, as the checkpoints), a 60 s video with its audio."""
    return _omni_case(
        "(g) Qwen3-Omni, 60 s video with audio",
        "qwen3_omni_moe",
        with_sglang=True,
        position_id_per_seconds=13,
    )


@case("h")
def openpangu_vl_video() -> CaseSetup:
    """OpenPangu-VL, no transformers peer: text, one image (1x28x28) and a 32-frame video (32x24x40,
    its frames joined by vision_end, vision_start), 8,002 tokens, as the vLLM plugin admits it."""
    if not _installed("vllm"):
        raise SkipCase("its only peer is vLLM's get_mrope_input_positions, and vLLM is not importable")
    import torch

    from mrope.integrations.vllm.features import (
        VLLM_SETTINGS,
        admission_inputs,
        feature_spec,
        inputs_from_mm_features,
    )
    from support.vllm_models import openpangu_video, remote_config, stand_in

    architecture = "OpenPanguVLForConditionalGeneration"
    config = remote_config(architecture)
    model = stand_in("openpangu_vl", architecture, config)
    family = from_config(config, **VLLM_SETTINGS)
    merge = family.spatial_merge_size
    image, video = [1, 28, 28], [32, 24, 40]
    image_tokens = image[1] * image[2] // merge**2
    text = np.random.default_rng(7).integers(0, 150000, size=60).tolist()
    row = text[:30] + [config.vision_start_token_id]
    features = [feature_spec("image", len(row), image_tokens, {"image_grid_thw": torch.tensor(image)})]
    row += [config.image_token_id] * image_tokens + [config.vision_end_token_id]
    row += text[30:40] + [config.vision_start_token_id]
    start = len(row)
    row += openpangu_video(config, video[0], video[1] * video[2] // merge**2)
    embed = torch.tensor([t == config.video_token_id for t in row[start:]])
    grid = {"video_grid_thw": torch.tensor(video)}
    features.append(feature_spec("video", start, len(row) - start, grid, embed))
    row += [config.vision_end_token_id] + text[40:]
    inputs = admission_inputs(family, features)

    def vllm_call() -> Any:
        return type(model).get_mrope_input_positions(model, row, features)

    providers: dict[str, Callable[[], Any]] = {
        OFFSETS: lambda: family.positions(row, **inputs),
        TABLE_ADD: _TableAdds(family, row, inputs),
        ADMISSION: _Admissions(family, row, features),
        VLLM: vllm_call,
    }
    checks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        f"{VLLM} (admission_inputs)": (
            lambda: family.positions(row, **admission_inputs(family, features)),
            vllm_call,
        ),
        f"{VLLM} (inputs_from_mm_features)": (
            lambda: family.positions(row, **inputs_from_mm_features(family, features)),
            vllm_call,
        ),
        f"{VLLM} (table.add)": (
            lambda: _table_row(family, row, admission_inputs(family, features)),
            vllm_call,
        ),
    }
    title = "(h) OpenPangu-VL, 1 image (1x28x28) + 1 video (32x24x40)"
    return CaseSetup(title=title, num_tokens=len(row), providers=providers, checks=checks, primary=OFFSETS)


@case("i")
def glm_image_to_image() -> CaseSetup:
    """GLM-Image image-to-image: 200 text tokens around a source image of grid 1x32x32, one target grid
    of 1x32x32: the prompt's positions and the 1,025 generated tokens' (transformers' decode cache)."""
    import torch

    config = peers.transformers_config("glm_image")
    family = from_config(config, compat="transformers")
    text = np.random.default_rng(8).integers(0, 16000, size=200).tolist()
    image = [config.image_start_token_id] + [config.image_token_id] * 1024 + [config.image_end_token_id]
    row = text[:120] + image + text[120:] + [config.image_start_token_id]
    grids = np.array([[1, 32, 32], [1, 32, 32]])
    ids_t, grids_t = torch.tensor([row]), torch.from_numpy(grids)

    def mrope_both() -> tuple[Any, Any]:
        positions, _ = get_rope_index(family, ids_t, image_grid_thw=grids_t)
        return positions, family.generation_positions(ids_t[0], image_grid_thw=grids_t)

    def transformers_both() -> tuple[Any, Any]:
        positions, _, cache = peers.transformers_glm_image_rope_index(config, ids_t, image_grid_thw=grids_t)
        return positions, cache[0]

    providers: dict[str, Callable[[], Any]] = {
        "mrope get_rope_index + generation_positions": mrope_both,
        "mrope table.add (prompt + generation)": _TableAdds(family, row, {"image_grid_thw": grids}),
        "transformers": transformers_both,
    }
    checks = {"transformers": (mrope_both, transformers_both)}
    title = "(i) GLM-Image, image-to-image (1x32x32 source, 1x32x32 target)"
    return CaseSetup(
        title=title,
        num_tokens=len(row),
        providers=providers,
        checks=checks,
        primary="mrope get_rope_index + generation_positions",
    )


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        return a == b
    return np.array_equal(peers.as_numpy(a), peers.as_numpy(b))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", default=None, help=f"comma-separated subset of {','.join(CASES)}")


def run(args: argparse.Namespace) -> int:
    names = args.cases.split(",") if args.cases else list(CASES)
    rows, results, target_rows = [], [], []
    for name in names:
        try:
            setup = CASES[name]()
        except SkipCase as skipped:
            print(f"case {name} skipped: {skipped}", flush=True)
            results.append({"case": name, "skipped": str(skipped)})
            continue
        for peer, (ours, theirs) in setup.checks.items():
            if not _equal(ours(), theirs()):
                raise SystemExit(f"case {name}: mrope's positions differ from {peer}'s")
        # as vLLM does once started (freeze_gc_heap): the collector skips the objects that exist now
        gc.collect()
        gc.freeze()
        timings = {p: median_us(t) for p, t in time_interleaved(setup.providers, quick=args.quick).items()}
        # single prompts: the engine's per-request call (family.positions); batches: get_rope_index
        primary = setup.primary or (
            "mrope family.positions" if "mrope family.positions" in timings else "mrope get_rope_index"
        )
        ours = timings[primary]
        fastest_peer = min(t for p, t in timings.items() if not p.startswith("mrope"))
        for provider, t in timings.items():
            rows.append([setup.title, setup.num_tokens, provider, t, t / ours])
        targets = {}
        for target, (numerator, denominator, bound, kind) in setup.targets.items():
            if numerator in timings and denominator in timings:
                ratio = timings[numerator] / timings[denominator]
                met = ratio <= bound if kind == "max" else ratio >= bound
                targets[target] = {"ratio": ratio, "bound": bound, "kind": kind, "met": met}
                target_rows.append(
                    [setup.title, target, ratio, f"{'<=' if kind == 'max' else '>='} {bound}", met]
                )
        results.append(
            {
                "case": name,
                "title": setup.title,
                "num_tokens": setup.num_tokens,
                "median_us": timings,
                "primary": primary,
                "speedup_vs_fastest_peer": fastest_peer / ours,
                "speedup_vs_transformers": timings["transformers"] / ours
                if "transformers" in timings
                else None,
                "targets": targets,
            }
        )
        print(f"case {name} done: mrope {ours:.1f} us, fastest peer {fastest_peer:.1f} us", flush=True)
    if rows:
        print()
        print(format_table(["case", "tokens", "provider", "median us", "time / mrope"], rows))
        print("\ntime / mrope: against family.positions for single prompts (the per-request call at")
        print("admission, as SGLang's get_rope_index is), against get_rope_index for batches. 'offsets':")
        print(
            "given the items' placeholder offsets and the ids as a list, as an engine has them at admission"
        )
        print("(vLLM plugin); case (h): against family.positions with the inputs its mm_features give.")
    if target_rows:
        print()
        print(format_table(["case", "target", "ratio", "bound", "met"], target_rows))
    write_json(args.json, {"benchmark": "prefill", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main(__doc__, add_arguments, run))
