"""Qwen2-VL (and PaddleOCR-VL's rule): image and video blocks of placeholder tokens, time index k.

The rule is written once, :meth:`Qwen2VL.vision_blocks`; the stream's parse, the one-prompt path and
the items' path apply it with the locators of :mod:`mrope.families._locate`. The Qwen-style families
derive from this one and state only how a video becomes blocks: :meth:`Qwen2VL.video_items` (its grid
and time step: Qwen2.5-VL, Ernie-4.5-VL) or, for families that split a video into frames separated by
timestamps, :attr:`Family.video_frames_in_prompt` (Qwen3-VL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core import BlockRow, Blocks
from ._base import Family
from ._grids import grid_tokens, raise_too_many_tokens
from ._locate import AtOffsets, Locator, OnePrompt, StreamScan
from ._seconds import check_seconds, seconds_refused
from .inputs import RequestInputs, Seconds, SplitItems
from .layout import WHOLE, PromptLayout


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen2VL(Family):
    model_types: ClassVar[tuple[str, ...]] = ("qwen2_vl",)
    default_mrope_sections: ClassVar[dict[str, tuple[int, int, int]]] = {"qwen2_vl_text": (16, 24, 24)}
    prompt_layout: ClassVar[PromptLayout | None] = WHOLE
    default_markers: ClassVar[dict[str, int]] = {
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
    }

    rule_on_items: ClassVar[bool] = True

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass keeps the rule on items only where its videos are not frames found in the prompt
        and it overrides none of the hooks that :meth:`item_rows` stands in for (it calls
        :meth:`video_interval` and the shared checks)."""
        super().__init_subclass__(**kwargs)
        cls.rule_on_items = not cls.video_frames_in_prompt and all(
            getattr(cls, hook) is getattr(Qwen2VL, hook) for hook in _ITEM_PATH_HOOKS
        )

    def vllm_difference(self) -> str | None:
        """vLLM scales Qwen2-VL's video time (its own model's, not its kin's) by
        ``vision_config.tokens_per_second`` when a config has it; this rule does not."""
        if self.model_type not in Qwen2VL.model_types:
            return None
        vision = self.config.get("vision_config") or {}
        factor = vision.get("tokens_per_second", 1.0)
        if factor == 1.0:
            return None
        return (
            f"vLLM 0.32 scales {self.model_type} video time by vision_config.tokens_per_second = {factor}, "
            "which the Qwen2-VL rule does not"
        )

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        return video_by_placeholder(ids, block_starts, self.image_token_id, self.video_token_id)

    def vision_blocks(self, at: Locator, images: Any, videos: Any, seconds: Any) -> Any:
        """The family's rule, once: each image a block of image placeholders; each video a block of
        video placeholders (its grid and time steps by :meth:`video_items`) or, where videos are
        frames separated by timestamps (:attr:`video_frames_in_prompt`), a block per frame. ``at``
        finds them (:mod:`mrope.families._locate`): in a scanned stream (:meth:`parse`), in one prompt
        (:meth:`prompt_blocks`) or at the items' offsets (:meth:`item_rows`)."""
        image_part = at.items("image", self.image_token_id, images)
        if self.video_frames_in_prompt:
            video_part = at.frames("video", self.video_token_id, videos)
        else:
            grids, interval, rounding = at.video_items(videos, seconds)
            video_part = at.items("video", self.video_token_id, grids, interval, rounding)
        return at.combine([image_part, video_part])

    def parse(self, inputs: RequestInputs) -> Blocks:
        at = StreamScan(inputs, self.spatial_merge_size, self.video_items)
        return self.vision_blocks(at, inputs.images, inputs.videos, inputs.seconds)

    def prompt_blocks(self, inputs: RequestInputs) -> Blocks | list[BlockRow]:
        """One prompt's blocks: each modality at its given offsets, or found in ``ids``."""
        at = OnePrompt(inputs, self.spatial_merge_size, self.video_items)
        return self.vision_blocks(at, inputs.images, inputs.videos, inputs.seconds)

    def __post_init__(self) -> None:
        super().__post_init__()
        #: the time steps and rounding of :meth:`video_interval` by the videos' (seconds, frames)
        self._item_steps: dict[tuple[Any, ...], tuple[np.ndarray | float, int]] = {}

    def item_rows(self, ids: Any, items: SplitItems) -> list[BlockRow]:
        """One prompt's blocks from its items' Python values: the checks of :meth:`request_inputs`, then
        :meth:`vision_blocks` at the items' offsets, one Python step per item (no array but the videos'
        time steps)."""
        images, videos, seconds = items.images, items.videos, items.seconds
        merge = self.spatial_merge_size
        tokens = grid_tokens(images, "image_grid_thw", merge, 1) if images else 0
        if videos:
            tokens += grid_tokens(videos, "video_grid_thw", merge, self.video_temporal_merge)
        if tokens > len(ids):
            grids = [np.array(g, dtype=np.int64).reshape(-1, 3) for g in (images, videos)]
            raise_too_many_tokens(*grids, len(ids), merge, self.video_temporal_merge)
        if seconds is not None and not self.uses_second_per_grid_ts:
            raise seconds_refused(self)
        if videos:
            check_seconds(self, seconds, [t for t, _, _ in videos])
        at = AtOffsets(ids, items, merge, self.item_video_items)
        timed = None if seconds is None else (tuple(seconds), items.seconds_dtype or "float32")
        return self.vision_blocks(at, images, videos, timed)

    def item_video_items(
        self, videos: list[list[int]], seconds: tuple[tuple[float, ...], str] | None
    ) -> tuple[list[list[int]], np.ndarray | float, int]:
        """:meth:`video_items` of Python values: the videos as they are, their time steps and rounding
        by :meth:`video_interval` (``seconds``: the videos' values and the dtype they mean,
        :attr:`SplitItems.seconds_dtype`), kept by (seconds, dtype, frames) (a few frame rates and
        lengths recur across requests)."""
        if not videos:
            return videos, 1.0, 0
        key = (seconds, tuple([t for t, _, _ in videos]))
        steps = self._item_steps.get(key)
        if steps is None:
            given = None if seconds is None else Seconds(np.array(seconds[0], dtype=np.float64), seconds[1])
            steps = self.video_interval(given, videos)
            if len(self._item_steps) >= _KEPT_STEPS:
                self._item_steps.clear()
            self._item_steps[key] = steps
        return videos, *steps

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
    "read_extra_inputs",
    "check_vision_inputs",
    "prompt_blocks",
    "vision_blocks",
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
