"""GLM-Image (``glm_image``): text, and complete images as one-frame blocks found between their markers;
the grids past a prompt's complete images are the images still to be generated.

transformers 5.24's ``GlmImageModel.get_rope_index``. A complete image is the tokens from an
``image_start_token_id`` + 1 to its ``image_end_token_id`` (the markers are text): H * W tokens of grid
(1, H, W) (no merge), a block at the running position whose text resumes ``max(H, W)`` later, the
segment model's rule for one-frame blocks under both conventions. ``image_grid_thw`` holds, per prompt,
its complete images' grids, then the grids of the images the model generates (the processor's target
grids: two for text-to-image, one for image-to-image); a batch splits it by ``images_per_sample``.

Deltas are 0: a token past the prompt does not take ``index + delta``. The tokens generated after the
prompt take :meth:`GlmImage.generation_positions` (transformers caches them at prefill as
``_cached_decode_position_ids``): the images still to be generated, from the last grid backwards, each
a block at a running position (``+ max(h, w)`` after each), then one position for the end marker. They
are blocks under the same placement as the prompt's, so :meth:`GlmImage.segments` (the state of the
serving :class:`~mrope.PositionTable`) covers the prompt and the ``n`` tokens it generates, and only past
those ``index + delta`` (where transformers repeats the end marker's position: a sample ends there).
After preemption, add the prompt alone: the table already holds the positions of what was generated.
The vLLM integration, which serves ``index + delta`` past the prompt, refuses the family
(:attr:`GlmImage.decode_follows_index`); mrope's SGLang plugin computes the positions SGLang stores for
the prompt and its generation, and serves its steps from them. mrope's transformers
patch serves it, setting the model's decode cache at prefill from
:meth:`GlmImage.batch_generation_positions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._arrays import to_int_array, to_numpy
from .._errors import MRopeError
from ..core import Blocks, place
from ..core.place import LARGEST_POSITION
from ._base import Family
from ._grids import check_grids
from ._seconds import check_second_per_grid_ts
from .glm4v import GLM
from .inputs import ArrayLike, RequestInputs, Seconds

_NO_VIDEOS = np.zeros((0, 3), dtype=np.int64)


@dataclass(eq=False, repr=False, kw_only=True)
class GlmImage(Family):
    model_types = ("glm_image",)
    takes_offsets = False
    prompt_layout = GLM  # the source images; the target grids and the generation's start are the caller's
    extra_inputs = ("images_per_sample",)
    decode_follows_index = False
    default_mrope_sections = {"glm_image_text": (8, 12, 12)}
    #: transformers positions the grids as they are (``get_vision_position_ids``' merge of 1), whatever
    #: the config's vision merge
    spatial_merge_size: ClassVar[int] = 1  # type: ignore[misc]

    #: the placeholder of a source image's tokens (the prompt layout's; the rule reads only the markers)
    image_token_id: int
    image_start_token_id: int
    image_end_token_id: int

    def no_offsets_message(self) -> str:
        return f"{self.model_type} finds its images between their markers in input_ids: it takes no offsets"

    def read_extra_inputs(self, checked: RequestInputs, extra: Mapping[str, Any]) -> RequestInputs:
        """The grids of each row: ``images_per_sample`` (one count per row, summing to the grids), needed
        by a batch of several rows with grids."""
        rows = checked.rows()[0].size
        grids = len(checked.images)
        images_per_sample = extra.get("images_per_sample")
        if images_per_sample is None:
            if rows > 1 and grids:
                raise MRopeError(
                    f"{self.model_type}: a batch of {rows} rows with image_grid_thw needs images_per_sample "
                    "(the grids of each row, as the processor gives them)"
                )
            return checked._replace(images_per_row=np.full(rows, grids, dtype=np.int64))
        counts = to_int_array(images_per_sample, name="images_per_sample", ndim=1)
        if counts.size != rows or (counts < 0).any() or int(counts.sum()) != grids:
            raise MRopeError(
                f"images_per_sample = {counts.tolist()}: expected {rows} counts >= 0 (one per row) summing "
                f"to the {grids} grids of image_grid_thw"
            )
        return checked._replace(images_per_row=counts)

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """Image grids of T = 1, no videos; not checked against the prompt's length (the grids of the
        images to be generated are not in it: :meth:`parse` checks each complete image's tokens)."""
        if video_grid_thw is not None:
            raise MRopeError(f"{self.model_type} takes no video_grid_thw (it has images only)")
        images, _ = check_grids(image_grid_thw, "image_grid_thw", 1, 1)
        if images.size and (images[:, 0] != 1).any():
            i = int((images[:, 0] != 1).argmax())
            raise MRopeError(
                f"image_grid_thw[{i}] = {tuple(images[i].tolist())}: {self.model_type} images have T = 1"
            )
        return images, _NO_VIDEOS, check_second_per_grid_ts(self, second_per_grid_ts, _NO_VIDEOS)

    def parse(self, inputs: RequestInputs) -> Blocks:
        """The complete images of every row, each with its row's next grid."""
        return self.complete_images(inputs)[0]

    def complete_images(self, inputs: RequestInputs) -> tuple[Blocks, np.ndarray, np.ndarray]:
        """The complete images' blocks, and each row's first grid and count of complete images.

        Each row's markers alternate, start first (an image the prompt leaves open, as the processor
        ends it, is the last); a row has no more complete images than grids."""
        ids = inputs.array
        row_starts, _ = inputs.rows()
        is_start = ids == self.image_start_token_id
        marks = np.flatnonzero(is_start | (ids == self.image_end_token_id))
        opens = is_start[marks]
        row = row_starts.searchsorted(marks, side="right") - 1
        rank = np.arange(marks.size) - row.searchsorted(row)  # the marker's ordinal in its row
        bad = opens != (rank % 2 == 0)
        if bad.any():
            i = int(bad.argmax())
            r, at = int(row[i]), int(marks[i] - row_starts[row[i]])
            what = (
                "image_start_token_id opens an image inside another"
                if opens[i]
                else ("image_end_token_id closes no image")
            )
            raise MRopeError(f"input_ids row {r}, index {at}: {what} ({self.model_type}'s markers alternate)")
        ends = np.flatnonzero(~opens)
        counts = inputs.images_per_row
        first_grid = np.cumsum(counts) - counts
        complete = np.bincount(row[ends], minlength=counts.size)
        short = np.flatnonzero(complete > counts)
        if short.size:
            r = int(short[0])
            raise MRopeError(
                f"input_ids row {r} holds {complete[r]} complete images (image_start .. image_end) but "
                f"{counts[r]} grids: one grid per image, then those of the images to generate"
            )
        grid = first_grid[row[ends]] + rank[ends] // 2
        start = marks[ends - 1] + 1
        span = marks[ends] - start
        height, width = inputs.images[grid, 1], inputs.images[grid, 2]
        tokens = height * width
        wrong = np.flatnonzero(span != tokens)
        if wrong.size:
            i = int(wrong[0])
            raise MRopeError(
                f"image_grid_thw[{grid[i]}] = {tuple(inputs.images[grid[i]].tolist())} is an image of "
                f"{span[i]} tokens between its markers (at index {start[i] - row_starts[row[ends[i]]]} of "
                f"row {row[ends[i]]}): expected H * W = {tokens[i]}"
            )
        ones = np.ones(start.shape, dtype=np.int64)
        blocks = Blocks(start, ones, height, width, ones.astype(np.float32), tokens)
        return blocks, first_grid, complete

    def stream_positions(self, inputs: RequestInputs) -> tuple[np.ndarray, np.ndarray]:
        positions, delta = super().stream_positions(inputs)
        return positions, np.zeros_like(delta)

    def prompt(self, inputs: RequestInputs, *, segments: bool, layout: bool = False) -> Any:
        """One prompt's positions, delta 0; with ``segments``, the table of the prompt and of the tokens
        it generates (:meth:`generated_images`), then ``index + delta`` past them."""
        if not segments:
            positions, _ = super().prompt(inputs, segments=False)
            return positions, 0
        blocks, _, complete = self.complete_images(inputs)
        length = inputs.length
        if len(inputs.images):
            made, count = self.generated_images(inputs, int(complete[0]))
            made.start += length
            blocks, length = Blocks.concat([blocks, made]), length + count
        return self.one_stream(blocks, length, segments=True, layout=layout)

    def generated_images(self, inputs: RequestInputs, complete: int) -> tuple[Blocks, int]:
        """The images one prompt's sample still generates, past its ``complete`` images: (1, h, w) blocks
        from index 0, the last grid first, and the tokens generated, the end marker's (one more) included."""
        todo = inputs.images[complete:][::-1]
        count = sum(h * w for h, w in todo[:, 1:].tolist()) + 1  # (Python ints: never wraps)
        tokens = todo[:, 1] * todo[:, 2]
        ones = np.ones(tokens.shape, dtype=np.int64)
        start = np.cumsum(tokens) - tokens
        return Blocks(start, ones, todo[:, 1], todo[:, 2], ones.astype(np.float32), tokens), count

    def generation_positions(
        self, input_ids: ArrayLike, *, image_grid_thw: ArrayLike | None = None
    ) -> np.ndarray:
        """Positions of the tokens the model generates after one prompt: transformers'
        ``_cached_decode_position_ids`` of the prompt's sample, without its batch padding.

        Parameters
        ----------
        input_ids : list, numpy array or torch tensor, shape (L,), integer: the prompt
        image_grid_thw : (num_images, 3), the prompt's complete images' grids, then the grids of the
            images to generate (the processor's ``image_grid_thw`` of the prompt)

        Returns
        -------
        numpy.ndarray, shape (3, n), int64: the images to generate, the last grid first, each a
        (1, h, w) block (t, h, w rows) at a running position from the prompt's next one, ``+ max(h, w)``
        after each, then one position for the end marker: ``n = sum(h * w) + 1``. No grids: ``(3, 0)``
        (transformers caches nothing; tokens past the prompt take their index). The serving table
        gives the same positions to the tokens past the prompt (:meth:`segments`).

        Raises
        ------
        MRopeError
            What :meth:`positions` refuses, with its message (grids or not: a complete image without its
            grid, markers that do not alternate); tokens to generate that would reach past the largest
            position (2**31 - 1).
        """
        inputs = self.request_inputs(input_ids, image_grid_thw=image_grid_thw)
        # the prompt's checks first, grids or not: what positions() refuses is refused here the same way
        blocks, _, complete = self.complete_images(inputs)
        if not len(inputs.images):
            return np.zeros((3, 0), dtype=np.int64)
        following = len(inputs.ids) + int(place(blocks, *inputs.rows(), self.compat).delta[0])
        made, length = self.generated_images(inputs, int(complete[0]))
        if following + length > LARGEST_POSITION:
            raise MRopeError(
                f"the {length:,} tokens to generate after position {following:,} (image_grid_thw past the "
                f"prompt's complete images) reach past the largest position, {LARGEST_POSITION:,}"
            )
        positions, _ = self.one_stream(made, length, segments=False, layout=False)
        return positions + following

    def batch_generation_positions(  # type: ignore[override]
        self,
        input_ids: ArrayLike,
        *,
        image_grid_thw: ArrayLike | None = None,
        images_per_sample: ArrayLike | None = None,
        attention_mask: ArrayLike | None = None,
    ) -> list[np.ndarray]:
        """Each row's :meth:`generation_positions` in a padded batch, read as transformers'
        ``get_rope_index`` reads it: a row's real tokens are those where ``attention_mask == 1``, its grids
        the next ``images_per_sample`` of ``image_grid_thw``; a row without grids gives ``(3, 0)``.

        Parameters
        ----------
        input_ids : (B, L), integer; attention_mask : (B, L), optional (0 marks padding, anywhere)
        image_grid_thw, images_per_sample : as :func:`mrope.get_rope_index` takes them

        Returns
        -------
        list of B numpy.ndarray, each (3, n_r) int64, unpadded.
        """
        ids = to_int_array(input_ids, name="input_ids", ndim=2)
        rows, length = ids.shape
        starts = np.arange(rows, dtype=np.int64) * length
        inputs = self.request_inputs(
            ids.reshape(-1),
            image_grid_thw=image_grid_thw,
            images_per_sample=images_per_sample,
            row_starts=starts,
            row_lengths=np.full(rows, length, dtype=np.int64),
        )
        real = None
        if attention_mask is not None:
            mask = to_numpy(attention_mask, name="attention_mask")
            if mask.shape != ids.shape:
                raise MRopeError(f"attention_mask has shape {tuple(mask.shape)}, input_ids has {ids.shape}")
            real = mask == 1
        counts = inputs.images_per_row
        first = np.cumsum(counts) - counts
        return [
            self.generation_positions(
                ids[r] if real is None else ids[r][real[r]],
                image_grid_thw=inputs.images[first[r] : first[r] + counts[r]],
            )
            for r in range(rows)
        ]
