"""Qwen2.5-VL positions, every element and delta: against transformers 5.24 (compat="transformers") and
SGLang 0.5.23 (compat="vllm"), with tokens_per_second 2 (the released checkpoints) and 4 (transformers'
class default), and random, fractional second_per_grid_ts given as float32 tensors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import EDGE_LAYOUTS, SECONDS, Video, build_prompt, edge_layout, prompts, text

BOTH = pytest.mark.parametrize("peer", ["qwen2_5_vl", "qwen2_5_vl-tps4"], indirect=True)
CHECKPOINT = pytest.mark.parametrize("peer", ["qwen2_5_vl"], indirect=True)


@BOTH
@given(data=st.data())
def test_matches_transformers(peer, data):
    peer.check_transformers(data.draw(prompts(peer.family("transformers")), label="prompt"))


@BOTH
@given(data=st.data())
def test_matches_sglang(peer, data):
    peer.check_sglang(data.draw(prompts(peer.family("vllm")), label="prompt"))


@BOTH
@given(data=st.data())
def test_blocks_without_markers_at_the_very_edges_match_transformers(peer, data):
    peer.check_transformers(data.draw(prompts(peer.family("transformers"), markers=False), label="prompt"))


@BOTH
@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_edge_layouts_match_both_peers(peer, layout):
    prompt = edge_layout(peer.family("vllm"), layout)
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)


@BOTH
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


@BOTH
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


@CHECKPOINT
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
