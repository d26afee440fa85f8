"""Qwen2-VL (and PaddleOCR-VL's rule): image and video blocks of placeholder tokens, time index k.

The Qwen-style families derive from this one and override only how a video becomes blocks:
:meth:`Qwen2VL.video_items` (its grid and time step: Qwen2.5-VL, Ernie-4.5-VL) or, for families that
split a video into frames separated by timestamps, :meth:`Qwen2VL.video_blocks` and
:meth:`Qwen2VL.prompt_video_blocks` (Qwen3-VL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core import BlockRow, Blocks
from ._base import Family, as_ids
from ._grids import grid_tokens, raise_too_many_tokens
from ._items import find_offsets, items_at, merge_items, token_blocks
from .inputs import RequestInputs, Seconds, SplitItems


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen2VL(Family):
    model_types: ClassVar[tuple[str, ...]] = ("qwen2_vl",)
    default_mrope_sections: ClassVar[dict[str, tuple[int, int, int]]] = {"qwen2_vl_text": (16, 24, 24)}
    prompt_layout: ClassVar[str | None] = "whole"
    default_markers: ClassVar[dict[str, int]] = {
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
    }

    rule_on_items: ClassVar[bool] = True

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass keeps the rule on items only where it overrides none of the hooks that
        :meth:`item_rows` stands in for (it calls :meth:`video_interval` and the shared checks)."""
        super().__init_subclass__(**kwargs)
        cls.rule_on_items = all(getattr(cls, hook) is getattr(Qwen2VL, hook) for hook in _ITEM_PATH_HOOKS)

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        return video_by_placeholder(ids, block_starts, self.image_token_id, self.video_token_id)

    def parse(self, inputs: RequestInputs) -> Blocks:
        ids, (rows, lengths) = inputs.array, inputs.rows()
        images = token_blocks(
            ids, self.image_token_id, inputs.images, rows, lengths, self.spatial_merge_size, what="image"
        )
        videos = self.video_blocks(ids, inputs.videos, inputs.seconds, rows, lengths)
        return Blocks.concat([images, videos])

    def prompt_blocks(self, inputs: RequestInputs) -> Blocks | list[BlockRow]:
        """One prompt's blocks: each modality at its given offsets, or found in ``ids``."""
        ids, images, videos, seconds = inputs.ids, inputs.images, inputs.videos, inputs.seconds
        image_offsets, video_offsets = inputs.image_offsets, inputs.video_offsets
        image_part = self.prompt_image_blocks(ids, images, image_offsets)
        video_part = self.prompt_video_blocks(ids, videos, seconds, video_offsets, inputs.frame_offsets)
        return merge_items([image_part, video_part], image_offsets, video_offsets)

    def __post_init__(self) -> None:
        super().__post_init__()
        #: the time steps and rounding of :meth:`video_interval` by the videos' (seconds, frames)
        self._item_steps: dict[tuple[Any, ...], tuple[np.ndarray | float, int]] = {}

    def item_rows(self, ids: Any, items: SplitItems) -> list[BlockRow]:
        """One prompt's blocks from its items' Python values: the checks of :meth:`request_inputs` and
        the blocks of :meth:`prompt_blocks`, in their order, one Python step per item (no array but
        the videos' time steps)."""
        images, videos, seconds = items.images, items.videos, items.seconds
        merge, temporal = self.spatial_merge_size, self.video_temporal_merge
        tokens = grid_tokens(images, "image_grid_thw", merge, 1) if images else 0
        if videos:
            tokens += grid_tokens(videos, "video_grid_thw", merge, temporal)
        if tokens > len(ids):
            grids = [np.array(g, dtype=np.int64).reshape(-1, 3) for g in (images, videos)]
            raise_too_many_tokens(*grids, len(ids), merge, temporal)
        if seconds is not None and not self.uses_second_per_grid_ts:
            raise self.seconds_refused()
        frames = tuple([t for t, _, _ in videos]) if videos else ()
        if videos:
            self.check_seconds(seconds, frames)
        rows = (
            items_at(
                ids, self.image_token_id, images, items.image_offsets, self.spatial_merge_size, what="image"
            )
            if images
            else []
        )
        if videos:
            key = (None if seconds is None else tuple(seconds), frames)
            steps = self._item_steps.get(key)  # (a few frame rates and lengths recur across requests)
            if steps is None:
                given = None if seconds is None else Seconds(np.array(seconds, dtype=np.float64), "float32")
                steps = self.video_interval(given, videos)
                if len(self._item_steps) >= _KEPT_STEPS:
                    self._item_steps.clear()
                self._item_steps[key] = steps
            interval, rounding = steps
            rows += items_at(
                ids,
                self.video_token_id,
                videos,
                items.video_offsets,
                self.spatial_merge_size,
                what="video",
                interval=interval,
                rounding=rounding,
            )
        return merge_items([rows], items.image_offsets, items.video_offsets)

    def prompt_image_blocks(
        self, ids: Any, images: np.ndarray, image_offsets: list[int] | None
    ) -> Blocks | list[BlockRow]:
        """One prompt's image blocks: at ``image_offsets``, or found in ``ids`` (a scan for the offsets
        when the images are few, else the vectorized parse)."""
        if image_offsets is None:
            image_offsets = find_offsets(as_ids(ids), self.image_token_id, images, self.spatial_merge_size)
            if image_offsets is None:
                rows = np.array([0, len(ids)], dtype=np.int64)
                return token_blocks(
                    as_ids(ids),
                    self.image_token_id,
                    images,
                    rows[:1],
                    rows[1:],
                    self.spatial_merge_size,
                    what="image",
                )
        if not image_offsets:
            return []
        return items_at(
            ids, self.image_token_id, images, image_offsets, self.spatial_merge_size, what="image"
        )

    def prompt_video_blocks(
        self,
        ids: Any,
        videos: np.ndarray,
        seconds: Seconds | None,
        video_offsets: list[int] | None,
        frame_offsets: np.ndarray | None,
    ) -> Blocks | list[BlockRow]:
        """One prompt's video blocks, each video one block: at ``video_offsets``, or found in ``ids``
        (``frame_offsets`` is for frame families: None here)."""
        grids, interval, rounding = self.video_items(videos, seconds)
        if video_offsets is None:
            video_offsets = find_offsets(as_ids(ids), self.video_token_id, grids, self.spatial_merge_size)
            if video_offsets is None:
                rows = np.array([0, len(ids)], dtype=np.int64)
                return self.video_blocks(as_ids(ids), videos, seconds, rows[:1], rows[1:])
        if not video_offsets:
            return []
        return items_at(
            ids,
            self.video_token_id,
            grids,
            video_offsets,
            self.spatial_merge_size,
            what="video",
            interval=interval,
            rounding=rounding,
        )

    def video_blocks(
        self,
        ids: np.ndarray,
        videos: np.ndarray,
        second_per_grid_ts: Seconds | None,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
    ) -> Blocks:
        """Each video one block of its video placeholder tokens."""
        grids, interval, rounding = self.video_items(videos, second_per_grid_ts)
        return token_blocks(
            ids,
            self.video_token_id,
            grids,
            row_starts,
            row_lengths,
            self.spatial_merge_size,
            what="video",
            interval=interval,
            rounding=rounding,
        )

    def video_items(
        self, videos: np.ndarray, second_per_grid_ts: Seconds | None
    ) -> tuple[np.ndarray, np.ndarray | float, int]:
        """Each video's grid as its block has it (before the spatial merge), its temporal index step and
        the rounding of its time (:func:`mrope.core.place.temporal_index`)."""
        return videos, *self.video_interval(second_per_grid_ts, videos)

    def video_interval(
        self, second_per_grid_ts: Seconds | None, videos: np.ndarray
    ) -> tuple[np.ndarray | float, int]:
        """Temporal index step between a video's frames and the rounding of its time: 1 and none unless
        the family scales time."""
        return 1.0, 0


_KEPT_STEPS = 256  # the videos' time steps :meth:`Qwen2VL.item_rows` keeps, by seconds and frames

#: the hooks whose rule :meth:`Qwen2VL.item_rows` follows on Python values
_ITEM_PATH_HOOKS = (
    "request_inputs",
    "check_vision_inputs",
    "check_second_per_grid_ts",
    "prompt_blocks",
    "prompt_image_blocks",
    "prompt_video_blocks",
    "video_items",
)


def video_by_placeholder(
    ids: np.ndarray, block_starts: np.ndarray, image_id: int, video_id: int
) -> np.ndarray:
    """Whether each block is a video's: the kind of the last image or video placeholder at or before its
    first token (a Qwen3-Omni video frame may start on an audio placeholder, merged by time)."""
    video = ids == video_id
    placeholder = video | (ids == image_id)
    last = np.maximum.accumulate(np.where(placeholder, np.arange(ids.size), 0))
    return video[last[block_starts]]
