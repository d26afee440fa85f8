"""A rule shared by families whose images are one frame each (BailingMoeV3-VL, OpenPangu-VL): an
image grid with T != 1 is refused, as vLLM 0.32 refuses it (an assertion there)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from ._base import Family
from .inputs import Seconds


class OneFrameImages(Family):
    """Mixin (before the family's rule class): images of T = 1 only."""

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
