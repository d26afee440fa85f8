"""Keye-VL and Keye-VL-1.5: Qwen3-VL's rule, each video frame its own block (T = 1).

Keye-VL's frames are adjacent (the video's placeholders are one run); Keye-VL-1.5 writes a frame
token and the frame's timestamp before each frame, and its frames may differ in size (slow and fast
frames: one ``video_grid_thw`` row per run of equal frames). Text after a frame resumes at
``max(frame) + 1`` in both. Their configs are remote code: the family is found by architecture too.
"""

from __future__ import annotations

from .qwen3_vl import Qwen3VL


class Keye(Qwen3VL):
    model_types = ("keye", "keye_vl1_5")
    architectures = {
        "KeyeForConditionalGeneration": "keye",
        "KeyeVL1_5ForConditionalGeneration": "keye_vl1_5",
    }
    rotary_layout = "chunked"
    default_mrope_sections = {}
    prompt_layout = None  # (remote-code processors: not laid out by mrope.prompts)
