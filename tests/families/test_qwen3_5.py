"""Qwen3.5, Qwen3.5-MoE, Qwen4-Exp (Qwen3-VL's rule) against transformers and SGLang."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import check_against_sglang, check_against_transformers, vision_prompts  # noqa: E402

import mrope  # noqa: E402
from peers import transformers_config  # noqa: E402

TYPES = ["qwen3_5", "qwen3_5_moe", "qwen4_exp"]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("model_type", TYPES)
@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(model_type, data, left):
    family = mrope.from_config(transformers_config(model_type))
    check_against_transformers(model_type, data.draw(vision_prompts(family, "qwen3")), left=left)


@pytest.mark.parametrize("model_type", TYPES)
@SETTINGS
@given(data=st.data())
def test_matches_sglang(model_type, data):
    family = mrope.from_config(transformers_config(model_type))
    check_against_sglang(model_type, data.draw(vision_prompts(family, "qwen3")))


def test_family_and_errors():
    family = mrope.from_config(transformers_config("qwen3_5"))
    assert type(family).__name__ == "Qwen3_5" and family.image_token_id == 248056
    with pytest.raises(mrope.MRopeError, match="3 video placeholder tokens"):
        family.positions([1, 248053, 248057, 248057, 248057, 248054], video_grid_thw=[[1, 4, 4]])
