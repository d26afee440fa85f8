"""Qwen2.5-VL: Qwen2-VL's rule, with video time scaled by ``second_per_grid_ts * tokens_per_second``."""

from __future__ import annotations

import numpy as np

from .qwen2_vl import Qwen2VL


class Qwen2_5_VL(Qwen2VL):
    model_types = ("qwen2_5_vl",)
    settings = {**Qwen2VL.settings, "tokens_per_second": 2}
    uses_second_per_grid_ts = True

    def video_interval(self, second_per_grid_ts: np.ndarray | None, num_videos: int) -> np.ndarray:
        """``tokens_per_second * second_per_grid_ts`` rounded to float32 (1 second when not given)."""
        seconds = np.ones(num_videos) if second_per_grid_ts is None else second_per_grid_ts
        return (self.tokens_per_second * seconds).astype(np.float32)
