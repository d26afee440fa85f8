"""``get_rope_index``: a padded batch in one go, drop-in for transformers' method of the same name."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import like_input, to_int_array, to_numpy
from ._errors import MRopeError
from .core import Compat
from .families import ArrayLike, MultimodalInputs, RequestInputs, family_for

#: the inputs of one prompt only (where its items lie), which a batch does not take
ONE_PROMPT_INPUTS = ("image_offsets", "video_offsets", "frame_offsets", "items")


def get_rope_index(
    config: Any,
    input_ids: ArrayLike,
    inputs: MultimodalInputs | None = None,
    *,
    attention_mask: ArrayLike | None = None,
    compat: Compat | None = None,
    **keywords: Any,
) -> tuple[ArrayLike, ArrayLike]:
    """Positions of a padded batch, as transformers' ``get_rope_index`` returns them.

    All rows are parsed, placed and rendered together (no loop over rows); grids are consumed in
    order across the batch.

    Parameters
    ----------
    config : transformers config, its ``to_dict()``, or a family from :func:`mrope.from_config`.
        A config object is read once and its family cached until the object is freed (a loaded
        model's config does not change); pass a family to control this.
    input_ids : torch tensor or numpy array, shape (B, L), integer
    inputs : :class:`mrope.MultimodalInputs`, optional, or its fields as keywords (``**keywords``):
        the batch's ``image_grid_thw``, ``video_grid_thw``, ``second_per_grid_ts`` and
        ``audio_seqlens`` (Omni families only) in batch order, ``use_audio_in_video`` (Omni families
        only), and a family's own inputs: GLM-Image's ``images_per_sample`` ((B,) int: the grids of each
        row, in order, its complete images' then those of the images to generate, as its processor gives
        them; needed by a batch of several rows with grids), MiniCPM-V 4.7's ``target_sizes`` and
        ``target_sizes_videos`` (the crops' (H, W) patch grids in batch order) and ``downsample_mode``.
        Under ``compat="transformers"`` Qwen2.5-VL computes the time in the seconds' dtype, as
        transformers does (see :class:`mrope.MultimodalInputs`). The items of a batch are found in
        ``input_ids``: offsets and items (one prompt's) are refused.
    attention_mask : shape (B, L), optional; 0 marks padding (left or right). Padded slots get 0.
    compat : ``"vllm"``, ``"transformers"`` or None (default): the family's own, ``"vllm"`` for a config
        (:func:`mrope.families.family_for`).

    Returns
    -------
    position_ids : shape (num_dims, B, L), int64 (float32 for Qwen3-Omni, whose positions can be
        fractional); ``num_dims`` is the family's (3, HunYuan-VL: the length of its ``mrope_section``)
    rope_deltas : shape (B, 1), int64 (float32 for Qwen3-Omni)
        Torch tensors on the device of ``input_ids`` if it is a tensor, numpy arrays otherwise.
    """
    family = family_for(config, compat)
    given = MultimodalInputs.gather(inputs, keywords)
    one_prompt = [name for name in ONE_PROMPT_INPUTS if getattr(given, name) is not None]
    if one_prompt:
        raise MRopeError(
            f"get_rope_index takes no {', '.join(one_prompt)}: a batch's items are found in input_ids "
            "(Family.positions takes one prompt's offsets or items)"
        )
    ids = to_int_array(input_ids, name="input_ids", ndim=2)
    batch, length = ids.shape

    def stream_inputs(stream: np.ndarray, row_starts: np.ndarray, row_lengths: np.ndarray) -> RequestInputs:
        return family.request_inputs(stream, given, row_starts=row_starts, row_lengths=row_lengths)

    if batch == 0:  # nothing to place; grids must still describe no placeholders
        no_rows = np.zeros(0, dtype=np.int64)
        positions, deltas = family.stream_positions(stream_inputs(ids.reshape(-1), no_rows, no_rows))
        empty = np.zeros((positions.shape[0], 0, length), dtype=positions.dtype)
        return like_input(empty, input_ids), like_input(deltas.reshape(0, 1), input_ids)
    row_starts = np.arange(batch, dtype=np.int64) * length
    if attention_mask is None:
        stream, row_lengths, mask = ids.reshape(-1), np.full(batch, length, dtype=np.int64), None
    else:
        mask = _check_mask(attention_mask, ids.shape)
        first, spans = _spans(mask)
        if int(spans.sum()) == np.count_nonzero(mask):  # left or right padding: rows stay in place
            row_starts += first
            row_lengths = spans
            padding = ~mask
            stream = ids.copy()  # ids may be the caller's memory
            np.copyto(stream, -1, where=padding)  # (np.where costs more)
            stream = stream.reshape(-1)
        else:  # arbitrary holes: lay the real tokens of every row end to end
            padding = None
            row_lengths = mask.sum(axis=1)
            stream = ids[mask]
            row_starts[1:] = row_lengths.cumsum()[:-1]
            row_starts[0] = 0
    positions, deltas = family.stream_positions(stream_inputs(stream, row_starts, row_lengths))
    num_dims = positions.shape[0]  # (3 but for HunYuan-VL: family.num_dims)
    if mask is None:
        position_ids = positions.reshape(num_dims, batch, length)
    elif padding is not None:  # rows in place
        position_ids = positions.reshape(num_dims, batch, length)
        np.copyto(position_ids, 0, where=padding)  # a third of the cost of multiplying by the mask
    else:
        position_ids = np.zeros((num_dims, batch, length), dtype=positions.dtype)
        position_ids[:, mask] = positions
    deltas = deltas.reshape(batch, 1)
    return like_input(position_ids, input_ids), like_input(deltas, input_ids)


def _spans(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first real token and the span from it to its last (0 for a row of padding only): a
    row's real tokens are contiguous iff they fill its span, so the rows all are iff the spans add up to
    the mask's count (which is cheaper than counting each row)."""
    length = mask.shape[1]
    if length == 0:
        none = np.zeros(mask.shape[0], dtype=np.int64)
        return none, none
    first = mask.argmax(axis=1)
    if mask[:, -1].all():  # left padding, or none: every row runs to the end
        return first, length - first
    trailing = mask[:, ::-1].argmax(axis=1)
    has_real = mask[np.arange(mask.shape[0]), first]
    return first, np.where(has_real, length - trailing - first, 0)


def _check_mask(attention_mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    mask = to_numpy(attention_mask, name="attention_mask")
    if mask.shape != shape:
        raise MRopeError(f"attention_mask has shape {tuple(mask.shape)}, input_ids has {tuple(shape)}")
    if mask.dtype.kind == "f":  # a float mask (transformers reads it as mask.bool()): 0.0 and 1.0 only
        nonzero = mask != 0
        bad = np.flatnonzero(nonzero & (mask != 1))
        if bad.size:
            where = np.unravel_index(int(bad[0]), shape)
            raise MRopeError(
                f"attention_mask{list(map(int, where))} = {mask[where]}: a float mask must hold 0.0 or 1.0"
            )
        return nonzero
    if mask.dtype.kind not in "biu":
        raise MRopeError(f"attention_mask must hold 0/1 numbers or bools, got dtype {mask.dtype}")
    return mask.astype(bool, copy=False)
