"""GLM-4.1V, GLM-4.5V: frames are image-token blocks between the video markers, one block per frame."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import MRopeError
from ..core import BlockRow, Blocks, ItemBlocks
from ._base import Family, as_ids
from ._items import check_video_offsets, frames_at, items_at, merge_items, split_frames, vision_blocks
from .inputs import RequestInputs, sort_order
from .layout import Draft, Piece, PromptLayout


class GlmLayout(PromptLayout):
    """GLM-4.1V's and its kin's: an image ``image_start, image pads, image_end``; a video
    ``video_start``, then per frame an image block and its timestamp, then ``video_end``."""

    name = "glm"
    image_marks = ("image_start_token_id", "image_end_token_id")

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        plane = grid[1] * grid[2] // draft.merge**2
        return Piece(
            runs=[(draft.marker("video_start_token_id"), 1)],
            frames=grid[0],
            frame=draft.block(draft.settings["image_token_id"], plane, *self.image_marks),
            stamps=stamps,
            stamp_first=False,
            after=[(draft.marker("video_end_token_id"), 1)],
        )


GLM = GlmLayout()


@dataclass(eq=False, repr=False, kw_only=True)
class Glm4V(Family):
    model_types = ("glm4v", "glm4v_moe")
    video_frames_in_prompt = True
    default_mrope_sections = {"glm4v_text": (8, 12, 12), "glm4v_moe_text": (8, 12, 12)}
    prompt_layout = GLM
    default_markers = {"image_start_token_id": 151339, "image_end_token_id": 151340}

    image_token_id: int
    video_start_token_id: int
    video_end_token_id: int
    spatial_merge_size: int

    @property
    def rotary_is_neox_style(self) -> bool:  # GLM-4.1V rotates GPT-J pairs, GLM-4.5V NeoX halves
        return self.model_type != "glm4v"

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        """A video frame is an image block inside the video markers."""
        depth = np.cumsum(
            (ids == self.video_start_token_id).astype(np.int64) - (ids == self.video_end_token_id)
        )
        return depth[block_starts] > 0

    def parse(self, inputs: RequestInputs) -> Blocks:
        parts = self.image_and_frame_blocks(inputs.array, *inputs.rows(), inputs.images, inputs.videos)
        return Blocks.concat(list(parts))

    def image_and_frame_blocks(
        self,
        ids: np.ndarray,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
        images: np.ndarray,
        videos: np.ndarray,
    ) -> tuple[Blocks, Blocks]:
        """The image blocks and the video frame blocks (image tokens inside the video markers)."""
        placeholder = (ids == self.image_token_id).nonzero()[0]
        # inside a video: more video starts than ends so far in the row
        depth = np.cumsum(
            (ids == self.video_start_token_id).astype(np.int64) - (ids == self.video_end_token_id)
        )
        row_start = row_starts[row_starts.searchsorted(placeholder, side="right") - 1]
        depth_before_row = np.where(row_start > 0, depth[np.maximum(row_start - 1, 0)], 0)
        in_video = depth[placeholder] - depth_before_row > 0
        frames, frame_of = split_frames(videos)
        image_blocks = vision_blocks(
            placeholder[~in_video],
            images,
            row_starts,
            row_lengths,
            self.spatial_merge_size,
            what="image",
            grid_name="image_grid_thw",
        )
        frame_blocks = vision_blocks(
            placeholder[in_video],
            frames,
            row_starts,
            row_lengths,
            self.spatial_merge_size,
            what="video",
            grid_name="video_grid_thw",
            frame_of=frame_of,
        )
        return image_blocks, frame_blocks

    def prompt_blocks(self, inputs: RequestInputs) -> Blocks | ItemBlocks | list[BlockRow]:
        """Images at their offsets when the prompt has no videos (given as such); otherwise the prompt is
        scanned (video frames are image tokens inside the video markers) and the offsets are checked."""
        ids, images, videos = inputs.ids, inputs.images, inputs.videos
        image_offsets, video_offsets = inputs.image_offsets, inputs.video_offsets
        if image_offsets is None and video_offsets is None:
            return super().prompt_blocks(inputs)
        if image_offsets is not None and video_offsets is not None and not video_offsets:
            images_at = items_at(
                ids, self.image_token_id, images, image_offsets, self.spatial_merge_size, what="image"
            )
            return merge_items([images_at], image_offsets, video_offsets)
        if image_offsets is not None and inputs.frame_offsets is not None:  # nothing to find: no scan
            images_at = items_at(
                ids, self.image_token_id, images, image_offsets, self.spatial_merge_size, what="image"
            )
            frames = frames_at(
                ids, self.image_token_id, videos, inputs.frame_offsets, self.spatial_merge_size
            )
            check_video_offsets(frames, videos, video_offsets)
            return merge_items([images_at, frames], image_offsets, video_offsets)
        # the scan pairs the images it finds, in prompt order, with the grids: offsets given in any order
        # (each with its grid) are taken in prompt order, as items at their offsets are
        order = None if image_offsets is None else sort_order(image_offsets)
        if order is not None:
            images, image_offsets = images[order], [image_offsets[k] for k in order]
        rows = np.array([0, len(ids)], dtype=np.int64)
        image_blocks, frame_blocks = self.image_and_frame_blocks(
            as_ids(ids), rows[:1], rows[1:], images, videos
        )
        if image_offsets is not None:
            found = image_blocks.start.tolist()
            bad = next((i for i, (a, b) in enumerate(zip(found, image_offsets, strict=True)) if a != b), None)
            if bad is not None:
                given = bad if order is None else order[bad]  # (the caller's index)
                grid = tuple(int(g) for g in images[bad])
                raise MRopeError(
                    f"image {given} (image_grid_thw[{given}] = {grid}) was found at {found[bad]}, but "
                    f"image_offsets[{given}] = {image_offsets[bad]}"
                )
        if video_offsets is not None:
            check_video_offsets(frame_blocks, videos, video_offsets)
        return Blocks.concat([image_blocks, frame_blocks])
