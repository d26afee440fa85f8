"""Ernie-4.5-VL (Qwen2-VL's rule, video T merged by temporal_merge_size) against transformers and SGLang.

SGLang reads the original Baidu layout (video tokens are the image token between the video markers);
:func:`peers.sglang_rope_index` rewrites the ids to it.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import check_against_sglang, check_against_transformers, require_sglang, vision_prompts  # noqa: E402

import mrope  # noqa: E402
from peers import transformers_config  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FAMILY = mrope.from_config(transformers_config("ernie4_5_vl_moe"))
EVEN_T = st.sampled_from([2, 4, 6, 8])


@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(data, left):
    prompt = data.draw(vision_prompts(FAMILY, "ernie", video_t=EVEN_T))
    check_against_transformers("ernie4_5_vl_moe", prompt, left=left)


@SETTINGS
@given(data=st.data())
def test_matches_sglang(data):
    require_sglang()
    check_against_sglang("ernie4_5_vl_moe", data.draw(vision_prompts(FAMILY, "ernie", video_t=EVEN_T)))


def test_settings_and_errors():
    assert FAMILY.temporal_merge_size == 2 and FAMILY.video_token_id == 103367
    ids = [5, 101306] + [103367] * 8 + [101307]
    positions, delta = FAMILY.positions(ids, video_grid_thw=[[4, 4, 4]])  # T 4 -> 2 temporal steps
    assert positions[0, 2:10].tolist() == [2] * 4 + [3] * 4 and delta == 4 - 11 + 1
    with pytest.raises(mrope.MRopeError, match=r"T=3 is not divisible by temporal_merge_size 2"):
        FAMILY.positions(ids, video_grid_thw=[[3, 4, 4]])
    with pytest.raises(mrope.MRopeError, match="8 video placeholder tokens"):
        FAMILY.positions(ids, video_grid_thw=[[2, 4, 4]])
