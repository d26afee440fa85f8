"""The families whose only peer is vLLM (Sequential, Keye, BailingMoeV3-VL, Isaac): config reading and refused
inputs. Their positions are compared with vLLM's own code in
tests/integrations/vllm/test_vllm_positions.py."""

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
