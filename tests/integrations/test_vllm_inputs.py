"""``inputs_from_mm_features`` without vLLM: the feature objects faked as vLLM lays them out (a
``modality``, an ``mm_position`` with its ``offset``, ``data`` mapping field names to elements whose
``data`` is the item's tensor). Grids are read as the core reads them: integers only (issue 20)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import mrope
from mrope import MRopeError
from mrope.families import PromptItem
from mrope.integrations.vllm.features import VLLM_SETTINGS, admission_inputs, inputs_from_mm_features

CONFIG = {
    "model_type": "qwen2_5_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
}


def feature(modality: str, offset: int, **data) -> SimpleNamespace:
    return SimpleNamespace(
        modality=modality,
        mm_position=SimpleNamespace(offset=offset, length=0, is_embed=None),
        data={name: SimpleNamespace(data=value) for name, value in data.items()},
    )


@pytest.fixture(scope="module")
def family():
    return mrope.from_config(CONFIG, **VLLM_SETTINGS)


def test_integer_grids_are_read(family):
    got = inputs_from_mm_features(
        family,
        [
            feature("video", 9, video_grid_thw=np.array([2, 4, 4], dtype=np.int32), second_per_grid_ts=0.5),
            feature("image", 2, image_grid_thw=[1, 4, 6]),
        ],
    )
    np.testing.assert_array_equal(got["image_grid_thw"], [[1, 4, 6]])
    np.testing.assert_array_equal(got["video_grid_thw"], [[2, 4, 4]])
    assert got["image_offsets"] == [2] and got["video_offsets"] == [9]
    assert got["image_grid_thw"].dtype == np.int64


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        (np.array([1.7, 4.0, 4.0], dtype=np.float32), r"must hold integers, got dtype float32"),
        ([1.0, 4.0, 4.0], r"must hold integers, got dtype float64"),
        (np.array([True, True, True]), r"must hold integers, got dtype bool"),
        ([1, 1 << 64, 4], r"at offset 3's image_grid_thw\[1\] = 18446744073709551616 does not fit"),
        ([1, 4], r"the feature at offset 3's image_grid_thw must be \(T, H, W\), got \[1, 4\]"),
        ([[1, 4, 4]], r"the feature at offset 3's image_grid_thw must be 1-D"),
    ],
)
def test_grids_that_are_not_three_integers_are_refused(family, grid, match):
    """A float grid was truncated (``[1.7, 4, 4]`` read as ``[1, 4, 4]``) where the core refuses it."""
    with pytest.raises(MRopeError, match=match):
        inputs_from_mm_features(family, [feature("image", 3, image_grid_thw=grid)])


def test_torch_float_grids_are_refused(family):
    torch = pytest.importorskip("torch")
    with pytest.raises(
        MRopeError, match=r"the feature at offset 0's video_grid_thw must hold integers, got dtype float32"
    ):
        inputs_from_mm_features(family, [feature("video", 0, video_grid_thw=torch.tensor([2.0, 4.0, 4.0]))])
    got = inputs_from_mm_features(family, [feature("video", 0, video_grid_thw=torch.tensor([2, 4, 4]))])
    np.testing.assert_array_equal(got["video_grid_thw"], [[2, 4, 4]])


KEYE = {
    "architectures": ["KeyeVL1_5ForConditionalGeneration"],
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"spatial_merge_size": 2},
}
VIDEO, FRAME = 151656, 151657


def video_feature(offset: int, ids: list[int], grids: list[list[int]], is_embed: bool) -> SimpleNamespace:
    """A video feature over ``ids[offset:]`` (to the end), with ``is_embed`` marking the video tokens."""
    embed = [t == VIDEO for t in ids[offset:]] if is_embed else None
    return SimpleNamespace(
        modality="video",
        mm_position=SimpleNamespace(offset=offset, length=len(ids) - offset, is_embed=embed),
        data={"video_grid_thw": SimpleNamespace(data=np.array(grids))},
    )


def test_a_video_of_several_grid_rows_is_a_video_per_row():
    # Keye-VL-1.5: one row per frame (frames differ in size), each after a frame token and timestamp
    family = mrope.from_config(KEYE, **VLLM_SETTINGS)
    grids = [[1, 4, 4], [1, 2, 4], [1, 4, 2]]
    ids = [1, 2]
    for _, h, w in grids:
        ids += [FRAME, 7] + [VIDEO] * (h * w // 4)
    got = inputs_from_mm_features(family, [video_feature(2, ids, grids, is_embed=True)])
    np.testing.assert_array_equal(got["video_grid_thw"], grids)
    pads = np.flatnonzero(np.array(ids) == VIDEO)
    first_pads = pads[np.r_[True, np.diff(pads) > 1]]
    assert got["video_offsets"] == [2, *first_pads[1:].tolist()]
    np.testing.assert_array_equal(got["frame_offsets"], first_pads)
    expected = family.positions(ids, video_grid_thw=grids)  # mrope finding the frames itself
    positions, delta = family.positions(ids, **got)
    np.testing.assert_array_equal(positions, expected[0])
    assert delta == expected[1]


def test_adjacent_frames_are_taken_from_the_offset():
    # Keye-VL: the range holds the frames' tokens only (no is_embed): each frame follows the one before
    family = mrope.from_config({**KEYE, "architectures": ["KeyeForConditionalGeneration"]}, **VLLM_SETTINGS)
    ids = [1, 2] + [VIDEO] * 6
    got = inputs_from_mm_features(family, [video_feature(2, ids, [3, 2, 4], is_embed=False)])
    np.testing.assert_array_equal(got["frame_offsets"], [2, 4, 6])
    expected = family.positions(ids, video_grid_thw=[[3, 2, 4]])
    np.testing.assert_array_equal(family.positions(ids, **got)[0], expected[0])


def test_items_of_a_family_that_positions_every_token_in_order_give_no_inputs():
    family = mrope.from_config({"model_type": "minicpmv4_6"}, **VLLM_SETTINGS)
    assert inputs_from_mm_features(family, [feature("image", 3, tgt_sizes=[4, 4])]) == {}


def _video_prompt(family) -> tuple[list[int], list[SimpleNamespace]]:
    """Text, an image of 2 x 3 merged tokens, text, a video of 2 frames of 2 x 2, text."""
    image, video = family.image_token_id, family.video_token_id
    ids = [1, 2] + [image] * 6 + [3] + [video] * 8 + [4, 5]
    features = [
        feature("video", 9, video_grid_thw=np.array([2, 4, 4]), second_per_grid_ts=np.float32(0.7)),
        feature("image", 2, image_grid_thw=np.array([1, 4, 6])),
    ]
    return ids, features


def test_admission_reads_items_for_a_family_with_a_rule_on_items(family):
    ids, features = _video_prompt(family)
    got = admission_inputs(family, features)
    assert list(got) == ["items"]
    assert got["items"] == [
        PromptItem("image", 2, [1, 4, 6]),
        PromptItem("video", 9, [2, 4, 4], 0.699999988079071),
    ]
    expected = family.positions(ids, **inputs_from_mm_features(family, features))
    positions, delta = family.positions(ids, **got)
    np.testing.assert_array_equal(positions, expected[0])
    assert delta == expected[1]


def test_admission_reads_arrays_for_other_families():
    family = mrope.from_config(
        {**CONFIG, "model_type": "ernie4_5_vl_moe", "temporal_merge_size": 2}, **VLLM_SETTINGS
    )
    assert not family.rule_on_items
    ids, features = _video_prompt(family)
    features[0].data.pop("second_per_grid_ts")
    got = admission_inputs(family, features)
    assert "items" not in got and got["video_offsets"] == [9]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (feature("video", 9, video_grid_thw=[2, 4, 4.0]), r"the feature at offset 9's video_grid_thw"),
        (feature("audio", 9, audio_features=[1]), r"qwen2_5_vl has no M-RoPE rule for a 'audio' feature"),
        (feature("video", 9), r"the feature at offset 9 has no video_grid_thw"),
    ],
)
def test_admission_refuses_what_the_array_path_refuses(family, bad, match):
    for read in (admission_inputs, inputs_from_mm_features):
        with pytest.raises(MRopeError, match=match):
            read(family, [bad])
