"""Qwen3-VL, Qwen3-VL-MoE: each video frame is its own block, its time carried by timestamp text.

Qwen2-VL's rule (:meth:`mrope.families.qwen2_vl.Qwen2VL.vision_blocks`) with ``video_frames_in_prompt``:
the frames are found in the prompt, or taken at ``frame_offsets``.
"""

from __future__ import annotations

from typing import ClassVar

from .qwen2_vl import Qwen2VL


class Qwen3VL(Qwen2VL):
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_vl", "qwen3_vl_moe")
    rotary_layout = "interleaved"
    default_mrope_sections = {"qwen3_vl_text": (24, 20, 20), "qwen3_vl_moe_text": (24, 20, 20)}
    prompt_layout = "frames"
    video_frames_in_prompt = True
