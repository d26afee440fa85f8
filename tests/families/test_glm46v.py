"""GLM-4.6V, GLM-OCR (GLM-4.1V's rule) against transformers and SGLang."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import check_against_sglang, check_against_transformers, require_sglang, vision_prompts  # noqa: E402

import mrope  # noqa: E402
from peers import transformers_config  # noqa: E402

TYPES = ["glm46v", "glm_ocr"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def prompts(model_type):
    family = mrope.from_config(transformers_config(model_type))
    return vision_prompts(family, "glm")


@pytest.mark.parametrize("model_type", TYPES)
@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(model_type, data, left):
    check_against_transformers(model_type, data.draw(prompts(model_type)), left=left)


@pytest.mark.parametrize("model_type", TYPES)
@SETTINGS
@given(data=st.data())
def test_matches_sglang(model_type, data):
    require_sglang()
    check_against_sglang(model_type, data.draw(prompts(model_type)))
