"""The inputs of one call, checked once at the API boundary and passed through the pipeline as one object.

:meth:`mrope.families.Family.request_inputs` builds a :class:`RequestInputs` from what the caller gave
(``input_ids`` and the grids as lists, numpy arrays or torch tensors; offsets; Omni audio inputs): every
check on the inputs is made there, once, and each later step (parse, place, render) reads the checked
arrays from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from .._arrays import int_list, to_int_array
from .._errors import MRopeError

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
    #: GLM-Image: the grids of each row, in order (its ``images_per_sample``), checked; None elsewhere
    images_per_row: np.ndarray | None = None
    #: MiniCPM-V 4.7: the spatial merge of the call's ``downsample_mode`` (its crops' grids are ``images``
    #: and ``videos`` as (1, H, W)); None elsewhere
    merge: int | None = None

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


class PromptItem(NamedTuple):
    """One image or video of one prompt at its placeholders' offset, in Python values: the form an
    engine's per-item records give (vLLM's ``mm_features``). ``items=`` of :meth:`Family.positions`,
    :meth:`Family.segments` and :meth:`mrope.PositionTable.add` takes them in place of the grids,
    seconds and offsets, and a family with a rule on items (:attr:`Family.rule_on_items`) checks and
    places them without building an array."""

    modality: str  # "image" or "video"
    offset: int  # where its placeholders start in input_ids (as image_offsets, video_offsets)
    grid: tuple[int, int, int] | list[int]  # (T, H, W) before merging
    #: a video's second_per_grid_ts: a Python number, or a one-value array or tensor whose dtype is kept
    #: (under ``compat="transformers"`` the dtype of a video's time arithmetic, as ``second_per_grid_ts``'s
    #: is); None: not given (1 second)
    seconds: Any = None


class SplitItems(NamedTuple):
    """A prompt's :class:`PromptItem` values by modality, each in prompt order (Python values)."""

    images: list[list[int]]  # (T, H, W) of each image
    videos: list[list[int]]
    image_offsets: list[int]
    video_offsets: list[int]
    seconds: list[float] | None  # each video's seconds (1 where a video has none); None: no video has
    #: the dtype the seconds mean, as :attr:`Seconds.dtype` (:func:`split_items`); None with no seconds
    seconds_dtype: str | None = None


def item_list(items: Any) -> list[Any] | tuple[Any, ...]:
    """``items`` as a list or tuple, in the order given: a list or tuple as it is, another iterable (a
    generator, an iterator, a deque) read into a list once; a string, bytes, a mapping, a set (no order)
    or what is not iterable is refused by name."""
    if type(items) is list or type(items) is tuple:
        return items
    if not isinstance(items, (str, bytes, Mapping, Set)):
        try:
            return list(items)
        except TypeError:
            pass
    raise MRopeError(
        f"items must be a list of PromptItem(modality, offset, grid, seconds) in prompt order, got "
        f"{type(items).__name__} {items!r:.80}"
    )


