"""Qwen2-VL (and PaddleOCR-VL's rule): image and video blocks of placeholder tokens, time index k.

The Qwen-style families derive from this one and override only :meth:`Qwen2VL.video_blocks`
(how a video becomes blocks) or :meth:`Qwen2VL.video_interval` (its time scale).
"""

from __future__ import annotations

import numpy as np

from ..core import Blocks
from ._base import Family


class Qwen2VL(Family):
    model_types = ("qwen2_vl",)
    settings = {"image_token_id": None, "video_token_id": None, "spatial_merge_size": None}

    def parse(self, ids, row_starts, row_lengths, images, videos, second_per_grid_ts) -> Blocks:
        images = self.token_blocks(ids, self.image_token_id, images, row_starts, row_lengths, what="image")
        videos = self.video_blocks(ids, videos, second_per_grid_ts, row_starts, row_lengths)
        return Blocks.concat([images, videos])

    def video_blocks(
        self,
        ids: np.ndarray,
        videos: np.ndarray,
        second_per_grid_ts: np.ndarray | None,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
    ) -> Blocks:
        """Each video one block of its video placeholder tokens."""
        interval = self.video_interval(second_per_grid_ts, videos)
        return self.token_blocks(
            ids, self.video_token_id, videos, row_starts, row_lengths, what="video", interval=interval
        )

    def video_interval(self, second_per_grid_ts: np.ndarray | None, videos: np.ndarray) -> np.ndarray | float:
        """Temporal index step between a video's frames: 1 unless the family scales time."""
        return 1.0
