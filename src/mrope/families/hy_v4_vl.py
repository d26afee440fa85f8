"""HY-V4-VL (``hy_v4_vl``): every merged row of a frame ends with a newline token, and every frame opens a
new square of positions.

An image or video of merged grid (T, H', W') holds ``T * H' * (W' + 1)`` placeholder tokens (its token
id, the newline tokens included; no markers in the config). Frame ``k`` at base ``b`` is one segment of
width ``W' + 1`` whose three rows start at ``b + k * B``, ``B = max(H', W' + 1)``: its token ``(i, j)``
has positions ``(b + kB, b + kB + i, b + kB + j)``. Text after the item resumes at its largest position
plus one under both conventions (transformers' ``get_rope_index``; vLLM has no such model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import ItemBlocks, SegmentBuilder
from ..core.blocks import locate_items
from ..core.workspace import workspace
from ._base import Family
from ._grids import check_newline_tokens, merge_divisor, newline_tokens
from .inputs import RequestInputs, Seconds
from .layout import Draft, Piece, PromptLayout, Run, newline_pads


class NewlineLayout(PromptLayout):
    """HY-V4-VL's: pads only, ``T * H' * (W' + 1)`` of them (a newline token, the item's pad, ends each
    merged row): image pads for an image, video pads for a video; its config names no markers."""

    name = "newline"

    def image(self, draft: Draft, grid: list[int]) -> list[Run]:
        return [(draft.settings["image_token_id"], newline_pads(grid, draft.merge))]

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        return Piece(runs=[(draft.settings["video_token_id"], newline_pads(grid, draft.merge))])


@dataclass(eq=False, repr=False, kw_only=True)
class HYV4VL(Family):
    model_types = ("hy_v4_vl",)
    takes_offsets = False
    prompt_layout = NewlineLayout()
    rotary_layout = "interleaved"
    rotary_is_neox_style = False  # rotates GPT-J pairs
    default_mrope_sections = {"hy_v4_vl_text": (12, 10, 10)}

    image_token_id: int
    video_token_id: int
    spatial_merge_size: int

    def no_offsets_message(self) -> str:
        return f"{self.model_type} locates its items in input_ids: it takes no image_offsets or video_offsets"

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        """A video's frames are video tokens."""
        return ids[block_starts] == self.video_token_id

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """The shared checks, then the newline tokens counted: ``T * H' * (W' + 1)`` per item in all
        within the prompt (the shared count, without them, bounds every value by ``length``)."""
        images, videos, seconds = super().check_vision_inputs(
            image_grid_thw, video_grid_thw, second_per_grid_ts, length
        )
        check_newline_tokens(images, videos, self.spatial_merge_size, length)
        return images, videos, seconds

    def item_tokens(self, grids: np.ndarray) -> np.ndarray:
        """Placeholder tokens of each grid: ``T * H' * (W' + 1)``."""
        return newline_tokens(grids, self.spatial_merge_size)

    def parse(self, inputs: RequestInputs) -> ItemBlocks:
        """The images and videos, found by their placeholder tokens (in order, each one run in a row)."""
        ids = inputs.array
        rows, lengths = inputs.rows()
        starts, grids = [], []
        for what, token, found in (
            ("image", self.image_token_id, inputs.images),
            ("video", self.video_token_id, inputs.videos),
        ):
            placeholders = np.flatnonzero(ids == token)
            if not found.shape[0] and not placeholders.size:
                continue

            def describe(i: int, what: str = what, found: np.ndarray = found) -> str:
                return f"{what} {i} ({what}_grid_thw[{i}] = {tuple(found[i].tolist())})"

            starts.append(
                locate_items(
                    placeholders,
                    self.item_tokens(found),
                    rows,
                    lengths,
                    what=what,
                    grid_name=f"{what}_grid_thw",
                    describe=describe,
                )
            )
            grids.append(found)
        start = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        grid = np.concatenate(grids) if grids else np.zeros((0, 3), dtype=np.int64)
        order = start.argsort(kind="stable")
        return self.items(start[order], grid[order], rows)

    def items(self, start: np.ndarray, grids: np.ndarray, row_starts: np.ndarray) -> ItemBlocks:
        """The items at ``start`` (grids before merging) as :class:`ItemBlocks` laid out by this rule."""
        merged = grids // merge_divisor(self.spatial_merge_size)
        frames, height, width = merged[:, 0], merged[:, 1], merged[:, 2] + 1  # (width: with the newline)
        step = np.maximum(height, width)  # B: positions between the corners of two frames
        reach = (frames - 1) * step + np.maximum(height, width) - 1  # largest position past the base
        first, plane = start.tolist(), (height * width).tolist()
        counts, steps, widths, peaks = frames.tolist(), step.tolist(), width.tolist(), reach.tolist()

        def lay_out(i: int, base: Any, out: SegmentBuilder) -> tuple[int, int]:
            k = workspace.range(counts[i])
            corner = base + k * steps[i]
            out.add(first[i] + k * plane[i], corner, corner, widths[i], 0)
            peak = int(base) + peaks[i]
            return peak, peak

        end = start + frames * height * width
        return ItemBlocks(start, end, row_starts.searchsorted(start, side="right") - 1, lay_out)
