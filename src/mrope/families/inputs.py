"""The inputs of one call: as the caller gives them, one object; checked once; passed on as one object.

:class:`MultimodalInputs` holds what a caller gives beside ``input_ids`` (the grids as lists, numpy arrays
or torch tensors; seconds; offsets; Omni audio inputs; items; a family's own inputs), unchecked but for
the kind of each field: every public call (:meth:`mrope.Family.positions`, :meth:`mrope.Family.segments`,
:meth:`mrope.PositionTable.add`, :func:`mrope.get_rope_index`, :func:`mrope.show`) takes it, or its
fields as keywords (:meth:`MultimodalInputs.gather`), and passes that one object on.
:meth:`mrope.families.Family.request_inputs` checks it against the prompt and the family into a
:class:`RequestInputs`: every rule on the values is checked there, once, and each later step (parse,
place, render) reads the checked arrays from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeAlias

import numpy as np

from .._arrays import int_list, to_int_array
from .._errors import MRopeError

if TYPE_CHECKING:
    import torch

    from ..core import BlockRow

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


_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})  # no family inputs given (read-only, shared)
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
    #: one prompt given as items, placed by its family's rule on items (:meth:`Family.from_items`): its
    #: blocks, which the prompt's render reads in place of a parse (``images`` and ``videos`` are then
    #: empty: the items' grids are in the blocks); None: the prompt is parsed
    item_rows: list[BlockRow] | None = None
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


class MultimodalInputs:
    """What a caller gives beside ``input_ids``, as one object: every public call takes it (``inputs``,
    the argument after ``input_ids``) or its fields as keywords, and passes this one object on.

    Each field is checked for its kind when the object is made (an array is not a string, a mapping or a
    set; ``use_audio_in_video`` is a bool; ``extra`` maps names to values; ``items`` is an ordered
    collection and replaces the grids, seconds and offsets); the values' rules (grids against the prompt,
    offsets at their placeholders, a family that takes the input) are checked by the family that reads
    them (:meth:`mrope.families.Family.request_inputs`). Immutable (setting a field raises
    ``AttributeError``); None (the default) means not given. Made from keywords (:meth:`gather`, what a
    call given keywords does) it holds the fields given; the others read as the class's None. It is
    built once per admission, so it is a plain object (no dataclass: a frozen one costs a microsecond
    to make).

    Attributes
    ----------
    image_grid_thw, video_grid_thw : (num_items, 3) (T, H, W) before merging, optional
    second_per_grid_ts : (num_videos,) seconds per temporal grid step (families that scale time;
        transformers' Omni code calls it ``second_per_grids``). Qwen2.5-VL under
        ``compat="transformers"`` computes its time in their dtype, as transformers does: a torch
        tensor's or numpy array's (bfloat16, float16, float32, float64; integers stay integers), a
        list of floats as float32 (what ``torch.tensor`` makes of it); under ``compat="vllm"`` in
        the family's ``video_time`` from their values, whatever the dtype
        (:mod:`mrope.families.qwen2_5_vl`). The Omni families read them as float32.
    image_offsets, video_offsets : (num_items,) int, optional; one prompt only
        Where each item lies in ``input_ids``, as an engine's processor recorded it (vLLM:
        ``mm_feature.mm_position.offset``, see ``mrope.integrations.vllm.features``).
        Given for a modality (an empty list meaning "none"), its items are taken from the offsets
        and the prompt is not scanned for its placeholders: item ``i`` pairs with grid ``i`` (the
        items in any order: they are taken in prompt order) and must not overlap another item; its
        first and last placeholder tokens are checked. For
        ``image_offsets`` and, in families whose video is one block (Qwen2-VL, Qwen2.5-VL,
        PaddleOCR-VL, Ernie-4.5-VL), ``video_offsets``: the index of the item's first placeholder
        token. Families that split a video into frames separated by timestamp text (Qwen3-VL and its
        kin, GLM-4.1V and its kin) find the frames in ``input_ids``, in prompt order;
        ``video_offsets[i]`` is where video ``i``'s placeholder range starts (at or before its first
        frame), the videos in prompt order (offsets out of order are refused, naming them), and it
        is checked that each video's frames lie between its offset and the next one. The Omni
        families do not take offsets. With both offsets given, a list ``input_ids`` is never
        converted to an array (but where a frame family must find its frames: give
        ``frame_offsets``).
    audio_seqlens : (num_audios,) audio feature lengths, in prompt order (Omni families only)
    use_audio_in_video : bool, whether every video carries its audio interleaved (Omni only)
    frame_offsets : (num_frames,) int, optional, with ``video_offsets``; frame families only (Qwen3-VL,
        GLM-4.1V and their kin): where each video frame's placeholder tokens start, every video's
        frames in order (vLLM: the runs of ``mm_position.is_embed``; out of order, refused). The frames
        are then taken from them, not found in the prompt; each frame's first and last tokens are
        checked.
    items : list of :class:`PromptItem`, optional; one prompt only, in place of the grids, seconds and
        offsets: each image and video as ``(modality, offset, (T, H, W), seconds)`` in Python values, as
        an engine's per-item records hold them (:func:`split_items` says what each must be). They mean
        what the same values as arrays mean and are checked as those are (a video's seconds as a tensor
        or numpy value keep its dtype, seconds of mixed dtypes are refused); a family with a rule on
        items (:attr:`mrope.Family.rule_on_items`: Qwen2-VL, Qwen2.5-VL, PaddleOCR-VL) checks and places
        a few of them without building an array (a serving engine's admission), the others convert
        them. Another iterable than a list or tuple is read into a list once.
    extra : mapping of str to value, optional: the inputs of a family that takes others than these (its
        :attr:`mrope.Family.extra_inputs`: GLM-Image's ``images_per_sample``, MiniCPM-V 4.7's
        ``target_sizes``, ``target_sizes_videos``, ``downsample_mode``); every other family refuses
        them. As keywords they are given by their own names; a None value is not given.

    Examples
    --------
    >>> inputs = MultimodalInputs(image_grid_thw=[[1, 4, 4]])
    >>> inputs.given()
    ('image_grid_thw',)
    """

    image_grid_thw: ArrayLike | None = None
    video_grid_thw: ArrayLike | None = None
    second_per_grid_ts: ArrayLike | None = None
    image_offsets: ArrayLike | None = None
    video_offsets: ArrayLike | None = None
    audio_seqlens: ArrayLike | None = None
    use_audio_in_video: bool | None = None
    frame_offsets: ArrayLike | None = None
    items: Sequence[PromptItem] | None = None
    extra: Mapping[str, Any] = _NO_EXTRA

    #: the fields, in order
    FIELDS: ClassVar[tuple[str, ...]] = (
        "image_grid_thw",
        "video_grid_thw",
        "second_per_grid_ts",
        "image_offsets",
        "video_offsets",
        "audio_seqlens",
        "use_audio_in_video",
        "frame_offsets",
        "items",
        "extra",
    )

    def __new__(
        cls,
        *,
        image_grid_thw: ArrayLike | None = None,
        video_grid_thw: ArrayLike | None = None,
        second_per_grid_ts: ArrayLike | None = None,
        image_offsets: ArrayLike | None = None,
        video_offsets: ArrayLike | None = None,
        audio_seqlens: ArrayLike | None = None,
        use_audio_in_video: bool | None = None,
        frame_offsets: ArrayLike | None = None,
        items: Sequence[PromptItem] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> MultimodalInputs:
        given = {
            "image_grid_thw": image_grid_thw,
            "video_grid_thw": video_grid_thw,
            "second_per_grid_ts": second_per_grid_ts,
            "image_offsets": image_offsets,
            "video_offsets": video_offsets,
            "audio_seqlens": audio_seqlens,
            "use_audio_in_video": use_audio_in_video,
            "frame_offsets": frame_offsets,
            "items": items,
            "extra": extra,
        }
        return cls.gather(None, {name: value for name, value in given.items() if value is not None})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MultimodalInputs is immutable: make a new one (got {name} = ...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"MultimodalInputs is immutable: make a new one (got del {name})")

    def __repr__(self) -> str:
        given = ", ".join(f"{name}={value!r:.60}" for name, value in vars(self).items() if value is not None)
        return f"MultimodalInputs({given})"

    def __reduce__(self) -> tuple[Any, tuple[None, dict[str, Any]]]:
        """Pickled as its fields (``extra`` as a dict), made again by :meth:`gather`."""
        fields = dict(vars(self))
        if "extra" in fields:
            fields["extra"] = dict(fields["extra"])
        return (MultimodalInputs.gather, (None, fields))

    @classmethod
    def gather(cls, inputs: MultimodalInputs | None, keywords: dict[str, Any]) -> MultimodalInputs:
        """The one inputs object of a call that takes ``inputs`` or the same as ``keywords`` (the fields by
        their names, a family's own inputs by theirs, into :attr:`extra`), checked for their kinds: the
        one check of every way an object is made. ``inputs`` itself where no keyword is given; both, or
        an ``inputs`` of another type, are refused by name.

        A call that takes either checks ``keywords or type(inputs) is not MultimodalInputs`` before calling
        this, so that an object passed on costs nothing more."""
        if inputs is not None:
            if not isinstance(inputs, cls):
                raise MRopeError(
                    f"inputs must be a mrope.MultimodalInputs (or its fields given as keywords), got "
                    f"{type(inputs).__name__}"
                )
            if keywords:
                raise MRopeError(
                    f"give the inputs as one MultimodalInputs or as keywords, not both: got inputs and "
                    f"{', '.join(keywords)}"
                )
            return inputs
        if not keywords:
            return _NOTHING
        for name, value in keywords.items():  # (arrays and items as a list: checked here, none copied)
            if name in _ARRAY_FIELDS or name == "use_audio_in_video":
                if value is not None and type(value) not in _ARRAY_TYPES:
                    _check_kind(name, value)
            elif name != "items" or len(keywords) > 1 or type(value) not in _ITEM_LISTS:
                keywords = _with_others(keywords)
                break
        made = object.__new__(cls)  # (the fields given; the others are the class's None)
        made.__dict__.update(keywords)
        return made

    def given(self) -> tuple[str, ...]:
        """The names of the inputs given (not None), fields in order, then the keys of :attr:`extra`."""
        named = tuple(name for name in self.FIELDS[:-1] if getattr(self, name) is not None)
        return named + tuple(self.extra)

    def family_inputs(self) -> dict[str, Any]:
        """The inputs given that only some families take, by name: the audio inputs (the Omni families'),
        and :attr:`extra`."""
        found = dict(self.extra)
        if self.audio_seqlens is not None:
            found["audio_seqlens"] = self.audio_seqlens
        if self.use_audio_in_video is not None:
            found["use_audio_in_video"] = self.use_audio_in_video
        return found

    def as_arrays(self) -> MultimodalInputs:
        """The same inputs with :attr:`items` given as the arrays and offsets they say
        (:func:`items_as_inputs`); itself where no items are given."""
        if self.items is None:
            return self
        return self.gather(None, items_as_inputs(self.items))


#: what an array input is never (a string holds no numbers; a mapping or a set has no order)
_NOT_ARRAYS = (str, bytes, Mapping, Set, bool)
#: the types found to be none of those (a value's kind is its type's: what is given most needs no
#: subclass check)
_ARRAY_TYPES = {list, tuple, np.ndarray}
_ITEM_LISTS = frozenset((list, tuple))  # items as they are kept (another iterable is read into a list)
_FIELD_SET = frozenset(MultimodalInputs.FIELDS)
#: the fields that hold arrays (checked for their kind: not a string, a mapping or a set)
_ARRAY_FIELDS = _FIELD_SET - {"use_audio_in_video", "items", "extra"}


def _check_kind(name: str, value: Any) -> None:
    """Refuse an array field's ``value`` that is a string, bytes, a mapping, a set or a bool, or a
    ``use_audio_in_video`` that is no bool, naming it."""
    if name == "use_audio_in_video":
        if not isinstance(value, (bool, np.bool_)):
            raise MRopeError(f"use_audio_in_video must be a bool, got {value!r}")
    elif isinstance(value, _NOT_ARRAYS):
        raise MRopeError(
            f"{name} must be an array, a tensor or a list of numbers, got "
            f"{type(value).__name__} {value!r:.80}"
        )
    elif len(_ARRAY_TYPES) < 64:
        _ARRAY_TYPES.add(type(value))


def _with_others(given: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``given`` (a call's keywords) that hold a family's own inputs (by name, or in
    ``extra``), or items, checked as :meth:`MultimodalInputs.gather` checks them: None values dropped,
    a family's inputs moved into ``extra`` (read-only), items as a list or tuple and refused beside any
    other input."""
    checked: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in given.items():
        if name not in _FIELD_SET:
            extra[name] = value
        elif value is not None:
            if name in _ARRAY_FIELDS or name == "use_audio_in_video":
                _check_kind(name, value)
            checked[name] = value
    if extra:
        if "extra" in checked:
            raise MRopeError(
                "give a family's own inputs in extra or as keywords, not both: got extra and "
                f"{', '.join(extra)}"
            )
        checked["extra"] = extra
    if "extra" in checked:
        checked["extra"] = _checked_extra(checked["extra"])
        if not checked["extra"]:
            del checked["extra"]
    items = checked.get("items")
    if items is not None:
        checked["items"] = item_list(items)
        if len(checked) > 1:
            others = [name for name in MultimodalInputs.FIELDS[:-2] if name in checked]
            others += list(checked.get("extra", ()))
            raise MRopeError(
                "items replaces the grids, second_per_grid_ts and the offsets (and takes no audio or "
                f"family inputs): give one or the other, got items and {', '.join(others)}"
            )
    return checked


def _checked_extra(extra: Any) -> Mapping[str, Any]:
    """A family's own inputs given (None values dropped), read-only: names that are strings and not a
    field of :class:`MultimodalInputs` (a field is given as itself)."""
    if not isinstance(extra, Mapping):
        raise MRopeError(f"extra must be a mapping of input names to values, got {type(extra).__name__}")
    for name in extra:
        if not isinstance(name, str):
            raise MRopeError(f"extra's input names must be strings, got {name!r}")
        if name in _FIELD_SET:
            raise MRopeError(f"{name} is a field of MultimodalInputs: give it as {name}=, not in extra")
    return MappingProxyType({name: value for name, value in extra.items() if value is not None})


_NOTHING = object.__new__(MultimodalInputs)  # no inputs given (shared: immutable)


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
    order = sort_order(image_offsets) if len(image_offsets) > 1 else None  # each modality in prompt order
    if order is not None:
        images, image_offsets = [images[k] for k in order], [image_offsets[k] for k in order]
    order = sort_order(video_offsets) if len(video_offsets) > 1 else None
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
