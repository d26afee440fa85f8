"""Qwen3-VL, Qwen3-VL-MoE: each video frame is its own block, its time carried by timestamp text."""

from __future__ import annotations

from ..core import Blocks
from ._base import Family, split_frames


class Qwen3VL(Family):
    model_types = ("qwen3_vl", "qwen3_vl_moe")
    settings = {"image_token_id": None, "video_token_id": None, "spatial_merge_size": None}
    rotary_layout = "interleaved"

    def parse(self, ids, row_starts, row_lengths, images, videos, second_per_grid_ts) -> Blocks:
        frames, frame_of = split_frames(videos)
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
                    frames,
                    row_starts,
                    row_lengths,
                    what="video",
                    grid_name="video_grid_thw",
                    frame_of=frame_of,
                ),
            ]
        )
