"""BailingMoeV3-VL: Qwen2-VL's rule for images of one frame; it has no video rule (vLLM 0.32 refuses
videos)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from .inputs import Seconds
from .one_frame import OneFrameImages
from .qwen2_vl import Qwen2VL


class BailingMoeV3VL(OneFrameImages, Qwen2VL):
    model_types = ("bailing_moe_v3_vl",)

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """Qwen2-VL's checks, images of T = 1, and no videos."""
        checked = super().check_vision_inputs(image_grid_thw, video_grid_thw, second_per_grid_ts, length)
        if len(checked[1]):
            raise MRopeError(f"{self.model_type} has no video rule: video_grid_thw must be empty")
        return checked
