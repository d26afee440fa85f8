"""The inputs of one call, checked once at the API boundary and passed through the pipeline as one object.

:meth:`mrope.families.Family.request_inputs` builds a :class:`RequestInputs` from what the caller gave
(``input_ids`` and the grids as lists, numpy arrays or torch tensors; offsets; Omni audio inputs): every
check on the inputs is made there, once, and each later step (parse, place, render) reads the checked
arrays from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from .._backends import to_int_array

if TYPE_CHECKING:
    import torch

    #: what the public API accepts for an array: a (nested) list of numbers, a numpy array, a torch tensor
    ArrayLike: TypeAlias = np.ndarray | torch.Tensor | list[Any] | tuple[Any, ...]
else:
    ArrayLike: TypeAlias = Any  # numpy arrays, torch tensors (imported only where torch is) and lists


class Seconds(NamedTuple):
    """The seconds per grid step of each video, as the caller gave them.

    ``dtype`` is what transformers' Qwen2.5-VL computes its scaled time in under ``compat="transformers"``
    (:func:`mrope.core.place.transformers_time`): a torch tensor's or numpy array's floating dtype
    (``"bfloat16"``, ``"float16"``, ``"float32"``, ``"float64"``, or another one numpy or torch names),
    ``"int"`` for integer ones; a list of floats is ``"float32"``, as ``torch.tensor`` (and a processor)
    holds it."""

    values: np.ndarray  # (num_videos,) float64, each value exactly as given (checked)
    dtype: str


_ONE_ROW = np.zeros(1, dtype=np.int64)  # row_starts of a one-prompt stream (read-only)
_ONE_ROW.flags.writeable = False


class RequestInputs(NamedTuple):
    """One token stream's checked inputs: one prompt, or the real tokens of a padded batch laid end to end.

    Immutable (a named tuple: built on every call, it costs less than a frozen dataclass). ``ids`` is
    the stream as a 1-D int64 array, or the prompt as the caller's list when both offsets are given
    (only the items' own tokens are then read). Rows are ``[row_starts[r], row_starts[r] +
    row_lengths[r])`` (:meth:`rows`; None: one prompt, one row over all of ``ids``); ids outside every
    row are not placeholders (the batch API blanks padding to -1).
    """

    ids: np.ndarray | list[int]
    images: np.ndarray  # (num_images, 3) int64 (T, H, W) before merging, checked
    videos: np.ndarray  # (num_videos, 3) int64, checked
    seconds: Seconds | None  # seconds per grid step of each video, or None (not given)
    image_offsets: list[int] | None = None  # one prompt: where each image's placeholders start
    video_offsets: list[int] | None = None
    #: frame families (Qwen3-VL, GLM-4.1V): where each video frame's placeholders start, every video's
    #: frames in order (int64); None: the frames are found in ``ids``
    frame_offsets: np.ndarray | None = None
    audio_tokens: np.ndarray | None = None  # (num_audios,) int64 placeholder tokens per audio (Omni)
    use_audio_in_video: bool = False  # Omni: every video carries its audio, interleaved
    row_starts: np.ndarray | None = None  # (num_rows,) int64; None: one row
    row_lengths: np.ndarray | None = None  # (num_rows,) int64

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """``(row_starts, row_lengths)`` of the stream (int64 arrays)."""
        if self.row_starts is None or self.row_lengths is None:
            return _ONE_ROW, np.array([len(self.ids)], dtype=np.int64)
        return self.row_starts, self.row_lengths

    @property
    def array(self) -> np.ndarray:
        """``ids`` as a 1-D int64 array (a list kept for the offsets path is converted here, where a
        parser scans it)."""
        ids = self.ids
        return ids if isinstance(ids, np.ndarray) else to_int_array(ids, name="input_ids", ndim=1)

    @property
    def length(self) -> int:
        """Tokens in the stream."""
        return len(self.ids)

    @property
    def is_one_row(self) -> bool:
        """Whether the stream is one row covering it all (one prompt)."""
        if self.row_starts is None or self.row_lengths is None:
            return True
        return self.row_starts.size == 1 and int(self.row_lengths[0]) == len(self.ids)
