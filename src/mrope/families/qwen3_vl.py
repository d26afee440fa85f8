"""Qwen3-VL, Qwen3-VL-MoE: each video frame is its own block, its time carried by timestamp text."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..core import BlockRow, Blocks
from ._base import as_ids
from ._items import check_video_offsets, frames_at, split_frames, token_blocks
from .inputs import Seconds
from .qwen2_vl import Qwen2VL


class Qwen3VL(Qwen2VL):
    model_types: ClassVar[tuple[str, ...]] = ("qwen3_vl", "qwen3_vl_moe")
    rotary_layout = "interleaved"
    default_mrope_sections = {"qwen3_vl_text": (24, 20, 20), "qwen3_vl_moe_text": (24, 20, 20)}
    prompt_layout = "frames"
    video_frames_in_prompt = True

    def video_blocks(
        self,
        ids: np.ndarray,
        videos: np.ndarray,
        second_per_grid_ts: Seconds | None,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
    ) -> Blocks:
        """One block per video frame (T = 1), the frames separated by timestamp text."""
        frames, frame_of = split_frames(videos)
        return token_blocks(
            ids,
            self.video_token_id,
            frames,
            row_starts,
            row_lengths,
            self.spatial_merge_size,
            what="video",
            frame_of=frame_of,
        )

    def prompt_video_blocks(
        self,
        ids: Any,
        videos: np.ndarray,
        seconds: Seconds | None,
        video_offsets: list[int] | None,
        frame_offsets: np.ndarray | None,
    ) -> Blocks | list[BlockRow]:
        """The frames at ``frame_offsets``, or found in ``ids`` (between timestamps); ``video_offsets``,
        if given, checked."""
        if video_offsets is not None and not video_offsets:
            return []
        if frame_offsets is not None:
            frames = frames_at(ids, self.video_token_id, videos, frame_offsets, self.spatial_merge_size)
        else:
            rows = np.array([0, len(ids)], dtype=np.int64)
            frames = self.video_blocks(as_ids(ids), videos, seconds, rows[:1], rows[1:])
        if video_offsets is not None:
            check_video_offsets(frames, videos, video_offsets)
        return frames
