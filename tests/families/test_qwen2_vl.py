"""Qwen2-VL positions, every element and delta: against transformers 5.24 (compat="transformers") and
SGLang 0.5.23 (compat="vllm")."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import EDGE_LAYOUTS, Video, build_prompt, edge_layout, prompts, text

pytestmark = pytest.mark.parametrize("peer", ["qwen2_vl"], indirect=True)


@given(data=st.data())
def test_matches_transformers(peer, data):
    peer.check_transformers(data.draw(prompts(peer.family("transformers")), label="prompt"))


@given(data=st.data())
def test_matches_sglang(peer, data):
    peer.check_sglang(data.draw(prompts(peer.family("vllm")), label="prompt"))


@given(data=st.data())
def test_blocks_without_markers_at_the_very_edges_match_transformers(peer, data):
    # transformers finds blocks by token type, so a block may be the prompt's first or last token
    peer.check_transformers(data.draw(prompts(peer.family("transformers"), markers=False), label="prompt"))


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_edge_layouts_match_both_peers(peer, layout):
    prompt = edge_layout(peer.family("vllm"), layout)
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)


def test_conventions_differ_after_a_long_video(peer):
    # T = 6 frames of 1 x 1: time reaches past the spatial extent, so where text resumes differs
    prompt = build_prompt(peer.family("vllm"), [text(2), Video(6, 1, 1), text(3)])
    vllm, _ = peer.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
    hf, _ = peer.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
    assert not np.array_equal(vllm, hf), f"{peer.name}: conventions should differ on {prompt.describe()}"
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)
