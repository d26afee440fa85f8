"""Ernie-4.5-VL (``ernie4_5_vl_moe``): Qwen2-VL's rule, video time merged by ``temporal_merge_size``.

A video of grid (T, H, W) has ``T / temporal_merge_size`` temporal steps after merging, with time index
``k`` (not scaled); images keep their T. The grid's T must be divisible by ``temporal_merge_size``
(the processor pads frames to make it so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .inputs import Seconds
from .qwen2_vl import Qwen2VL


@dataclass(eq=False, repr=False, kw_only=True)
class Ernie4_5_VL(Qwen2VL):
    model_types = ("ernie4_5_vl_moe",)
    rotary_layout = "ernie"
    rotary_is_neox_style = False
    default_mrope_sections = {"ernie4_5_vl_moe_text": (22, 22, 20)}
    prompt_layout = "ernie"
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
