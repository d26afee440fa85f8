"""Ernie-4.5-VL (``ernie4_5_vl_moe``): Qwen2-VL's rule, video time merged by ``temporal_merge_size``.

A video of grid (T, H, W) has ``T / temporal_merge_size`` temporal steps after merging, with time index
``k`` (not scaled); images keep their T. The grid's T must be divisible by ``temporal_merge_size``
(the processor pads frames to make it so).
"""

from __future__ import annotations

import numpy as np

from .._errors import MRopeError
from .qwen2_vl import Qwen2VL


class Ernie4_5_VL(Qwen2VL):
    model_types = ("ernie4_5_vl_moe",)
    settings = {**Qwen2VL.settings, "temporal_merge_size": None}
    rotary_layout = "ernie"
    rotary_is_neox_style = False

    def video_items(
        self, videos: np.ndarray, second_per_grid_ts: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | float]:
        """Qwen2-VL's video items after the temporal merge: T / temporal_merge_size frames."""
        if len(videos) == 0:
            return super().video_items(videos, second_per_grid_ts)
        merge = self.temporal_merge_size
        bad = np.flatnonzero(videos[:, 0] % merge != 0)
        if bad.size:
            i = int(bad[0])
            raise MRopeError(
                f"video_grid_thw[{i}] = {tuple(int(g) for g in videos[i])}: T={int(videos[i, 0])} is "
                f"not divisible by temporal_merge_size {merge}"
            )
        merged = videos.copy()
        merged[:, 0] //= merge
        return super().video_items(merged, second_per_grid_ts)
