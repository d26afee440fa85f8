"""Where a family's rule finds its blocks: three locators, one per path, for one rule written once.

A family whose items are runs of one placeholder token (Qwen2-VL and its kin) states its rule once
(:meth:`mrope.families.qwen2_vl.Qwen2VL.vision_blocks`: which token marks which modality, its grids,
its time steps, whether a video is one block or a block per frame) and asks a locator for the blocks
of each modality:

- :class:`StreamScan`: every row of a stream, scanned (the array path, :meth:`Family.parse`);
- :class:`OnePrompt`: one prompt, each modality at its given offsets, else at the offsets a scan of
  the few items finds, else the vectorized scan of the row (:meth:`Family.prompt_blocks`);
- :class:`AtOffsets`: one prompt's items as Python values, at their offsets (no array built: an
  engine's admission, :meth:`Family.item_rows`).

Each locator has ``items`` (the blocks of one modality's items), ``frames`` (a video's frames, one
block each), ``video_items`` (the videos' grids and time steps, by the family's rule) and ``combine``
(the modalities' blocks in stream order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import BlockRow, Blocks
from ._base import as_ids
from ._items import (
    check_video_offsets,
    find_offsets,
    frames_at,
    items_at,
    merge_items,
    split_frames,
    token_blocks,
)
from .inputs import RequestInputs, SplitItems

#: a family's videos as its blocks take them: (grids, interval, rounding) from (videos, seconds)
VideoItems = Callable[[Any, Any], tuple[Any, np.ndarray | float, int]]


class StreamScan:
    """Every row of a stream, each modality's placeholders found by the vectorized scan."""

    __slots__ = ("ids", "lengths", "merge", "rows", "video_items")

    def __init__(self, inputs: RequestInputs, merge: int, video_items: VideoItems) -> None:
        self.ids, self.merge, self.video_items = inputs.array, merge, video_items
        self.rows, self.lengths = inputs.rows()

    def items(
        self,
        what: str,
        token_id: int,
        grids: np.ndarray,
        interval: np.ndarray | float = 1.0,
        rounding: int = 0,
    ) -> Blocks:
        """One block per item: item ``i`` owns the next ``T*H*W / merge**2`` placeholders."""
        return token_blocks(
            self.ids,
            token_id,
            grids,
            self.rows,
            self.lengths,
            self.merge,
            what=what,
            interval=interval,
            rounding=rounding,
        )

    def frames(self, what: str, token_id: int, videos: np.ndarray) -> Blocks:
        """One block per video frame (T = 1), the frames separated by other tokens (timestamps)."""
        return scan_frames(self.ids, token_id, videos, self.rows, self.lengths, self.merge, what)

    def combine(self, parts: list[Blocks]) -> Blocks:
        return Blocks.concat(parts)


class OnePrompt:
    """One prompt: each modality at its given offsets, else at the offsets a scan finds (a few items),
    else the vectorized scan of its one row."""

    __slots__ = ("inputs", "merge", "video_items")

    def __init__(self, inputs: RequestInputs, merge: int, video_items: VideoItems) -> None:
        self.inputs, self.merge, self.video_items = inputs, merge, video_items

    def items(
        self,
        what: str,
        token_id: int,
        grids: np.ndarray,
        interval: np.ndarray | float = 1.0,
        rounding: int = 0,
    ) -> Blocks | list[BlockRow]:
        inputs, merge = self.inputs, self.merge
        offsets = inputs.image_offsets if what == "image" else inputs.video_offsets
        if offsets is None:
            ids = as_ids(inputs.ids)
            offsets = find_offsets(ids, token_id, grids, merge)
            if offsets is None:
                rows = np.array([0, len(ids)], dtype=np.int64)
                return token_blocks(
                    ids,
                    token_id,
                    grids,
                    rows[:1],
                    rows[1:],
                    merge,
                    what=what,
                    interval=interval,
                    rounding=rounding,
                )
        if not offsets:
            return []
        others = inputs.video_offsets if what == "image" else inputs.image_offsets
        return items_at(
            inputs.ids,
            token_id,
            grids,
            offsets,
            merge,
            what=what,
            interval=interval,
            rounding=rounding,
            others=others,
        )

    def frames(self, what: str, token_id: int, videos: np.ndarray) -> Blocks | list[BlockRow]:
        """The frames at ``frame_offsets``, or found in the prompt (between timestamps); the video
        offsets, if given, checked."""
        inputs = self.inputs
        video_offsets = inputs.video_offsets
        if video_offsets is not None and not video_offsets:
            return []
        if inputs.frame_offsets is not None:
            frames = frames_at(inputs.ids, token_id, videos, inputs.frame_offsets, self.merge)
        else:
            ids = as_ids(inputs.ids)
            rows = np.array([0, len(ids)], dtype=np.int64)
            frames = scan_frames(ids, token_id, videos, rows[:1], rows[1:], self.merge, what)
        if video_offsets is not None:
            check_video_offsets(frames, videos, video_offsets)
        return frames

    def combine(self, parts: list[Blocks | list[BlockRow]]) -> Blocks | list[BlockRow]:
        return merge_items(parts, self.inputs.image_offsets, self.inputs.video_offsets)


class AtOffsets:
    """One prompt's items as Python values (grids as lists), each at its offset; ``ids`` a list or a
    1-D int64 array, read at the items' first and last tokens only."""

    __slots__ = ("found", "ids", "merge", "video_items")

    def __init__(self, ids: Any, found: SplitItems, merge: int, video_items: VideoItems) -> None:
        self.ids, self.found, self.merge, self.video_items = ids, found, merge, video_items

    def items(
        self,
        what: str,
        token_id: int,
        grids: list[list[int]],
        interval: np.ndarray | float = 1.0,
        rounding: int = 0,
    ) -> list[BlockRow]:
        if not grids:
            return []
        found = self.found
        offsets, others = (
            (found.image_offsets, found.video_offsets)
            if what == "image"
            else (found.video_offsets, found.image_offsets)
        )
        return items_at(
            self.ids,
            token_id,
            grids,
            offsets,
            self.merge,
            what=what,
            interval=interval,
            rounding=rounding,
            others=others,
        )

    def frames(self, what: str, token_id: int, videos: Any) -> list[BlockRow]:
        """Frames are found in the prompt, which this path does not scan: a family whose videos are
        frames has no rule on items (:attr:`Family.rule_on_items`)."""
        raise NotImplementedError("items at offsets cannot find a video's frames")

    def combine(self, parts: list[list[BlockRow]]) -> list[BlockRow]:
        return merge_items(parts, self.found.image_offsets, self.found.video_offsets)


def scan_frames(
    ids: np.ndarray,
    token_id: int,
    videos: np.ndarray,
    row_starts: np.ndarray,
    row_lengths: np.ndarray,
    merge: int,
    what: str,
) -> Blocks:
    """One block per video frame (T = 1) of the placeholders ``token_id``, found by the vectorized scan."""
    frames, frame_of = split_frames(videos)
    return token_blocks(ids, token_id, frames, row_starts, row_lengths, merge, what=what, frame_of=frame_of)


#: the locators a family's rule is given
Locator = StreamScan | OnePrompt | AtOffsets
