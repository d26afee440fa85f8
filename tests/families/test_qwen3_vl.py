"""Qwen3-VL and Qwen3-VL-MoE positions, every element and delta: against transformers 5.24
(compat="transformers") and SGLang 0.5.23 (compat="vllm"). A video of T frames is T blocks, each
after its own timestamp text."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from strategies import EDGE_LAYOUTS, edge_layout, prompts

pytestmark = pytest.mark.parametrize("peer", ["qwen3_vl", "qwen3_vl_moe"], indirect=True)


@given(data=st.data())
def test_matches_transformers(peer, data):
    peer.check_transformers(data.draw(prompts(peer.family("transformers")), label="prompt"))


@given(data=st.data())
def test_matches_sglang(peer, data):
    peer.check_sglang(data.draw(prompts(peer.family("vllm")), label="prompt"))


@pytest.mark.parametrize("layout", EDGE_LAYOUTS)
def test_edge_layouts_match_both_peers(peer, layout):
    prompt = edge_layout(peer.family("vllm"), layout)
    peer.check_transformers(prompt)
    peer.check_sglang(prompt)


@given(data=st.data())
def test_conventions_agree_when_every_block_is_one_frame(peer, data):
    # every block has T = 1, so max(block) + 1 == base + max(H', W'): the peers agree
    prompt = data.draw(prompts(peer.family("vllm")), label="prompt")
    vllm = peer.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
    tf = peer.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
    np.testing.assert_array_equal(vllm[0], tf[0], err_msg=f"{peer.name}: {prompt.describe()}")
    assert vllm[1] == tf[1], f"{peer.name}: deltas {vllm[1]} != {tf[1]}: {prompt.describe()}"
