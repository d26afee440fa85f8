"""GLM-4.1V, GLM-4.5V: frames are image-token blocks between the video markers, one block per frame."""

from __future__ import annotations

import numpy as np

from ..core import Blocks
from ._base import Family, split_frames


class Glm4V(Family):
    model_types = ("glm4v", "glm4v_moe")
    settings = {
        "image_token_id": None,
        "video_start_token_id": None,
        "video_end_token_id": None,
        "spatial_merge_size": None,
    }

    @property
    def rotary_is_neox_style(self) -> bool:  # GLM-4.1V rotates GPT-J pairs, GLM-4.5V NeoX halves
        return self.model_type != "glm4v"

    def parse(self, ids, row_starts, row_lengths, images, videos, second_per_grid_ts) -> Blocks:
        placeholder = (ids == self.image_token_id).nonzero()[0]
        # inside a video: more video starts than ends so far in the row
        depth = np.cumsum(
            (ids == self.video_start_token_id).astype(np.int64) - (ids == self.video_end_token_id)
        )
        row_start = row_starts[row_starts.searchsorted(placeholder, side="right") - 1]
        depth_before_row = np.where(row_start > 0, depth[np.maximum(row_start - 1, 0)], 0)
        in_video = depth[placeholder] - depth_before_row > 0
        frames, frame_of = split_frames(videos)
        return Blocks.concat(
            [
                self.vision_blocks(
                    placeholder[~in_video],
                    images,
                    row_starts,
                    row_lengths,
                    what="image",
                    grid_name="image_grid_thw",
                ),
                self.vision_blocks(
                    placeholder[in_video],
                    frames,
                    row_starts,
                    row_lengths,
                    what="video",
                    grid_name="video_grid_thw",
                    frame_of=frame_of,
                ),
            ]
        )