def split_items(items: Any) -> SplitItems:
    """``items`` by modality, each value a Python int (or float), checked for its kind: a modality of
    ``"image"`` or ``"video"``, an integer offset, three integers of grid (within int64), seconds for
    videos only; each modality's items in prompt order (:func:`sort_order`). The values' rules (grids,
    seconds, offsets in the prompt) are the family's checks."""
    images: list[list[int]] = []
    videos: list[list[int]] = []
    image_offsets: list[int] = []
    video_offsets: list[int] = []
    seconds: list[Any] = []
    for i, item in enumerate(items):
        try:
            modality, offset, grid, second = item
        except (TypeError, ValueError):
            raise MRopeError(
                f"items[{i}] must be a PromptItem(modality, offset, grid, seconds), got {item!r}"
            ) from None
        if type(offset) is not int:
            offset = _one_int(offset, f"items[{i}].offset")
        values = grid if type(grid) is list else list(grid) if type(grid) is tuple else None
        if values is None:
            values = int_list(grid, name=f"items[{i}].grid")
        if len(values) != 3:
            raise MRopeError(f"items[{i}].grid must be (T, H, W), got {grid!r}")
        if type(values[0]) is not int or type(values[1]) is not int or type(values[2]) is not int:
            values = int_list(values, name=f"items[{i}].grid")
        if modality == "video":
            _check_int64(values, "video", len(videos))
            videos.append(values)
            video_offsets.append(offset)
            seconds.append(second)
        elif modality == "image":
            if second is not None:
                raise MRopeError(f"items[{i}] is an image with seconds {second!r}: only videos have seconds")
            _check_int64(values, "image", len(images))
            images.append(values)
            image_offsets.append(offset)
        else:
            raise MRopeError(f"items[{i}] has modality {modality!r}: 'image' or 'video'")
    order = sort_order(image_offsets)  # each modality in prompt order, whatever the order given
    if order is not None:
        images, image_offsets = [images[k] for k in order], [image_offsets[k] for k in order]
    order = sort_order(video_offsets)
    if order is not None:
        videos, video_offsets, seconds = ([x[k] for k in order] for x in (videos, video_offsets, seconds))
    if seconds.count(None) == len(seconds):  # none given
        return SplitItems(images, videos, image_offsets, video_offsets, None)
    return SplitItems(images, videos, image_offsets, video_offsets, *_item_seconds(seconds))


def _item_seconds(seconds: list[Any]) -> tuple[list[float], str]:
    """The videos' seconds (None: 1) as Python floats, and the dtype they mean: what the same values give
    as one ``second_per_grid_ts`` (:attr:`Seconds.dtype`). Python numbers are a list's (``"int"`` if all
    are ints, else ``"float32"``); an array's or tensor's value keeps its own dtype (a bfloat16 tensor's
    time is computed in bfloat16 under ``compat="transformers"``, as the same tensor as
    ``second_per_grid_ts``). Seconds of different dtypes have no such meaning: refused."""
    values: list[float] = []
    listed: str | None = None  # the list's dtype of the Python numbers
    typed: tuple[str, int] | None = None  # the dtype of the first array or tensor, and its video
    for j, x in enumerate(seconds):
        if x is None or type(x) is int:
            values.append(1.0 if x is None else float(x))
            if x is not None and listed is None:
                listed = "int"
        elif type(x) is float:
            values.append(x)
            listed = "float32"
        else:
            values.append(_one_float(x, f"seconds of video {j}"))
            name = _typed_seconds_dtype(x)
            if typed is None:
                typed = (name, j)
            elif name != typed[0]:
                raise _mixed_seconds(typed, (name, j))
    if typed is None:
        return values, listed or "int"
    if listed is not None and listed != typed[0]:
        first = next(j for j, x in enumerate(seconds) if type(x) in (int, float))
        raise _mixed_seconds(
            typed, (f"{listed} (a Python {type(seconds[first]).__name__}, as a list)", first)
        )
    return values, typed[0]


