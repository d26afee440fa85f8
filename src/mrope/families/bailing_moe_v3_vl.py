"""BailingMoeV3-VL: Qwen2-VL's rule for images of one frame; it has no video rule (vLLM 0.32 refuses
videos)."""

from __future__ import annotations

from .one_frame import ImagesOnly
from .qwen2_vl import Qwen2VL


class BailingMoeV3VL(ImagesOnly, Qwen2VL):
    model_types = ("bailing_moe_v3_vl",)
    default_mrope_sections = {}
    prompt_layout = None  # (not laid out by mrope.prompts)
