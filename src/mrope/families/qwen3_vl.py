"""Qwen3-VL, Qwen3-VL-MoE: each video frame is its own block, its time carried by timestamp text.

Qwen2-VL's rule (:meth:`mrope.families.qwen2_vl.Qwen2VL.vision_blocks`) with ``video_frames_in_prompt``:
the frames are found in the prompt, or taken at ``frame_offsets``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .layout import Draft, Piece, PromptLayout
from .qwen2_vl import Qwen2VL


class FramesLayout(PromptLayout):
    """Qwen3-VL's and its kin's: images as Qwen2-VL's; a video of T frames one ``<timestamp>
    vision_start, video pads * (H' * W'), vision_end`` per frame."""

    name = "frames"

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        plane = grid[1] * grid[2] // draft.merge**2
        frame = draft.block(
            draft.settings["video_token_id"], plane, "vision_start_token_id", "vision_end_token_id"
        )
        return Piece(frames=grid[0], frame=frame, stamps=stamps)


class Qwen3VL(Qwen2VL):
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_vl", "qwen3_vl_moe")
    rotary_layout = "interleaved"
    default_mrope_sections = {"qwen3_vl_text": (24, 20, 20), "qwen3_vl_moe_text": (24, 20, 20)}
    prompt_layout = FramesLayout()
    video_frames_in_prompt = True
