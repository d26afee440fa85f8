"""Every family against its peers, over the family table (``support.peers.FAMILY_SETUPS``): mrope's
``get_rope_index`` (compat="transformers") against transformers 5.24 on padded batches, and
``family.positions`` (compat="vllm") against SGLang 0.5.23 on single prompts, every element and delta;
then the cases where the families differ (hand-picked layouts, blocks without markers, the conventions,
the settings and errors of one family). The Omni audio cases are in ``test_omni.py``.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope.families import REGISTRY
from support.peers import FAMILY_SETUPS
from support.strategies import (
    EDGE_LAYOUTS,
    SECONDS,
    Prompt,
    Video,
    batches,
    build_prompt,
    edge_layout,
    prompts,
    text,
)


def setups(predicate) -> pytest.MarkDecorator:
    """Parametrize ``peer`` (indirect) over the table rows that ``predicate`` selects."""
    return pytest.mark.parametrize(
        "peer", [name for name, setup in FAMILY_SETUPS.items() if predicate(setup)], indirect=True
    )


def audio_in_video(peer, data) -> bool:
    """Omni: whether every video carries its audio (drawn); other families: False."""
    return peer.setup.omni and data.draw(st.booleans(), label="use_audio_in_video")


@setups(lambda s: True)
@given(data=st.data())
def test_padded_batches_match_transformers(peer, data):
    family = peer.family("transformers")
    batch = batches(
        family,
        max_images=3,
        max_videos=2,
        max_side=4,
        max_frames=5,
        max_image_frames=2,
        use_audio_in_video=audio_in_video(peer, data),
    )
    peer.check_transformers_batch(data.draw(batch, label="batch"))


@setups(lambda s: s.sglang == "all")
@given(data=st.data())
def test_prompts_match_sglang(peer, data):
    family = peer.family("vllm")
    prompt = prompts(
        family,
        max_image_frames=peer.setup.sglang_image_frames,
        use_audio_in_video=audio_in_video(peer, data),
    )
    peer.check_sglang(data.draw(prompt, label="prompt"))


@setups(lambda s: s.sglang == "images")
@given(data=st.data())
def test_single_frame_images_match_sglang(peer, data):
    # PaddleOCR-VL: SGLang scales time as Qwen2.5-VL does (second_per_grid_ts 0 for images), transformers
    # uses k; they agree on images of T = 1 only (the processor's images). mrope follows transformers.
    peer.check_sglang(data.draw(prompts(peer.family("vllm"), max_videos=0), label="prompt"))


@setups(lambda s: s.markers_optional)
@given(data=st.data())
def test_blocks_without_markers_at_the_very_edges_match_transformers(peer, data):
    # transformers finds blocks by token type, so a block may be the prompt's first or last token
    peer.check_transformers(data.draw(prompts(peer.family("transformers"), markers=False), label="prompt"))


@setups(lambda s: s.edge_layouts)
@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_edge_layouts_match_both_peers(peer, layout):
    prompt = edge_layout(peer.family("vllm"), layout)
    peer.check_transformers(prompt)
    if peer.setup.sglang == "all" or (peer.setup.sglang == "images" and not prompt.video_grid_thw):
        peer.check_sglang(prompt)


# -- the conventions ----------------------------------------------------------------------------------
@setups(lambda s: s.model_type == "qwen2_vl")
def test_conventions_differ_after_a_long_video(peer):
    # T = 6 frames of 1 x 1: time reaches past the spatial extent, so where text resumes differs
    prompt = build_prompt(peer.family("vllm"), [text(2), Video(6, 1, 1), text(3)])
    vllm, _ = peer.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
    hf, _ = peer.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
    assert not np.array_equal(vllm, hf), f"{peer.name}: conventions should differ on {prompt.describe()}"
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)


@setups(lambda s: getattr(REGISTRY[s.model_type].prompt_layout, "name", None) in ("frames", "glm"))
@given(data=st.data())
def test_conventions_agree_when_every_block_is_one_frame(peer, data):
    # a video is one block per frame and images have T = 1, so max(block) + 1 == base + max(H', W'):
    # the peers agree
    prompt = data.draw(prompts(peer.family("vllm")), label="prompt")
    vllm = peer.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
    tf = peer.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
    np.testing.assert_array_equal(vllm[0], tf[0], err_msg=f"{peer.name}: {prompt.describe()}")
    assert vllm[1] == tf[1], f"{peer.name}: deltas {vllm[1]} != {tf[1]}: {prompt.describe()}"


# -- Qwen2.5-VL: scaled video time -------------------------------------------------------------------
QWEN2_5_VL = setups(lambda s: s.model_type == "qwen2_5_vl")


@QWEN2_5_VL
@pytest.mark.parametrize("seconds", SECONDS)
def test_each_fractional_second_per_grid_ts_matches_both_peers(peer, seconds):
    # 6 frames reach k = 5, where float32 and float64 products of some values truncate differently
    prompt = build_prompt(
        peer.family("vllm"),
        [text(2), Video(6, 1, 2), text(2), Video(3, 2, 1), text(1)],
        [seconds, 2 * seconds],
    )
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)


@QWEN2_5_VL
def test_no_second_per_grid_ts_means_one_second(peer):
    parts = [text(2), Video(4, 1, 1), text(2)]
    with_none = build_prompt(peer.family("vllm"), parts)
    with_one = build_prompt(peer.family("vllm"), parts, [1.0])
    for compat in ("vllm", "transformers"):
        family = peer.family(compat)
        a, da = family.positions(with_none.input_ids, **with_none.kwargs())
        b, db = family.positions(with_one.input_ids, **with_one.kwargs())
        np.testing.assert_array_equal(a, b, err_msg=f"{peer.name}, compat={compat}: None vs [1.0]")
        assert da == db, f"{peer.name}, compat={compat}: delta {da} with None, {db} with [1.0]"
    peer.check_transformers(with_none)
    peer.check_sglang(with_none)


@pytest.mark.parametrize("peer", ["qwen2_5_vl"], indirect=True)
def test_readme_example_conventions(peer):
    """The README's example: 2 text tokens, a video of grid (16, 8, 8), 1 second per grid, then text.
    The peers put the next text (vision_end) at 7 (transformers 5.24) and 34 (SGLang) with
    tokens_per_second 2; mrope equals each peer under its convention."""
    prompt = build_prompt(peer.family("vllm"), [text(2), Video(16, 4, 4), text(3)], [1.0])
    assert prompt.video_grid_thw == [[16, 8, 8]]
    vision_end = 2 + 1 + 16 * 4 * 4  # text, vision_start, video pads
    hf, _ = peer.transformers([prompt.input_ids], prompt.kwargs())
    sg, _ = peer.sglang(prompt.input_ids, prompt.kwargs())
    # the documented values, checked on the peers themselves
    assert hf[:, 0, vision_end].tolist() == [7, 7, 7], f"transformers: {hf[:, 0, vision_end]}"
    assert sg[:, vision_end].tolist() == [34, 34, 34], f"SGLang: {sg[:, vision_end]}"
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)
    vllm, _ = peer.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
    tf, _ = peer.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
    assert not np.array_equal(vllm, tf), "compat='vllm' and 'transformers' must differ on the README example"


# -- one family's settings and errors ----------------------------------------------------------------
@pytest.mark.parametrize("peer", ["ernie4_5_vl_moe"], indirect=True)
def test_ernie_merges_video_time_and_names_bad_grids(peer):
    family = peer.family("vllm")
    assert family.temporal_merge_size == 2 and family.video_token_id == 103367
    ids = [5, 101306] + [103367] * 8 + [101307]
    positions, delta = family.positions(ids, video_grid_thw=[[4, 4, 4]])  # T 4 -> 2 temporal steps
    assert positions[0, 2:10].tolist() == [2] * 4 + [3] * 4 and delta == 4 - 11 + 1
    with pytest.raises(mrope.MRopeError, match=r"T=3 is not divisible by temporal_merge_size 2"):
        family.positions(ids, video_grid_thw=[[3, 4, 4]])
    with pytest.raises(mrope.MRopeError, match="8 video placeholder tokens"):
        family.positions(ids, video_grid_thw=[[2, 4, 4]])


@pytest.mark.parametrize("peer", ["paddleocr_vl"], indirect=True)
def test_paddleocr_video_time_is_not_scaled(peer):
    family = peer.family("vllm")
    ids = [7, 101305] + [100296] * 12 + [101306, 8]
    positions, _ = family.positions(ids, video_grid_thw=[[3, 4, 4]])
    assert positions[0, 2:14].tolist() == [2] * 4 + [3] * 4 + [4] * 4
    with pytest.raises(mrope.MRopeError, match="does not scale video time"):
        family.positions(ids, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[2.0])


@pytest.mark.parametrize("peer", ["qwen3_5"], indirect=True)
def test_qwen3_5_family_and_errors(peer):
    family = peer.family("vllm")
    assert type(family).__name__ == "Qwen3_5" and family.image_token_id == 248056
    with pytest.raises(mrope.MRopeError, match="3 video placeholder tokens"):
        family.positions([1, 248053, 248057, 248057, 248057, 248054], video_grid_thw=[[1, 4, 4]])


@pytest.mark.parametrize("peer", ["hy_v4_vl"], indirect=True)
def test_hy_v4_vl_newline_column_and_errors(peer):
    family = peer.family("vllm")
    video = family.video_token_id
    # transformers' docstring example: merged (2, 2, 2), each row 3 tokens (the newline), frames 3 apart
    ids = [5] + [video] * 12 + [6]
    positions, delta = family.positions(ids, video_grid_thw=[[2, 4, 4]])
    assert positions[:, 1:13].tolist() == [
        [1, 1, 1, 1, 1, 1, 4, 4, 4, 4, 4, 4],
        [1, 1, 1, 2, 2, 2, 4, 4, 4, 5, 5, 5],
        [1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6],
    ]
    assert positions[:, 13].tolist() == [7, 7, 7] and delta == 8 - 14
    peer.check_transformers(Prompt(ids, [], [[2, 4, 4]]))
    with pytest.raises(mrope.MRopeError, match=r"video 0 .* needs 12 placeholder tokens, found 11"):
        family.positions(ids[:-2] + [6], video_grid_thw=[[2, 4, 4]])  # 11 placeholders
    with pytest.raises(mrope.MRopeError, match=r"\(T \* H' \* \(W' \+ 1\).*more than the 14 tokens"):
        family.positions(ids, video_grid_thw=[[2, 4, 6]])  # 16 tokens (12 without the newlines)
    with pytest.raises(mrope.MRopeError, match="W=3 is not divisible by spatial_merge_size 2"):
        family.positions(ids, video_grid_thw=[[2, 4, 3]])
    with pytest.raises(mrope.MRopeError, match="image 0 .* image placeholder tokens"):
        family.positions(ids, image_grid_thw=[[1, 2, 2]])
    with pytest.raises(mrope.MRopeError, match="takes no image_offsets or video_offsets"):
        family.positions(ids, video_grid_thw=[[2, 4, 4]], video_offsets=[1])
    with pytest.raises(mrope.MRopeError, match="does not scale video time"):
        family.positions(ids, video_grid_thw=[[2, 4, 4]], second_per_grid_ts=[1.0])
    config = peer.config.to_dict()
    del config["video_token_id"]
    with pytest.raises(mrope.MRopeError, match="hy_v4_vl needs the setting 'video_token_id'"):
        mrope.from_config(config)
