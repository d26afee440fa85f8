"""OpenPangu-VL: Qwen3-VL's rule, each video frame its own block, images of one frame.

vLLM 0.32's processor writes a video as its frames' pads joined by ``vision_end, vision_start`` (two
text tokens: frame ``k + 1`` starts ``max(H', W') + 2`` after frame ``k``, the stride vLLM's code
steps by), inside the prompt's outer vision markers. Its config is remote code: the family is found by
architecture too.
"""

from __future__ import annotations

from .one_frame import OneFrameImages
from .qwen3_vl import Qwen3VL


class OpenPanguVL(OneFrameImages, Qwen3VL):
    model_types = ("openpangu_vl",)
    architectures = {"OpenPanguVLForConditionalGeneration": "openpangu_vl"}
    default_mrope_sections = {}
    prompt_layout = None  # (a remote-code processor: not laid out by mrope.prompts)
    rotary_layout = "chunked"  # (interleaved where its rope parameters set mrope_interleaved: not read)
