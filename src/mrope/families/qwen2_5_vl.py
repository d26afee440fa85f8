"""Qwen2.5-VL: Qwen2-VL's rule, with video time scaled by ``second_per_grid_ts * tokens_per_second``.

The product and the truncation are computed in float32 (transformers, SGLang) or, with
``video_time="float64"``, in float64 as vLLM does (:data:`mrope.core.place.VIDEO_TIMES`).
"""

from __future__ import annotations

import numpy as np

from .._errors import MRopeError
from ..core.place import MAX_POSITION, time_interval
from .qwen2_vl import Qwen2VL


class Qwen2_5_VL(Qwen2VL):
    model_types = ("qwen2_5_vl",)
    settings = {**Qwen2VL.settings, "tokens_per_second": 2}
    uses_second_per_grid_ts = True

    def video_interval(self, second_per_grid_ts: np.ndarray | None, videos: np.ndarray) -> np.ndarray | float:
        """``tokens_per_second * second_per_grid_ts`` (1 second when not given), held in the family's
        ``video_time`` dtype: rounded to float32 as transformers and SGLang do, or float64 as vLLM does.

        Raises :class:`MRopeError` when a video's last time index would pass ``MAX_POSITION``."""
        if len(videos) == 0:
            return 1.0
        seconds = np.ones(len(videos)) if second_per_grid_ts is None else second_per_grid_ts
        interval = time_interval(self.tokens_per_second * seconds, self.video_time)
        for i, (frames, step) in enumerate(zip(videos[:, 0].tolist(), interval.tolist(), strict=True)):
            if (frames - 1) * step >= MAX_POSITION:
                raise MRopeError(
                    f"second_per_grid_ts[{i}] = {seconds[i]:g}: video {i}'s last frame (T = {frames}) "
                    f"would get time index {(frames - 1) * step:.3g}, past the largest position "
                    f"{MAX_POSITION}"
                )
        return interval
