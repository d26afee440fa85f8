"""Ernie-4.5-VL (``ernie4_5_vl_moe``): Qwen2-VL's rule, video time merged by ``temporal_merge_size``.

A video of grid (T, H, W) has ``T / temporal_merge_size`` temporal steps after merging, with time index
``k`` (not scaled); images keep their T. The grid's T must be divisible by ``temporal_merge_size``
(the processor pads frames to make it so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .inputs import Seconds
from .layout import Draft, Piece, PromptLayout
from .qwen2_vl import Qwen2VL


class ErnieLayout(PromptLayout):
    """Ernie-4.5-VL's: an image ``image_start, image pads, image_end``; a video ``video_start, video
    pads * (T / temporal_merge_size * H' * W'), video_end``."""

    name = "ernie"
    image_marks = ("image_start_token_id", "image_end_token_id")

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        pads = grid[0] // draft.family.video_temporal_merge * (grid[1] * grid[2] // draft.merge**2)
        video = draft.settings["video_token_id"]
        return Piece(runs=draft.block(video, pads, "video_start_token_id", "video_end_token_id"))


@dataclass(eq=False, repr=False, kw_only=True)
class Ernie4_5_VL(Qwen2VL):
    model_types = ("ernie4_5_vl_moe",)
    rotary_layout = "ernie"
    rotary_is_neox_style = False
    default_mrope_sections = {"ernie4_5_vl_moe_text": (22, 22, 20)}
    prompt_layout = ErnieLayout()
    default_markers = {
        "image_start_token_id": 101304,
        "image_end_token_id": 101305,
        "video_start_token_id": 101306,
        "video_end_token_id": 101307,
    }

    temporal_merge_size: int

    def video_items(
        self, videos: np.ndarray, second_per_grid_ts: Seconds | None
    ) -> tuple[np.ndarray, np.ndarray | float, int]:
        """Qwen2-VL's video items after the temporal merge: T / temporal_merge_size frames."""
        if len(videos) == 0:
            return super().video_items(videos, second_per_grid_ts)
        merged = videos.copy()  # T is divisible (mrope.families._grids.check_grids)
        merged[:, 0] //= self.temporal_merge_size
        return super().video_items(merged, second_per_grid_ts)

    @property
    def video_temporal_merge(self) -> int:
        return self.temporal_merge_size
