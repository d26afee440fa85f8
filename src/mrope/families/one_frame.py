"""Rules shared by families whose images are one frame each: an image grid with T != 1 is refused, as
vLLM 0.32 refuses it (an assertion there); :class:`ImagesOnly` refuses videos too."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from ._base import Family
from .inputs import Seconds


class OneFrameImages(Family):
    """Mixin (before the family's rule class): images of T = 1 only (OpenPangu-VL)."""

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        images, videos, seconds = super().check_vision_inputs(
            image_grid_thw, video_grid_thw, second_per_grid_ts, length
        )
        if len(images) and (images[:, 0] != 1).any():
            i = int(np.flatnonzero(images[:, 0] != 1)[0])
            raise MRopeError(
                f"image_grid_thw[{i}] = {tuple(images[i].tolist())}: a {self.model_type} image has T = 1"
            )
        return images, videos, seconds


class ImagesOnly(OneFrameImages):
    """Mixin: images of T = 1 and no videos (BailingMoeV3-VL, Isaac: vLLM has no video rule)."""

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        checked = super().check_vision_inputs(image_grid_thw, video_grid_thw, second_per_grid_ts, length)
        if len(checked[1]):
            raise MRopeError(f"{self.model_type} has no video rule: video_grid_thw must be empty")
        return checked
