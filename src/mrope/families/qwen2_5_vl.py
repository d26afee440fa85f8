"""Qwen2.5-VL: Qwen2-VL's rule, with video time scaled by ``second_per_grid_ts * tokens_per_second``.

The product and the truncation are computed in float32 (transformers, SGLang) or, with
``video_time="float64"``, in float64 as vLLM does (:data:`mrope.core.place.VIDEO_TIMES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.place import time_interval
from .qwen2_vl import Qwen2VL


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen2_5_VL(Qwen2VL):
    model_types = ("qwen2_5_vl",)

    tokens_per_second: int | float = 2
    uses_second_per_grid_ts = True

    def video_interval(self, second_per_grid_ts: np.ndarray | None, videos: np.ndarray) -> np.ndarray | float:
        """``tokens_per_second * second_per_grid_ts`` (1 second when not given), held in the family's
        ``video_time`` dtype: rounded to float32 as transformers and SGLang do, or float64 as vLLM does
        (:meth:`Family.check_second_per_grid_ts` bounds each video's last time index)."""
        if len(videos) == 0:
            return 1.0
        seconds = np.ones(len(videos)) if second_per_grid_ts is None else second_per_grid_ts
        return time_interval(self.tokens_per_second * seconds, self.video_time)

    @property
    def time_rate(self) -> float:
        return self.tokens_per_second
