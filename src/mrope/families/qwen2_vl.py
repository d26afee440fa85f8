"""Qwen2-VL (and PaddleOCR-VL's rule): image and video blocks of placeholder tokens, time index k."""

from __future__ import annotations

import numpy as np

from ..core import Blocks
from ._base import Family


class Qwen2VL(Family):
    model_types = ("qwen2_vl",)
    settings = {"image_token_id": None, "video_token_id": None, "spatial_merge_size": None}

    def parse(self, ids, row_starts, row_lengths, images, videos, second_per_grid_ts) -> Blocks:
        return Blocks.concat(
            [
                self.vision_blocks(
                    (ids == self.image_token_id).nonzero()[0],
                    images,
                    row_starts,
                    row_lengths,
                    what="image",
                    grid_name="image_grid_thw",
                ),
                self.vision_blocks(
                    (ids == self.video_token_id).nonzero()[0],
                    videos,
                    row_starts,
                    row_lengths,
                    what="video",
                    grid_name="video_grid_thw",
                    interval=self.video_interval(second_per_grid_ts, videos),
                ),
            ]
        )

    def video_interval(self, second_per_grid_ts: np.ndarray | None, videos: np.ndarray) -> np.ndarray | float:
        """Temporal index step between a video's frames: 1 unless the family scales time."""
        return 1.0
