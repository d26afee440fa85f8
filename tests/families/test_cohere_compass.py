"""Cohere Compass (Qwen3-VL's rule) against transformers (SGLang has no Cohere Compass)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import check_against_transformers, vision_prompts  # noqa: E402

import mrope  # noqa: E402
from peers import transformers_config  # noqa: E402

TYPES = ["cohere_compass"]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def prompts(model_type):
    family = mrope.from_config(transformers_config(model_type))
    return vision_prompts(family, "qwen3")


@pytest.mark.parametrize("model_type", TYPES)
@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(model_type, data, left):
    check_against_transformers(model_type, data.draw(prompts(model_type)), left=left)
