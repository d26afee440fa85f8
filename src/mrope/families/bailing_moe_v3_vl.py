"""BailingMoeV3-VL: Qwen2-VL's rule for images; it has no video rule (vLLM 0.32 refuses videos)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from .inputs import Seconds
from .qwen2_vl import Qwen2VL


class BailingMoeV3VL(Qwen2VL):
    model_types = ("bailing_moe_v3_vl",)

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """Qwen2-VL's checks; no videos, and each image one frame (T = 1)."""
        images, videos, seconds = super().check_vision_inputs(
            image_grid_thw, video_grid_thw, second_per_grid_ts, length
        )
        if len(videos):
            raise MRopeError(f"{self.model_type} has no video rule: video_grid_thw must be empty")
        if len(images) and (images[:, 0] != 1).any():
            i = int(np.flatnonzero(images[:, 0] != 1)[0])
            raise MRopeError(
                f"image_grid_thw[{i}] = {tuple(images[i].tolist())}: a {self.model_type} image has T = 1"
            )
        return images, videos, seconds
