"""mrope against vLLM 0.34's own code for the M-RoPE models new in its model files, element for element.

- ``alpamayo2_super`` (``Alpamayo2SuperForConditionalGeneration``, a Qwen3-VL subclass, and vLLM's config
  class that wraps a Qwen3-VL config in ``vlm_config``) and ``minicpm_ocr``
  (``MiniCPMOcrForConditionalGeneration``, a MiniCPM-V 4.6 subclass): their position code is their
  parent's. Hypothesis draws prompts laid out as their processors lay them out and builds the request's
  ``mm_features`` as vLLM does; the model class's own ``get_mrope_input_positions`` runs on a stand-in
  ``self`` that holds only the config (:func:`support.vllm_models.stand_in`). mrope's positions and delta
  (the family from ``from_config(config, **VLLM_SETTINGS)``, the inputs the plugin reads from the
  features) and a :class:`PositionTable` row, prompt and decode, must equal vLLM's. mrope reads the
  wrapped config as vLLM's config class does (the ids and sub-configs at either level). Negative
  controls: Qwen2-VL's rule for Alpamayo (its videos are frames with timestamps between them) and
  Qwen3-VL's grid rule for MiniCPM-OCR's placeholder runs fail the same comparison.
- ``unlimited_ocr`` (Unlimited-OCR-2): vLLM's ``prompt_page_positions`` gives four rows of DASH page
  positions, the fourth negative in the prompt and the first no token index; vLLM's own config code gives
  the model 4 position rows, and the plugin leaves it to vLLM's path, naming those rows.

Run with vLLM 0.34's source on ``PYTHONPATH`` (``make test``; see this folder's conftest).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch  # noqa: E402
from hypothesis import given
from hypothesis import strategies as st
from vllm.model_executor.layers.dash_attention import prompt_page_positions  # noqa: E402
from vllm.model_executor.models.config import UnlimitedOCRForCausalLMConfig  # noqa: E402
from vllm.model_executor.models.registry import _MULTIMODAL_MODELS  # noqa: E402
from vllm.transformers_utils.config import mrope_num_dims  # noqa: E402
from vllm.transformers_utils.configs.alpamayo2_super import Alpamayo2SuperConfig  # noqa: E402
from vllm.transformers_utils.configs.unlimited_ocr import UnlimitedOCRConfig  # noqa: E402

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.families import Family, Qwen2VL, Qwen3VL  # noqa: E402
from mrope.families.alpamayo2_super import Alpamayo2Super  # noqa: E402
from mrope.families.hunyuan_vl import HunYuanVL  # noqa: E402
from mrope.families.sequential import Sequential  # noqa: E402
from mrope.integrations.vllm.features import (  # noqa: E402
    VLLM_SETTINGS,
    admission_inputs,
    feature_spec,
    inputs_from_mm_features,
)
from mrope.integrations.vllm.models import served_family, vllm_path_reason  # noqa: E402
from mrope.serving import PositionTable  # noqa: E402
from support.vllm_models import Request, remote_config, stand_in  # noqa: E402

TEXT = st.integers(1000, 9000)  # no special id lies here
# the wrapped Qwen3-VL config's ids (not Qwen3-VL's defaults: read from vlm_config) and merge
IMAGE, VIDEO, START, END = 151700, 151701, 151702, 151703
MERGE = 3
VLM_CONFIG = {
    "model_type": "qwen3_vl",
    "image_token_id": IMAGE,
    "video_token_id": VIDEO,
    "vision_start_token_id": START,
    "vision_end_token_id": END,
    "vision_config": {"spatial_merge_size": MERGE},
    "text_config": {"hidden_size": 64},
}
MINICPM_OCR_CONFIG = {
    "model_type": "minicpm_ocr",
    "architectures": ["MiniCPMOcrForConditionalGeneration"],
    "image_token_id": IMAGE,
    "downsample_mode": "4x",
}


@dataclass(frozen=True)
class Case:
    """A model: vLLM's module and class, the architecture vLLM's registry maps to them, its processor's
    layout (``"qwen3"``: images between vision markers, a video per frame timestamp text, vision_start,
    pads, vision_end; ``"sequential"``: placeholder runs without a grid), the config vLLM hands the model
    (mrope reads the same) and the family mrope gives it."""

    module: str
    cls: str
    architecture: str
    layout: str
    config: Any
    family_class: type[Family]

    def vllm_positions(self, ids: list[int], features: list[Any]) -> tuple[np.ndarray, int]:
        model = stand_in(self.module, self.cls, self.config)  # the method reads only ``self.config``
        positions, delta = type(model).get_mrope_input_positions(model, ids, features)
        return np.asarray(positions), int(delta)


CASES = {
    "alpamayo2_super": Case(
        "alpamayo2_super",
        "Alpamayo2SuperForConditionalGeneration",
        "Alpamayo2Super",
        "qwen3",
        Alpamayo2SuperConfig(vlm_config=VLM_CONFIG, traj_ids={"history_id0": 5, "future_id0": 10}),
        Alpamayo2Super,
    ),
    "minicpm_ocr": Case(
        "minicpm_ocr",
        "MiniCPMOcrForConditionalGeneration",
        "MiniCPMOcrForConditionalGeneration",
        "sequential",
        MINICPM_OCR_CONFIG,
        Sequential,
    ),
}


def family_of(model_type: str) -> Family:
    return mrope.from_config(CASES[model_type].config, **VLLM_SETTINGS)


@st.composite
def requests(draw: st.DrawFn, layout: str, max_items: int = 4) -> Request:
    """A prompt and its features as the model's processor lays them out (Qwen3-VL's: an image's pads
    between vision markers; a video's frames each after its timestamp text, between vision markers, the
    outer markers kept or not; MiniCPM: placeholder runs of any length, no grid)."""

    def text(low: int = 0, high: int = 5) -> list[int]:
        return draw(st.lists(TEXT, min_size=low, max_size=high))

    ids, features = text(), []
    for _ in range(draw(st.integers(0, max_items))):
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if layout == "sequential":
            n = draw(st.integers(1, 12))
            ids.append(START)
            features.append(feature_spec(draw(st.sampled_from(["image", "video"])), len(ids), n, {}))
            ids += [IMAGE] * n + [END]
        elif draw(st.booleans()):  # an image
            ids.append(START)
            grid = torch.tensor([1, h * MERGE, w * MERGE])
            features.append(feature_spec("image", len(ids), h * w, {"image_grid_thw": grid}))
            ids += [IMAGE] * (h * w) + [END]
        else:  # a video, frame by frame
            frames = draw(st.integers(1, 6))
            outer = draw(st.booleans())
            ids += [START] * outer
            start = len(ids)
            for _ in range(frames):
                ids += text(1, 4) + [START] + [VIDEO] * (h * w) + [END]
            embed = torch.tensor([t == VIDEO for t in ids[start:]])
            grid = torch.tensor([frames, h * MERGE, w * MERGE])
            features.append(feature_spec("video", start, len(ids) - start, {"video_grid_thw": grid}, embed))
            ids += [END] * outer
        ids += text()
    if not ids:
        ids = text(1, 5)
    random.Random(draw(st.integers(0, 2**16))).shuffle(features)  # vLLM sorts them by offset itself
    return Request(ids, features)


def check(case: Case, family: Family, request: Request) -> None:
    """mrope's positions, delta and table row (prompt, then three decode tokens) equal vLLM's."""
    expected, expected_delta = case.vllm_positions(request.ids, request.features)
    context = f"{family!r}: {request.describe()}"
    inputs = inputs_from_mm_features(family, request.features)
    admitted = admission_inputs(family, request.features)
    scanned = {k: v for k, v in inputs.items() if not k.endswith("_offsets")}
    for name, given_inputs in (("features", inputs), ("admission", admitted), ("scanned", scanned)):
        positions, delta = family.positions(request.ids, **given_inputs)
        np.testing.assert_array_equal(positions, expected, err_msg=f"{name}: {context}", strict=True)
        assert delta == expected_delta, f"{name}: delta {delta} != vLLM's {expected_delta}: {context}"
    table = PositionTable(2)
    table.add(1, family, request.ids, **admitted)
    length = len(request.ids)
    out = np.zeros((3, length + 3), dtype=np.int64)
    table.fill(out, np.array([1]), np.array([0]), np.array([length + 3]))
    np.testing.assert_array_equal(out[:, :length], expected, err_msg=f"table: {context}")
    decode = np.broadcast_to(np.arange(length, length + 3) + expected_delta, (3, 3))
    np.testing.assert_array_equal(out[:, length:], decode, err_msg=f"table decode: {context}")


def outcome(case: Case, family: Family, request: Request) -> str:
    """What :func:`check` says: ``"equal"``, ``"differs"`` (positions or delta) or ``"refused"`` (the
    family refuses the inputs)."""
    try:
        check(case, family, request)
    except AssertionError:
        return "differs"
    except MRopeError:
        return "refused"
    return "equal"


# -- alpamayo2_super and minicpm_ocr: their parents' position code ------------------------------------
@pytest.mark.parametrize("model_type", CASES)
def test_vllm_serves_the_class_the_stand_in_calls(model_type):
    # vLLM's registry loads this class for the architecture, and it inherits its parent's position code
    case = CASES[model_type]
    assert _MULTIMODAL_MODELS[case.architecture] == (case.module, case.cls)
    model_class = type(stand_in(case.module, case.cls, case.config))
    assert "get_mrope_input_positions" not in vars(model_class)
    family = family_of(model_type)
    assert type(family) is case.family_class and family.model_type == model_type


@pytest.mark.parametrize("model_type", CASES)
def test_the_plugin_serves_them_by_mrope_rule_audited_by_digest(model_type):
    # the installed vLLM (0.34's source) has their targets' audited digests: mrope's rule serves them
    family, reason = served_family(SimpleNamespace(hf_config=CASES[model_type].config))
    assert reason is None and type(family) is CASES[model_type].family_class


def test_keye_is_served_from_vllms_positions_past_0_33():
    # vLLM 0.34 dropped Keye-VL's model files: no code of its own to reproduce, so positions mode
    family, reason = served_family(SimpleNamespace(hf_config=remote_config("KeyeForConditionalGeneration")))
    assert family is None
    assert reason == (
        "vLLM 0.34.0 has no keye position code of its own (mrope's rule reproduces that of 0.32.0, 0.33.0)"
    )


@pytest.mark.parametrize("model_type", CASES)
@given(data=st.data())
def test_positions_equal_vllms(model_type, data):
    case = CASES[model_type]
    check(case, family_of(model_type), data.draw(requests(case.layout), label="request"))


def _alpamayo_request(frames: int) -> Request:
    """Text, a 2 x 3 image, text, a video of ``frames`` 2 x 2 frames (timestamps between; none for 0),
    text."""
    image = torch.tensor([1, 2 * MERGE, 3 * MERGE])
    ids = [1000, START] + [IMAGE] * 6 + [END, 1001]
    features = [feature_spec("image", 2, 6, {"image_grid_thw": image})]
    if frames:
        start = len(ids)
        for k in range(frames):
            ids += [2000 + k, START] + [VIDEO] * 4 + [END]
        embed = torch.tensor([t == VIDEO for t in ids[start:]])
        video = torch.tensor([frames, 2 * MERGE, 2 * MERGE])
        features.append(feature_spec("video", start, len(ids) - start, {"video_grid_thw": video}, embed))
    return Request([*ids, 1002], features)


def test_negative_controls_for_alpamayo_fail():
    # Qwen2-VL's rule, the same settings: its images are Qwen3-VL's (equal), but its video is one block
    # of contiguous placeholders, which Qwen3-VL's frames between timestamps are not; every token in
    # order (MiniCPM-V 4.6's rule) gives other positions
    case, family = CASES["alpamayo2_super"], family_of("alpamayo2_super")
    assert outcome(case, family, _alpamayo_request(3)) == "equal"
    image_only = _alpamayo_request(0)
    qwen2_vl = Qwen2VL("qwen2_vl", **family.settings, **VLLM_SETTINGS)
    assert outcome(case, qwen2_vl, image_only) == "equal"
    assert outcome(case, qwen2_vl, _alpamayo_request(3)) == "refused"
    in_order = mrope.from_config({"model_type": "minicpmv4_6"}, **VLLM_SETTINGS)
    assert outcome(case, in_order, image_only) == "differs"


def test_negative_control_grid_rule_for_minicpm_ocr_fails():
    # Qwen3-VL's rule with each placeholder run a (1, 1, n) image: t and h stay, w counts on
    case, family = CASES["minicpm_ocr"], family_of("minicpm_ocr")
    ids = [1000, START] + [IMAGE] * 5 + [END, 1001, START] + [IMAGE] * 3 + [END]
    request = Request(ids, [feature_spec("image", 2, 5, {}), feature_spec("image", 10, 3, {})])
    check(case, family, request)
    wrong = Qwen3VL("qwen3_vl", image_token_id=IMAGE, video_token_id=VIDEO, spatial_merge_size=1)
    expected, _ = case.vllm_positions(request.ids, request.features)
    positions, _ = wrong.positions(ids, image_grid_thw=[[1, 1, 5], [1, 1, 3]], image_offsets=[2, 10])
    assert not np.array_equal(positions, expected)
    assert positions[2, 6] == expected[2, 6] and positions[0, 6] != expected[0, 6]


PLACES = st.sampled_from(["top", "wrapped", "both"])


@given(
    ids=st.fixed_dictionaries(
        {
            "image_token_id": PLACES,
            "video_token_id": PLACES,
            "vision_start_token_id": st.sampled_from(["top", "wrapped", "both", "neither"]),
            "vision_end_token_id": st.sampled_from(["top", "wrapped", "both", "neither"]),
        }
    ),
    vision=PLACES,
    merges=st.tuples(st.integers(1, 4), st.integers(1, 4)),
)
def test_alpamayo_config_is_read_as_vllms_config_class_reads_it(ids, vision, merges):
    # a checkpoint's config.json: each id and the vision config at the top level, in vlm_config, in both
    # (different values) or (markers) in neither; mrope's family equals the one of vLLM's config object
    top: dict[str, Any] = {"model_type": "alpamayo2_super"}
    wrapped: dict[str, Any] = {"model_type": "qwen3_vl", "text_config": {"hidden_size": 64}}
    for k, (key, place) in enumerate(ids.items()):
        if place in ("top", "both"):
            top[key] = 160000 + k
        if place in ("wrapped", "both"):
            wrapped[key] = 170000 + k
    if vision in ("top", "both"):
        top["vision_config"] = {"spatial_merge_size": merges[0]}
    if vision in ("wrapped", "both"):
        wrapped["vision_config"] = {"spatial_merge_size": merges[1]}
    raw = {**top, "vlm_config": wrapped}
    config = Alpamayo2SuperConfig(**raw)
    family = mrope.from_config(raw, **VLLM_SETTINGS)
    assert family.settings == {
        "image_token_id": config.image_token_id,
        "video_token_id": config.video_token_id,
        "spatial_merge_size": config.vision_config.spatial_merge_size,
    }
    markers = family.prompt_markers()
    assert markers["vision_start_token_id"] == config.vision_start_token_id
    assert markers["vision_end_token_id"] == config.vision_end_token_id
    assert mrope.from_config(config, **VLLM_SETTINGS).settings == family.settings


# -- unlimited_ocr: four rows of page positions, left to vLLM ------------------------------------------
PAGE, PAGE_IMAGE = 8, 9
SPARSE = {
    "training_stage": "dash",
    "dash_stage0": "head_cls",
    "sparse_main_rope_mode": "page2d",
    "sparse_rope_mode": "page2d",
    "sparse_rope_page_span": 0,
    "use_sparse_attention": True,
    "image_bucket_constraint": True,
    "dash_image_only": True,
    "sparse_attention_freq": [1, 1],
    "sparse_index_dim": 64,
    "dash_sigma": 1.0,
    "dash_topk_blocks": 4,
    "sparse_local_block": 2,
    "sparse_block_size": 64,
    "image_token_id": PAGE_IMAGE,
    "page_token_id": PAGE,
}


def _unlimited_ocr2_config() -> Any:
    """An Unlimited-OCR-2 config after vLLM's own config update (which sets its mrope_section)."""
    config = UnlimitedOCRConfig(
        architectures=["UnlimitedOCRForCausalLM"],
        sparse_attention_config=SPARSE,
        language_config={"hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2},
    )
    UnlimitedOCRForCausalLMConfig.verify_and_update_model_config(
        SimpleNamespace(hf_config=config, model_arch_config=SimpleNamespace())
    )
    return config


@st.composite
def page_prompts(draw: st.DrawFn) -> list[int]:
    """Text, then pages (each a <PAGE> marker and its image tokens, text between), then text."""
    ids = draw(st.lists(TEXT, max_size=4))
    for _ in range(draw(st.integers(1, 4))):
        ids += [PAGE] + [PAGE_IMAGE] * draw(st.integers(1, 6)) + draw(st.lists(TEXT, max_size=3))
    return ids + draw(st.lists(TEXT, max_size=4))


def _page_positions(ids: list[int]) -> tuple[np.ndarray, int]:
    """vLLM's ``UnlimitedOCRForCausalLM.get_mrope_input_positions`` on a stand-in ``self``."""
    config = _unlimited_ocr2_config()
    model = stand_in("unlimited_ocr", "UnlimitedOCRForCausalLM", config)
    model.__dict__["text_config"] = config.text_config  # (what the method reads)
    positions, delta = type(model).get_mrope_input_positions(model, ids, [])
    return np.asarray(positions), int(delta)


def _hunyuan_rows_table() -> PositionTable:
    """A 4-row table, its rows fixed by a first add() as the only 4-row family's: (index, w, h, t)."""
    table = PositionTable(2, num_dims=4)
    table.add(0, HunYuanVL("hunyuan_vl", image_token_id=PAGE_IMAGE, spatial_merge_size=2, num_dims=4), [1, 2])
    return table


@given(ids=page_prompts())
def test_unlimited_ocr_page_positions_are_four_rows_no_table_holds(ids):
    # vLLM's own rule: (token offset in its page, page, page count, -(page's prompt tokens) - 1), delta 0
    positions, delta = _page_positions(ids)
    np.testing.assert_array_equal(positions, prompt_page_positions(ids, SPARSE).numpy())
    assert positions.shape == (4, len(ids)) and positions.dtype == np.int64 and delta == 0
    assert (positions[3] < 0).all()  # the sign DASH reads a prompt position by
    assert (positions[0][np.array(ids) == PAGE] == 0).all()  # the offset restarts at each <PAGE>
    # no table holds them: tables take positions >= 0 (3 rows: the last three; 4 rows: HunYuan-VL's)
    with pytest.raises(MRopeError, match="positions must lie in"):
        PositionTable(2).add_positions(0, positions[1:], delta)
    with pytest.raises(MRopeError, match="positions must lie in"):
        _hunyuan_rows_table().add_positions(1, positions, delta)


def test_unlimited_ocr_first_row_is_no_token_index():
    # text, two pages, text: the first row restarts at each page, and text after the last page goes on
    # from the text before the first; a 4-row table's first row is the index, so even the sign of the
    # fourth row flipped is refused
    ids = [1000, 1001, PAGE, PAGE_IMAGE, PAGE_IMAGE, PAGE_IMAGE, 1002, PAGE, PAGE_IMAGE, PAGE_IMAGE, 1003]
    positions, delta = _page_positions(ids)
    expected = [
        [0, 1, 0, 1, 2, 3, 4, 0, 1, 2, 2],
        [0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 0],
        [2] * 11,
        [-3, -3, -6, -6, -6, -6, -6, -4, -4, -4, -3],
    ]
    np.testing.assert_array_equal(positions, expected)
    flipped = positions.copy()
    flipped[3] *= -1
    with pytest.raises(MRopeError, match="the index rows must hold each token's index"):
        _hunyuan_rows_table().add_positions(1, flipped, delta)


def test_unlimited_ocr_is_left_to_vllm_naming_its_rows():
    config = _unlimited_ocr2_config()
    assert mrope_num_dims(config) == 4  # vLLM's own count (len(mrope_section)), what its runners read
    model_config = SimpleNamespace(hf_config=config, mrope_num_dims=mrope_num_dims(config))
    reason = vllm_path_reason(model_config, pruning=False)
    assert reason.startswith("the model has 4 M-RoPE position rows (Unlimited-OCR-2's DASH page positions")
    assert "serves 3 (t, h, w)" in reason
    with pytest.raises(MRopeError, match="unsupported model_type 'unlimited-ocr'"):
        mrope.from_config(config)
