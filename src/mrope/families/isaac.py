"""Isaac: images of one frame whose h and w rows count from 0, as vLLM 0.32 positions them.

Image ``i`` of merged grid (1, H', W') at base ``b`` has positions ``(b, q, r)`` for its token
``q * W' + r``: the t row is the base, the h and w rows are not offset by it. Text before the next image
resumes at ``max(b, H' - 1, W' - 1) + 1``, text after the last image of a prompt at ``b + 1`` (vLLM
takes the first from the block's maximum, the second from its last t value). The merge is the vision
config's ``pixel_shuffle_scale_factor``; the placeholder id is not in Isaac's config (its processor
encodes ``<|image_pad|>``): give ``image_token_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import Blocks, ItemBlocks, SegmentBuilder, blocks_from_rows
from ._base import Family
from ._items import items_at, merge_items, token_blocks
from .inputs import RequestInputs
from .one_frame import ImagesOnly


@dataclass(eq=False, repr=False, kw_only=True)
class Isaac(ImagesOnly, Family):
    model_types = ("isaac",)

    image_token_id: int
    spatial_merge_size: int

    @classmethod
    def read_settings(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The shared reading, the merge from ``vision_config.pixel_shuffle_scale_factor``."""
        found = super().read_settings(config)
        scale = (config.get("vision_config") or {}).get("pixel_shuffle_scale_factor")
        if "spatial_merge_size" not in found and scale is not None:
            found["spatial_merge_size"] = scale
        return found

    def parse(self, inputs: RequestInputs) -> ItemBlocks:
        rows, lengths = inputs.rows()
        blocks = token_blocks(
            inputs.array,
            self.image_token_id,
            inputs.images,
            rows,
            lengths,
            self.spatial_merge_size,
            what="image",
        )
        return self.items(blocks, rows)

    def prompt_blocks(self, inputs: RequestInputs) -> ItemBlocks:
        """One prompt's images: at ``image_offsets``, or found in ``ids`` (videos were refused by
        :class:`ImagesOnly`)."""
        if inputs.image_offsets is None:
            return self.parse(inputs)
        found = items_at(
            inputs.ids,
            self.image_token_id,
            inputs.images,
            inputs.image_offsets,
            self.spatial_merge_size,
            what="image",
        )
        rows = merge_items([found], inputs.image_offsets, None)
        return self.items(rows if isinstance(rows, Blocks) else blocks_from_rows(rows), np.zeros(1, np.int64))

    def items(self, blocks: Blocks, row_starts: np.ndarray) -> ItemBlocks:
        """The images as items that this family lays out (:meth:`lay_out`)."""
        row = row_starts.searchsorted(blocks.start, side="right") - 1
        last_in_row = np.ones(row.shape, dtype=bool)
        last_in_row[:-1] = row[1:] != row[:-1]
        start, height, width = blocks.start.tolist(), blocks.height.tolist(), blocks.width.tolist()
        last = last_in_row.tolist()

        def lay_out(i: int, base: Any, out: SegmentBuilder) -> tuple[int, int]:
            out.add(start[i], base, 0, width[i], 0)
            peak = max(int(base), height[i] - 1, width[i] - 1)
            return peak, int(base) if last[i] else peak

        return ItemBlocks(blocks.start, blocks.start + blocks.num_tokens, row, lay_out)