def _typed_seconds_dtype(x: Any) -> str:
    """The dtype name (:func:`seconds_dtype`) of a video's seconds given as a numpy value or a tensor."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:  # (another number type: what a list of it holds)
        return "float32"
    if isinstance(dtype, np.dtype):
        return seconds_dtype(x, dtype)
    return seconds_dtype(x, _FLOAT64 if getattr(dtype, "is_floating_point", True) else _INT64)


def _mixed_seconds(a: tuple[str, int], b: tuple[str, int]) -> MRopeError:
    first, second = sorted((a, b), key=lambda named: named[1])
    return MRopeError(
        f"the videos' seconds come in different dtypes: {first[0]} (video {first[1]}) and {second[0]} "
        f"(video {second[1]}); second_per_grid_ts is one array, and under compat='transformers' its dtype "
        "is the arithmetic of the videos' time: give every video's seconds in one dtype"
    )


def seconds_dtype(given: Any, values_dtype: np.dtype) -> str:
    """The dtype of seconds as given (see :class:`Seconds`), from the dtype numpy read them in: ``"int"``
    for integers, a tensor's or an array's own floating dtype (a bfloat16 tensor reaches numpy as
    float32), ``"float32"`` for a list."""
    if values_dtype.kind in "iu":
        return "int"
    dtype = getattr(given, "dtype", None)
    if dtype is None:
        return "float32"
    name = _DTYPE_NAMES.get(dtype)
    if name is None:  # (a numpy dtype's type name: ``dtype.name`` costs microseconds)
        name = dtype.type.__name__ if isinstance(dtype, np.dtype) else str(dtype).removeprefix("torch.")
        if len(_DTYPE_NAMES) < 64:
            _DTYPE_NAMES[dtype] = name
    return name


#: dtype names by dtype object (numpy's and torch's), as :func:`seconds_dtype` found them
_DTYPE_NAMES: dict[Any, str] = {}
_FLOAT64, _INT64 = np.dtype(np.float64), np.dtype(np.int64)


def seconds_input(values: list[float], dtype: str) -> Any:
    """``second_per_grid_ts`` holding ``values`` in ``dtype`` (:func:`_item_seconds`), as array inputs give
    it: a list of Python numbers for a list's dtypes (``"int"``, ``"float32"``: the values exactly as
    given), else an array of that dtype (numpy's; torch's where numpy has none: bfloat16), which holds
    each value exactly (each was one of that dtype)."""
    if dtype == "int":
        return [int(v) for v in values]
    if dtype == "float32":
        return values
    try:
        return np.array(values, dtype=np.dtype(dtype))
    except TypeError:  # (a dtype numpy lacks: the values came from a tensor, torch is loaded)
        import torch

        return torch.tensor(values, dtype=getattr(torch, dtype))


def sort_order(offsets: list[int]) -> list[int] | None:
    """The order that sorts one modality's items by ``offsets`` (stable: items at one offset keep their
    order, and then overlap), or None where they already increase. Items and offsets may come in any
    order, each pairing with its own grid (and seconds): every path takes them in prompt order, as the
    scan finds them (one rule for any count of items). O(items) where already sorted."""
    for k in range(1, len(offsets)):
        if offsets[k] < offsets[k - 1]:
            return sorted(range(len(offsets)), key=offsets.__getitem__)
    return None


def items_as_inputs(items: Any) -> dict[str, Any]:
    """The keyword inputs (grids, seconds, offsets) that say what ``items`` say, for the array path
    (:func:`split_items`)."""
    split = split_items(items)
    seconds = (
        None if split.seconds is None else seconds_input(split.seconds, split.seconds_dtype or "float32")
    )
    return {
        "image_grid_thw": split.images or None,
        "video_grid_thw": split.videos or None,
        "second_per_grid_ts": seconds,
        "image_offsets": split.image_offsets,
        "video_offsets": split.video_offsets,
    }


def _check_int64(grid: list[int], what: str, j: int) -> None:
    """Refuse a grid value (Python ints) beyond int64, naming it as the array inputs do (item ``j`` of its
    modality ``what``): the same values as arrays are refused with the same message. (An offset beyond it
    lies outside the prompt, which the placement names, as for the arrays.)"""
    t, h, w = grid
    if min(t, h, w) >= _INT64_MIN and max(t, h, w) <= _INT64_MAX:
        return
    k, value = next((k, v) for k, v in enumerate(grid) if not _INT64_MIN <= v <= _INT64_MAX)
    raise MRopeError(f"{what}_grid_thw[{j}, {k}] = {value} does not fit in int64 (the integers mrope reads)")


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _one_int(value: Any, name: str) -> int:
    """An integer given as another type than ``int`` (numpy, a 0-d tensor), as a Python int."""
    values = int_list([value], name=name)
    return values[0]


def _one_float(value: Any, name: str) -> float:
    """A real number (a Python or numpy number, a one-element tensor) as a Python float."""
    if type(value) is float:
        return value
    if not isinstance(value, (bool, str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError, RuntimeError):
            pass
    raise MRopeError(f"{name} must be a number, got {value!r}")
