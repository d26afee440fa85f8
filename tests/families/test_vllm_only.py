"""The families whose only peer is vLLM (Sequential, Keye, BailingMoeV3-VL, Isaac, Alpamayo 2 Super): config
reading and refused inputs. Their positions are compared with vLLM's own code in
tests/integrations/vllm/test_vllm_positions.py (vLLM 0.32) and tests/integrations/vllm034/test_models_034.py
(Alpamayo 2 Super, MiniCPM-OCR: vLLM 0.34)."""

import numpy as np
import pytest

import mrope
from mrope import MRopeError

KEYE = {
    "model_type": "Keye",  # remote code: the architecture names the family
    "architectures": ["KeyeVL1_5ForConditionalGeneration"],
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"spatial_merge_size": 2},
}
BAILING = {**KEYE, "model_type": "bailing_moe_v3_vl", "architectures": None}


@pytest.mark.parametrize(
    "config",
    [
        {"model_type": "minicpmv4_6"},
        {"model_type": "minicpm_ocr", "image_token_id": 151655, "downsample_mode": "4x"},
        {"model_type": "qwen3_asr", "thinker_config": {"model_type": "qwen3_asr_thinker"}},
    ],
)
def test_sequential_positions_every_token_in_order(config):
    family = mrope.from_config(config)
    positions, delta = family.positions(np.array([5, 151655, 151655, 9]))
    np.testing.assert_array_equal(positions, np.broadcast_to(np.arange(4), (3, 4)))
    assert delta == 0
    with pytest.raises(MRopeError, match="positions every token in order .* takes no image_grid_thw"):
        family.positions([1, 2], image_grid_thw=[[1, 2, 2]])
    with pytest.raises(MRopeError, match="takes no image_offsets"):
        family.positions([1, 2], image_offsets=[0])


def test_keye_is_found_by_architecture_and_names_a_missing_setting():
    family = mrope.from_config(KEYE)
    assert family.model_type == "keye_vl1_5" and family.video_frames_in_prompt
    missing = {k: v for k, v in KEYE.items() if k != "video_token_id"}
    with pytest.raises(MRopeError, match="keye_vl1_5 needs the setting 'video_token_id'"):
        mrope.from_config(missing)
    with pytest.raises(MRopeError, match="unsupported model_type 'Keye'"):
        mrope.from_config({**KEYE, "architectures": ["SomethingElse"]})


def test_keye_is_qwen3_vls_rule_with_adjacent_frames():
    # Keye-VL's video placeholders are one run: each frame still its own block, as Qwen3-VL's frames
    keye = mrope.from_config(KEYE)
    qwen3 = mrope.families.Qwen3VL("qwen3_vl", **keye.settings)
    ids = [1] + [151656] * 6 + [2, 151655, 151655, 3]
    grids = {"video_grid_thw": [[3, 2, 4]], "image_grid_thw": [[1, 2, 4]]}
    expected, expected_delta = qwen3.positions(ids, **grids)
    positions, delta = keye.positions(ids, **grids)
    np.testing.assert_array_equal(positions, expected)
    assert delta == expected_delta


def test_bailing_refuses_videos_and_images_of_several_frames():
    family = mrope.from_config(BAILING)
    with pytest.raises(MRopeError, match="bailing_moe_v3_vl has no video rule"):
        family.positions([151656] * 4, video_grid_thw=[[1, 4, 4]])
    with pytest.raises(MRopeError, match=r"image_grid_thw\[0\] = \(2, 2, 2\): .* has T = 1"):
        family.positions([151655] * 2, image_grid_thw=[[2, 2, 2]])


def test_isaac_reads_its_merge_from_the_pixel_shuffle_and_names_the_missing_token_id():
    config = {"model_type": "isaac", "vision_config": {"pixel_shuffle_scale_factor": 2}}
    with pytest.raises(MRopeError, match="isaac needs the setting 'image_token_id'"):
        mrope.from_config(config)
    family = mrope.from_config(config, image_token_id=151655)
    assert family.spatial_merge_size == 2
    with pytest.raises(MRopeError, match="isaac has no video rule"):
        family.positions([151656] * 4, video_grid_thw=[[1, 4, 4]])


