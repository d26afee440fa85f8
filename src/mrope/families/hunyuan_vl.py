"""HunYuan-VL (``hunyuan_vl``): text keeps its index, and an image's tokens are positioned in their own
grid; ``len(mrope_section)`` rows of positions (4 in the released checkpoints), not 3.

transformers 5.24's ``HunYuanVLModel.get_rope_index``. An image of merged grid (H', W') is a run of
``H' * (W' + 1)`` image tokens (a newline token ends each merged row), or of ``H' * (W' + 1) + 2``, whose
first and last tokens keep their index. Its grid token ``(i, j)`` (``j`` in ``0..W'``) has width ``j``,
height ``i`` and the image's ordinal; every other token has its index on every row. The rows are the
index ``num_dims - 3`` times, then (width, height, image ordinal).

In mrope's segment model an image is one segment of width ``W' + 1`` with ``t0`` the image's ordinal
and ``hw0 = 0``, placed by :class:`~mrope.core.place.ItemBlocks` that keep the index: the (t, h, w) rows
it renders, reversed, are (width, height, ordinal), and the index rows lead them: the family states
this as its :attr:`segment_rows`, which its positions and the serving table apply. The ordinal runs on
across the rows of a batch, as transformers counts it (its counter is not reset per sample).

Its rotary embedding (:meth:`rotary_embedding`) takes the ``num_dims`` rows: layout ``"hunyuan"`` of
:mod:`mrope.rotary`, where the two channels of a rotation pair can take different rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .._errors import MRopeError
from ..core import ItemBlocks, SegmentBuilder, SegmentRows
from ..core.rows import check_num_dims
from ._base import Family
from ._grids import check_newline_tokens, newline_tokens
from .inputs import RequestInputs, Seconds
from .layout import Draft, PromptLayout, Run, newline_pads

#: the config fields of the tokens around an image's run in the processor's prompt
MARKER_FIELDS = {"image_start_token_id": "im_start_id", "image_end_token_id": "im_end_id"}


class HunyuanLayout(PromptLayout):
    """HunYuan-VL's: images only, ``image_start, pads, image_end`` with ``H' * (W' + 1)`` pads plus the
    run's first and last image tokens (:attr:`HunYuanVL.run_extra_tokens`)."""

    name = "hunyuan"
    image_marks = ("image_start_token_id", "image_end_token_id")
    takes_videos = False

    def image(self, draft: Draft, grid: list[int]) -> list[Run]:
        pads = newline_pads(grid, draft.merge) + HunYuanVL.run_extra_tokens
        return draft.block(draft.settings["image_token_id"], pads, *self.image_marks)


@dataclass(eq=False, repr=False, kw_only=True)
class HunYuanVL(Family):
    model_types = ("hunyuan_vl",)
    takes_offsets = False
    prompt_layout = HunyuanLayout()
    rotary_layout = "hunyuan"
    default_markers = {"image_start_token_id": 120118, "image_end_token_id": 120119}
    #: image tokens of a run beyond its grid's (the processor's ``cat_extra_token``: its first and last,
    #: which keep their index); a run without them is accepted too, as transformers accepts it
    run_extra_tokens: ClassVar[int] = 2
    setting_sources = {"num_dims": "text_config.rope_parameters.mrope_section, whose length it is"}

    image_token_id: int
    spatial_merge_size: int
    #: rows of positions: ``len(text_config.rope_parameters.mrope_section)``, at least 3
    num_dims: int = field()  # type: ignore[misc]  # (required: field() hides Family's 3)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_num_dims(self.num_dims, f"{self.model_type}: num_dims (len(mrope_section))")
        self._segment_rows = SegmentRows(self.num_dims - 3, reverse=True)

    @classmethod
    def read_settings(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The shared settings, and ``num_dims`` from ``text_config.rope_parameters.mrope_section``."""
        found = super().read_settings(config)
        text = config.get("text_config") or {}
        rope = text.get("rope_parameters") if isinstance(text, Mapping) else None
        section = rope.get("mrope_section") if isinstance(rope, Mapping) else None
        if section is not None:
            found["num_dims"] = len(section)
        return found

    def prompt_markers(self) -> dict[str, int]:
        """The shared markers, with the config's ``im_start_id`` and ``im_end_id`` as the image's."""
        given = {k: self.config[f] for k, f in MARKER_FIELDS.items() if isinstance(self.config.get(f), int)}
        return {**super().prompt_markers(), **given}

    @property
    def segment_rows(self) -> SegmentRows:
        """``num_dims - 3`` index rows, then the rendered rows reversed (width, height, image ordinal);
        one object per family, so that a table's admissions recognise it by identity."""
        return self._segment_rows

    def segment_rows_error(self, what: str) -> MRopeError:
        return MRopeError(
            f"{self.model_type} gives {self.num_dims} rows of positions ({self.num_dims - 3} of the index, "
            f"then width, height, image ordinal): {what} takes only the 3 rows (t, h, w) of mrope's "
            f"segment model (the serving PositionTable(..., num_dims={self.num_dims}) takes its rows)"
        )

    def no_offsets_message(self) -> str:
        return f"{self.model_type} finds its images in input_ids: it takes no image_offsets or video_offsets"

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """Images only, of T = 1 (transformers reads H and W only), their newline tokens within the
        prompt."""
        if video_grid_thw is not None:
            raise MRopeError(f"{self.model_type} takes no video_grid_thw (it has images only)")
        images, videos, seconds = super().check_vision_inputs(
            image_grid_thw, None, second_per_grid_ts, length
        )
        if images.size and (images[:, 0] != 1).any():
            i = int((images[:, 0] != 1).argmax())
            raise MRopeError(
                f"image_grid_thw[{i}] = {tuple(images[i].tolist())}: {self.model_type} images have T = 1"
            )
        check_newline_tokens(images, videos, self.spatial_merge_size, length)
        return images, videos, seconds

    def parse(self, inputs: RequestInputs) -> ItemBlocks:
        """The images: each run of image tokens in a row (transformers' spans of token type 1), in
        order, one per grid."""
        ids = inputs.array
        row_starts, _ = inputs.rows()
        grids = inputs.images
        is_image = ids == self.image_token_id
        starts = row_starts[row_starts < ids.size]
        opens = is_image.copy()  # a run opens after a token that is not an image token, or at a row
        opens[1:] &= ~is_image[:-1]
        opens[starts] = is_image[starts]
        closes = is_image.copy()  # and closes before one, or before a run that opens
        closes[:-1] &= opens[1:] | ~is_image[1:]
        start, end = np.flatnonzero(opens), np.flatnonzero(closes) + 1
        if start.size != len(grids):
            raise MRopeError(
                f"input_ids holds {start.size} runs of image tokens ({self.image_token_id}) but "
                f"image_grid_thw describes {len(grids)} images: one run per image"
            )
        tokens = newline_tokens(grids, self.spatial_merge_size)
        span = end - start
        extra = self.run_extra_tokens
        bad = (span != tokens) & (span != tokens + extra)
        if bad.any():
            i = int(bad.argmax())
            raise MRopeError(
                f"image {i} (image_grid_thw[{i}] = {tuple(grids[i].tolist())}) is a run of {span[i]} image "
                f"tokens at index {start[i]}: expected H' * (W' + 1) = {tokens[i]}, or {tokens[i] + extra} "
                "with its first and last tokens"
            )
        first = start + (span != tokens)  # a run with its two extra tokens: they keep their index
        return self.items(first, grids, row_starts)

    def items(self, start: np.ndarray, grids: np.ndarray, row_starts: np.ndarray) -> ItemBlocks:
        """The images whose grid tokens start at ``start`` (grids before merging), numbered in order,
        as :class:`ItemBlocks` that keep the index. (The index rows reach ``L - 1``: a row's delta is
        at least 0 where they lead, :meth:`stream_positions`.)"""
        height = grids[:, 1] // self.spatial_merge_size
        tokens = newline_tokens(grids, self.spatial_merge_size)
        width = tokens // height  # W' + 1: with the newline column
        reach = np.maximum(np.arange(start.size), np.maximum(height - 1, width - 1))
        first, widths, peaks = start.tolist(), width.tolist(), reach.tolist()

        def lay_out(i: int, base: Any, out: SegmentBuilder) -> tuple[int, int]:
            out.add(first[i], i, 0, widths[i], 0)
            return peaks[i], peaks[i]  # (text resumes at its index: keeps_index)

        end = start + tokens
        row = row_starts.searchsorted(start, side="right") - 1
        return ItemBlocks(start, end, row, lay_out, keeps_index=True)

    def stream_positions(self, inputs: RequestInputs) -> tuple[np.ndarray, np.ndarray]:
        positions, delta = super().stream_positions(inputs)
        if self.num_dims > 3:
            np.maximum(delta, 0, out=delta)
        return self.rows(positions, inputs.rows()[0]), delta

    def prompt(self, inputs: RequestInputs, *, segments: bool, layout: bool = False) -> Any:
        """The family's rows of one prompt, or (``segments``) the segment table they follow from
        (:attr:`segment_rows`); the delta of every row (at least 0 where index rows lead)."""
        found, delta = super().prompt(inputs, segments=segments, layout=layout)
        delta = max(delta, 0) if self.num_dims > 3 else delta
        return (found if segments else self.rows(found, inputs.rows()[0])), delta

    def rows(self, rendered: np.ndarray, row_starts: np.ndarray) -> np.ndarray:
        """The family's rows from the segment model's (t, h, w) of a stream whose rows start at
        ``row_starts``: the index in the row ``num_dims - 3`` times, then (w, h, t) = (width, height,
        image ordinal)."""
        index = np.arange(rendered.shape[1], dtype=rendered.dtype)
        if self.num_dims > 3 and row_starts.any():  # rows of a batch: the index counts from each row's
            index -= row_starts[row_starts.searchsorted(index, side="right") - 1]
        return self.segment_rows.apply(rendered, index)
