"""PaddleOCR-VL (Qwen2-VL's rule) against transformers, and against SGLang on images.

SGLang scales PaddleOCR-VL's time as Qwen2.5-VL does (``k * second_per_grid_ts * tokens_per_second``,
with ``second_per_grid_ts`` 0 for images) where transformers uses ``k``: they agree on images of T = 1
only (the processor's images). mrope follows transformers (README convention table).
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
FAMILY = mrope.from_config(transformers_config("paddleocr_vl"))


@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(data, left):
    check_against_transformers("paddleocr_vl", data.draw(vision_prompts(FAMILY, "qwen2")), left=left)


@SETTINGS
@given(data=st.data())
def test_matches_sglang_on_single_frame_images(data):
    require_sglang()
    prompt = data.draw(
        vision_prompts(FAMILY, "qwen2").filter(lambda p: not p.videos and all(g[0] == 1 for g in p.images))
    )
    check_against_sglang("paddleocr_vl", prompt)


def test_video_time_is_not_scaled():
    ids = [7, 101305] + [100296] * 12 + [101306, 8]
    positions, delta = FAMILY.positions(ids, video_grid_thw=[[3, 4, 4]])
    assert positions[0, 2:14].tolist() == [2] * 4 + [3] * 4 + [4] * 4
    with pytest.raises(mrope.MRopeError, match="does not scale video time"):
        FAMILY.positions(ids, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[2.0])