def test_isaac_rows_of_a_batch_are_placed_as_their_prompts():
    # the batch path (every row scanned at once) against the one-prompt path, row by row
    family = mrope.from_config(
        {"model_type": "isaac", "vision_config": {"pixel_shuffle_scale_factor": 2}}, image_token_id=9
    )
    rows = [[1, 9, 9, 9, 9, 2, 9, 9, 3, 4], [9, 9, 5, 6, 7, 9, 9, 9, 9, 8]]
    grids = [[[1, 4, 4], [1, 2, 4]], [[1, 2, 4], [1, 4, 4]]]
    config = {**family.config, "image_token_id": 9}
    positions, deltas = mrope.get_rope_index(
        config, np.array(rows), image_grid_thw=np.concatenate(grids), attention_mask=np.ones((2, 10))
    )
    for r in range(2):
        expected, delta = family.positions(rows[r], image_grid_thw=grids[r])
        np.testing.assert_array_equal(positions[:, r], expected)
        assert int(deltas[r, 0]) == delta


# Alpamayo 2 Super's checkpoint config: a Qwen3-VL config wrapped in vlm_config
ALPAMAYO_VLM = {
    "model_type": "qwen3_vl",
    "image_token_id": 7,
    "video_token_id": 8,
    "vision_start_token_id": 5,
    "vision_end_token_id": 6,
    "vision_config": {"spatial_merge_size": 2},
    "text_config": {"model_type": "qwen3_vl_text", "rope_parameters": {"mrope_section": [24, 20, 20]}},
}


def test_alpamayo_reads_the_wrapped_config_as_vllms_config_class():
    # the ids and sub-configs from vlm_config; an id at the top level wins, a sub-config in vlm_config wins
    raw = {"model_type": "alpamayo2_super", "vlm_config": ALPAMAYO_VLM, "traj_ids": {"history_id0": 3}}
    family = mrope.from_config(raw)
    assert type(family) is mrope.families.Alpamayo2Super
    assert family.settings == {"image_token_id": 7, "video_token_id": 8, "spatial_merge_size": 2}
    assert family.config["text_config"] == ALPAMAYO_VLM["text_config"]
    assert family.prompt_markers()["vision_start_token_id"] == 5
    assert family.rotary_layout == "interleaved" and family.video_frames_in_prompt
    top = {**raw, "image_token_id": 9, "vision_config": {"spatial_merge_size": 4}}
    assert mrope.from_config(top).settings == {
        "image_token_id": 9,
        "video_token_id": 8,
        "spatial_merge_size": 2,
    }
    # the config vLLM hands over (its class's to_dict()): the fields already at the top level too
    exposed = {**raw, **{k: v for k, v in ALPAMAYO_VLM.items() if k != "model_type"}}
    assert mrope.from_config(exposed).settings == family.settings
    with pytest.raises(MRopeError, match="alpamayo2_super needs the setting 'image_token_id'"):
        mrope.from_config({"model_type": "alpamayo2_super", "vlm_config": {"video_token_id": 8}})


def test_alpamayo_is_qwen3_vls_rule():
    family = mrope.from_config({"model_type": "alpamayo2_super", "vlm_config": ALPAMAYO_VLM})
    qwen3 = mrope.families.Qwen3VL("qwen3_vl", **family.settings)
    ids = [1, 5, 7, 7, 7, 7, 6, 2, 5, 8, 8, 6, 3, 5, 8, 8, 6, 4]
    grids = {"image_grid_thw": [[1, 4, 4]], "video_grid_thw": [[2, 2, 4]]}
    expected, expected_delta = qwen3.positions(ids, **grids)
    positions, delta = family.positions(ids, **grids)
    np.testing.assert_array_equal(positions, expected)
    assert delta == expected_delta
