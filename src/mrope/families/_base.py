"""What every family shares: typed settings, input checks, and the parse-place-render pipeline.

A family module subclasses :class:`Family` as a dataclass and states only what differs: its settings
(typed fields, read from a config by :meth:`Family.read_settings`) and how a stream parses into blocks
(:meth:`Family.parse`). The public calls (:meth:`Family.positions`, :meth:`Family.segments`,
:func:`mrope.get_rope_index`) check their inputs once into a :class:`~mrope.families.RequestInputs`
(:meth:`Family.request_inputs`); the pipeline then reads that one object: parse, then
:func:`mrope.core.place` (the conventions), :func:`mrope.core.build_segments` and
:func:`mrope.render.render_all` (the render formula of :mod:`mrope.core.segments`), or the one-prompt fast
path of :mod:`mrope.core.one_row`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

import numpy as np

from .._arrays import to_int_array
from .._errors import MRopeError
from ..core import (
    FEW_BLOCKS,
    BlockRow,
    Blocks,
    Compat,
    ItemBlocks,
    Placed,
    SegmentTable,
    block_rows,
    build_segments,
    place,
    render_one_row,
    segments_one_row,
)
from ..core.one_row import OneRowLayout, layout_one_row
from ..core.place import LARGEST_POSITION, check_compat, check_video_time
from ..core.rows import PLAIN_ROWS, SegmentRows
from ..render import render_all
from ._grids import check_grids, raise_too_many_tokens
from ._seconds import check_frame_offsets, check_second_per_grid_ts
from .inputs import ArrayLike, MultimodalInputs, RequestInputs, Seconds, SplitItems, split_items
from .layout import PromptLayout

# what each setting holds (token ids, named ``*_id``, are ints >= 0): "size", an int >= 1; "rate", a
# finite number > 0 and at most LARGEST_POSITION (positions per second, seconds per chunk); "choice", one
# of SETTING_CHOICES
SETTING_KINDS = {
    "spatial_merge_size": "size",
    "temporal_merge_size": "size",
    "n_window": "size",
    "num_dims": "size",
    "tokens_per_second": "rate",
    "position_id_per_seconds": "rate",
    "seconds_per_chunk": "rate",
    "downsample_mode": "choice",
}
#: the values a "choice" setting takes
SETTING_CHOICES: dict[str, tuple[str, ...]] = {"downsample_mode": ("16x", "4x")}


def check_setting(model_type: str, name: str, value: Any) -> None:
    """Refuse a setting of the wrong kind (see :data:`SETTING_KINDS`): a NaN, negative or string rate
    would give silently wrong positions, a zero merge size a division by zero."""
    kind = "id" if name.endswith("_id") else SETTING_KINDS[name]
    if kind == "choice":
        if value not in SETTING_CHOICES[name]:
            choices = " or ".join(map(repr, SETTING_CHOICES[name]))
            raise MRopeError(f"{model_type}: {name} must be {choices}, got {value!r}")
        return
    is_int = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if kind == "rate":
        is_number = is_int or isinstance(value, (float, np.floating))
        if not (is_number and 0 < value <= LARGEST_POSITION):  # NaN fails too
            raise MRopeError(
                f"{model_type}: {name} must be a finite number > 0 and at most {LARGEST_POSITION}, "
                f"got {value!r}"
            )
    elif not is_int or value < (1 if kind == "size" else 0):
        what = "a positive int" if kind == "size" else "an int >= 0 (a token id)"
        raise MRopeError(f"{model_type}: {name} must be {what}, got {value!r}")


#: the grids of a prompt given as items placed by its family's rule on items (read-only: shared)
_NO_GRIDS = np.zeros((0, 3), dtype=np.int64)
_NO_GRIDS.flags.writeable = False

#: the fields every family has; the others are its settings
BASE_FIELDS = ("model_type", "compat", "video_time", "config")


@dataclass(eq=False, repr=False, kw_only=True)
class Family:
    """A model family's M-RoPE position rule, bound to the settings of one config.

    A family module subclasses this as a dataclass whose fields beyond :data:`BASE_FIELDS` are its
    settings (typed; a default where the family has one, else required), read from a config by
    :meth:`read_settings` and checked at construction (:func:`check_setting`); it implements
    :meth:`parse`. Construct one with :func:`mrope.from_config`, or directly:
    ``Qwen2VL("qwen2_vl", image_token_id=..., video_token_id=..., spatial_merge_size=2)``.
    """

    model_types: ClassVar[tuple[str, ...]] = ()
    uses_second_per_grid_ts: ClassVar[bool] = False
    # keyword inputs beyond the grids that the family takes (Omni: audio_seqlens, use_audio_in_video);
    # every other family refuses them
    extra_inputs: ClassVar[tuple[str, ...]] = ()
    #: whether the family takes items' offsets (the Omni families locate their items in input_ids)
    takes_offsets: ClassVar[bool] = True
    #: whether a video is one block per frame, the frames separated by timestamp text found in the prompt
    #: (Qwen3-VL, GLM-4.1V): such a family also takes ``frame_offsets``
    video_frames_in_prompt: ClassVar[bool] = False
    #: whether the family places its items as blocks; False: every token, placeholders included, is
    #: positioned as text (MiniCPM-V 4.6, Qwen3-ASR), and an engine's items give no inputs
    places_items: ClassVar[bool] = True
    #: whether one prompt's :class:`PromptItem` values (``items=``, a few) are checked and placed by
    #: :meth:`item_rows` on Python values; False: they become the array inputs (set by the family
    #: whose rule has the path, cleared for a subclass overriding a hook the path does not call)
    rule_on_items: ClassVar[bool] = False
    #: the ``architectures`` of remote-code configs, whose ``model_type`` varies, and the model type
    #: :func:`mrope.from_config` gives the family for each
    architectures: ClassVar[dict[str, str]] = {}
    rotary_layout: ClassVar[str] = "chunked"
    rotary_is_neox_style: ClassVar[bool] = True
    #: transformers' default ``mrope_section`` of the family's text configs, by text ``model_type`` (given
    #: to the rotary builder by :meth:`rotary_arguments`, for a config that leaves it out)
    default_mrope_sections: ClassVar[Mapping[str, tuple[int, int, int]]] = {}
    #: how the processor lays out images and videos as tokens (:class:`mrope.families.layout.PromptLayout`,
    #: which :func:`mrope.prompts.build_prompt` asks); None: no layout known (give ``input_ids``)
    prompt_layout: ClassVar[PromptLayout | None] = None
    #: marker token ids a config may lack (the released checkpoints' values); a config's own win
    default_markers: ClassVar[Mapping[str, int]] = {}
    #: rows of positions the family gives (:meth:`positions`: ``(num_dims, L)``): the segment model's
    #: three, (t, h, w), for every family but HunYuan-VL (:attr:`segment_rows`)
    num_dims: ClassVar[int] = 3
    #: how the family's rows follow from the rendered rows (t, h, w) of its segments: as they are for
    #: every family but HunYuan-VL (:class:`mrope.core.SegmentRows`; the serving table applies it; a class
    #: attribute, read at every admission)
    segment_rows: ClassVar[SegmentRows] = PLAIN_ROWS
    #: whether a token at sequence index ``i >= L`` (past the prompt) has position ``i + delta``, which the
    #: engine integrations serve (False: GLM-Image, whose generated image tokens take positions that
    #: transformers caches at prefill, :mod:`mrope.families.glm_image`: :meth:`segments` covers them, and
    #: :meth:`batch_generation_positions` gives them, which the transformers patch caches on the model)
    decode_follows_index: ClassVar[bool] = True
    #: where a setting that is not a top-level or ``vision_config`` field is read from (the error for a
    #: config without it names the field)
    setting_sources: ClassVar[Mapping[str, str]] = {}

    model_type: str = field(kw_only=False)
    #: where text resumes after a vision block: "vllm" or "transformers" (see :mod:`mrope.core.place`)
    compat: Compat = "vllm"
    #: the arithmetic of scaled video time under compat "vllm": "float32" or "float64"
    #: (:data:`mrope.core.place.VIDEO_TIMES`); under "transformers" the seconds' dtype decides
    video_time: str = "float32"
    #: the config the family was read from (its text config describes the rotary: :meth:`rotary_arguments`)
    config: Mapping[str, Any] = field(default_factory=dict)
    if TYPE_CHECKING:  # every family has it (a setting field of each)
        spatial_merge_size: int

    def __post_init__(self) -> None:
        check_compat(self.compat)
        check_video_time(self.video_time)
        self.config = dict(self.config or {})
        for name in self.setting_names():
            value = getattr(self, name)
            if value is None:
                raise MRopeError(f"{self.model_type} needs the setting {name!r} (not found in the config)")
            check_setting(self.model_type, name, value)
        self._video_temporal = int(self.video_temporal_merge)  # (a field read costs less than a property's)

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        """The family's settings: its dataclass fields beyond :data:`BASE_FIELDS`, in order."""
        return tuple(f.name for f in fields(cls) if f.init and f.name not in BASE_FIELDS)

    @classmethod
    def required_settings(cls) -> tuple[str, ...]:
        """The settings without a default (a config must give them)."""
        return tuple(
            f.name
            for f in fields(cls)
            if f.init and f.name not in BASE_FIELDS and f.default is MISSING and f.default_factory is MISSING
        )

    @property
    def settings(self) -> dict[str, Any]:
        """The family's settings and their values."""
        return {name: getattr(self, name) for name in self.setting_names()}

    def with_compat(self, compat: Compat) -> Family:
        """This family under another convention, with the same settings (overrides and ``video_time``
        included)."""
        return replace(self, compat=compat)

    @classmethod
    def unwrap_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config as the family reads it (its settings, markers and text config): the config itself,
        but for a family whose checkpoint wraps its model's config (Alpamayo 2 Super's ``vlm_config``)."""
        return dict(config)

    @classmethod
    def read_settings(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """Settings found in a config dict: top level first, then ``vision_config``."""
        vision = config.get("vision_config") or {}
        if not isinstance(vision, Mapping):
            raise MRopeError(
                f"{config.get('model_type')} config: vision_config must be a mapping (a dict), got "
                f"{type(vision).__name__}"
            )
        found = {}
        for name in cls.setting_names():
            if name in config and config[name] is not None:
                found[name] = config[name]
            elif name in vision and vision[name] is not None:
                found[name] = vision[name]
        return found

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.settings.items())
        time = "" if self.video_time == "float32" else f", video_time={self.video_time!r}"
        shown = f", {shown}" if shown else ""
        return f"{type(self).__name__}({self.model_type!r}, compat={self.compat!r}{time}{shown})"

    def prompt_markers(self) -> dict[str, int]:
        """The marker token ids of the family's prompt layout: :attr:`default_markers`, then the
        config's ``*_token_id`` ints, then the settings."""
        given = {k: v for k, v in self.config.items() if k.endswith("_token_id") and isinstance(v, int)}
        return {**self.default_markers, **given, **self.settings}

    def segment_rows_error(self, what: str) -> MRopeError | None:
        """Why ``what`` (an engine integration), which takes the segment model's rows (t, h, w) only,
        cannot take this family's positions; None: it can."""
        return None

    def vllm_difference(self) -> str | None:
        """Why this family's positions, under its settings, are not those of vLLM's own code for its
        model (None: they are, as :mod:`mrope.integrations.vllm` serves them): the family's knowledge of
        vLLM's rule, which the integration reads. (Rows other than (t, h, w), tokens past the prompt and
        inputs the integration does not read are the integration's own gates.)"""
        return None

    def batch_generation_positions(self, input_ids: ArrayLike, **inputs: Any) -> list[np.ndarray]:
        """Each row's positions (3, n) of the tokens generated after a padded batch's prompts, for a
        family whose generated tokens do not take ``index + delta`` (:attr:`decode_follows_index`)."""
        raise MRopeError(
            f"{self.model_type}: a token past the prompt takes index + delta (decode_follows_index): there "
            "are no generation positions to cache"
        )

    # -- the family's rows from the segment model's ------------------------------------------------
    def audio_run_ids(self) -> tuple[int, ...]:
        """The token ids that, outside every vision block, are audio (positioned as audio runs); none for
        a family without audio."""
        return ()

    def audio_start_id(self) -> int | None:
        """The token that opens each audio (None for families without audio)."""
        return None

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        """Whether each vision block (by its first token in ``ids``) belongs to a video, as a bool array;
        a family without videos has none."""
        return np.zeros(block_starts.shape, dtype=bool)

    # -- the family-specific part -------------------------------------------------------------------
    def parse(self, inputs: RequestInputs) -> Blocks | ItemBlocks:
        """The blocks of the stream (rows as in :class:`RequestInputs`): grid blocks, or items that the
        family lays out itself (the Omni thinkers)."""
        raise NotImplementedError

    # -- the API boundary ---------------------------------------------------------------------------
    def request_inputs(
        self,
        input_ids: ArrayLike,
        inputs: MultimodalInputs | None = None,
        *,
        row_starts: np.ndarray | None = None,
        row_lengths: np.ndarray | None = None,
        **keywords: Any,
    ) -> RequestInputs:
        """The checked inputs of one call: every rule on them is checked here, once.

        ``inputs`` (or its fields as keywords, :meth:`MultimodalInputs.gather`) are what :meth:`positions`
        takes; items are read as the arrays they say. ``row_starts`` and ``row_lengths`` (int64 arrays,
        the batch API) make ``input_ids`` a stream of several rows; by default it is one prompt. Inputs
        that only some families take (audio, :attr:`MultimodalInputs.extra`) are refused here by a family
        that does not take them (:meth:`check_extra_inputs`), and read by one that does
        (:meth:`check_audio_inputs`, :meth:`read_extra_inputs`)."""
        given = inputs
        if keywords or type(given) is not MultimodalInputs:
            given = MultimodalInputs.gather(inputs, keywords)
        if given.items is not None:
            given = given.as_arrays()
        if given.extra or given.audio_seqlens is not None or given.use_audio_in_video is not None:
            self.check_extra_inputs(given.family_inputs())
        image_offsets, video_offsets = given.image_offsets, given.video_offsets
        if (image_offsets is not None or video_offsets is not None) and not self.takes_offsets:
            raise MRopeError(self.no_offsets_message())
        ids: np.ndarray | list[int]
        if image_offsets is None or video_offsets is None or type(input_ids) is not list:
            ids = to_int_array(input_ids, name="input_ids", ndim=1)
        else:  # only the items' own tokens are read: a list is not converted
            ids = input_ids
        images, videos, seconds = self.check_vision_inputs(
            given.image_grid_thw, given.video_grid_thw, given.second_per_grid_ts, len(ids)
        )
        audio_tokens, audio_in_video = (  # (a family without its own inputs refused any audio input)
            self.check_audio_inputs(given.audio_seqlens, given.use_audio_in_video)
            if self.extra_inputs
            else (None, False)
        )
        checked_video_offsets = check_offsets(video_offsets, len(videos), "video")
        if self.video_frames_in_prompt and checked_video_offsets is not None:  # (frames in prompt order)
            check_prompt_order(
                checked_video_offsets, "video", f"{self.model_type} finds each video's frames in the prompt"
            )
        frame_offsets = given.frame_offsets
        if frame_offsets is not None:
            frame_offsets = check_frame_offsets(self, frame_offsets, videos, checked_video_offsets)
        checked = RequestInputs(  # (positionally: built at every admission)
            ids,
            images,
            videos,
            seconds,
            None,  # item_rows
            check_offsets(image_offsets, len(images), "image"),
            checked_video_offsets,
            frame_offsets,
            audio_tokens,
            audio_in_video,
            row_starts,
            row_lengths,
        )
        return self.read_extra_inputs(checked, given.extra) if self.extra_inputs else checked

    def read_extra_inputs(self, checked: RequestInputs, extra: Mapping[str, Any]) -> RequestInputs:
        """``checked`` with what the family's own inputs (its :attr:`extra_inputs`, given in ``extra``;
        any other was refused) say; called for a family that has such inputs (given or not), and the
        base says nothing."""
        return checked

    def no_offsets_message(self) -> str:
        """The refusal of offsets by a family that does not take them."""
        return f"{self.model_type} takes no image_offsets or video_offsets"

    def from_items(self, input_ids: ArrayLike, inputs: MultimodalInputs) -> RequestInputs:
        """The checked inputs of one prompt given as ``inputs.items`` (which replace every other input,
        :class:`MultimodalInputs`): where the family has a rule on items (:attr:`rule_on_items`) and
        they are few, the prompt's blocks placed from their Python values by :meth:`item_rows`
        (:attr:`RequestInputs.item_rows`); else the checked inputs of the same values as arrays."""
        items = inputs.items
        if items is None:
            raise MRopeError("from_items reads inputs.items: none are given")
        if type(input_ids) is not list:
            input_ids = to_int_array(input_ids, name="input_ids", ndim=1)
        if self.rule_on_items and len(items) <= FEW_BLOCKS:
            rows = self.item_rows(input_ids, split_items(items)) if items else []  # (no items: no blocks)
            return RequestInputs(input_ids, _NO_GRIDS, _NO_GRIDS, None, rows)  # (item_rows)
        return self.request_inputs(input_ids, inputs)

    def item_rows(self, ids: Any, items: SplitItems) -> list[BlockRow]:
        """One prompt's blocks from its items' Python values (``ids``: a list or a 1-D int64 array),
        checked as :meth:`request_inputs` checks them: the path of families with
        :attr:`rule_on_items`."""
        raise NotImplementedError(f"{type(self).__name__} has no rule on items")

    def check_audio_inputs(
        self, audio_seqlens: ArrayLike | None, use_audio_in_video: bool | None
    ) -> tuple[np.ndarray | None, bool]:
        """Placeholder tokens per audio and whether videos carry their audio; called for a family with
        its own inputs (:attr:`extra_inputs`: the Omni families' are the audio inputs), the others
        refused any by :meth:`check_extra_inputs`."""
        return None, False

    # -- shared pipeline ----------------------------------------------------------------------------
    def place_stream(self, inputs: RequestInputs) -> Placed:
        """The stream's blocks, placed under the family's convention."""
        return place(self.parse(inputs), *inputs.rows(), self.compat)

    def stream_positions(self, inputs: RequestInputs) -> tuple[np.ndarray, np.ndarray]:
        """Positions (num_dims, L) of a stream (int64, float32 for Qwen3-Omni) and each row's delta."""
        blocks = self.parse(inputs)
        if isinstance(blocks, Blocks) and inputs.is_one_row and blocks.start.size <= FEW_BLOCKS:
            positions, delta = render_one_row(block_rows(blocks), inputs.length, self.compat)
            return positions, np.array([delta], dtype=np.int64)
        placed = place(blocks, *inputs.rows(), self.compat)
        if inputs.length == 0:
            return np.zeros((3, 0), dtype=np.int64), placed.delta
        return render_all(build_segments(placed, inputs.length)), placed.delta

    def segments(
        self,
        input_ids: ArrayLike,
        inputs: MultimodalInputs | None = None,
        *,
        layout: bool = False,
        **keywords: Any,
    ) -> tuple[SegmentTable | OneRowLayout, int | float]:
        """The segment table of one prompt and its delta: O(blocks + frames) state for serving.

        The arguments are those of :meth:`positions`. Omni tables carry an ``origin`` row and, for
        Qwen3-Omni, float fields and a float delta (see :mod:`mrope.core.segments`). ``layout``: a prompt
        of a few blocks gives its :class:`mrope.core.OneRowLayout` instead (its segments before they
        are written anywhere: :class:`mrope.serving.PositionTable` writes them straight into its pool).
        GLM-Image's table covers the tokens its prompt generates too (:mod:`mrope.families.glm_image`).
        The table renders the rows (t, h, w); the family's rows follow from them by :attr:`segment_rows`
        (HunYuan-VL: index rows in front, the rendered rows reversed), and the delta is the family's.
        A family that computes its positions itself (MiniCPM-V 4.7) gives the segments recovered from
        them (:func:`mrope.render.segments_of`)."""
        if keywords or type(inputs) is not MultimodalInputs:
            inputs = MultimodalInputs.gather(inputs, keywords)
        if inputs.items is None:
            return self.prompt(self.request_inputs(input_ids, inputs), segments=True, layout=layout)
        return self.prompt(self.from_items(input_ids, inputs), segments=True, layout=layout)

    def positions(
        self, input_ids: ArrayLike, inputs: MultimodalInputs | None = None, **keywords: Any
    ) -> tuple[np.ndarray, int | float]:
        """Positions of one prompt, as an engine computes them at admission.

        Parameters
        ----------
        input_ids : list, numpy array or torch tensor, shape (L,), integer
        inputs : :class:`mrope.MultimodalInputs`, optional
            The prompt's images, videos, audios and offsets (or items), and a family's own inputs: what
            each field means is said there.
        **keywords : the fields of :class:`mrope.MultimodalInputs` by their names (``image_grid_thw=``,
            ``items=``, ...), and a family's own inputs by theirs (MiniCPM-V 4.7's ``target_sizes``), in
            place of ``inputs``: ``family.positions(ids, image_grid_thw=grids)`` is
            ``family.positions(ids, MultimodalInputs(image_grid_thw=grids))``.

        Returns
        -------
        positions : numpy.ndarray, shape (num_dims, L), int64 (rows t, h, w; :attr:`num_dims` is 3 for
            every family but HunYuan-VL, see :mod:`mrope.families.hunyuan_vl`); float32 for Qwen3-Omni
        delta : int (float for Qwen3-Omni), ``positions.max() + 1 - L``; a token at sequence index
            ``i >= L`` has position ``i + delta`` on all three rows (GLM-Image: 0, and the tokens it
            generates take ``generation_positions``: :attr:`decode_follows_index`).

        Raises
        ------
        MRopeError
            Placeholder counts that do not match the grids or audio lengths, bad grids, times or
            lengths, bad input shapes, audio inputs given to a family without audio; offsets of the
            wrong count, outside the prompt, overlapping, or not at placeholders of the item's kind;
            ``inputs`` and keywords both given, an input of the wrong kind (:class:`MultimodalInputs`).
        """
        if keywords or type(inputs) is not MultimodalInputs:
            inputs = MultimodalInputs.gather(inputs, keywords)
        if inputs.items is None:
            return self.prompt(self.request_inputs(input_ids, inputs), segments=False)
        return self.prompt(self.from_items(input_ids, inputs), segments=False)

    @overload
    def prompt(
        self, inputs: RequestInputs, *, segments: Literal[True], layout: bool = False
    ) -> tuple[SegmentTable | OneRowLayout, int | float]: ...
    @overload
    def prompt(
        self, inputs: RequestInputs, *, segments: Literal[False], layout: bool = False
    ) -> tuple[np.ndarray, int | float]: ...
    def prompt(
        self, inputs: RequestInputs, *, segments: bool, layout: bool = False
    ) -> tuple[SegmentTable | OneRowLayout | np.ndarray, int | float]:
        """The segment table (``segments``; with ``layout``, the one-row layout of a prompt of a few
        blocks) or the positions of one prompt, and its delta as a Python number: the blocks its items
        placed (:attr:`RequestInputs.item_rows`), else those parsed from it."""
        rows = inputs.item_rows
        blocks = self.prompt_blocks(inputs) if rows is None else rows
        return self.one_stream(blocks, len(inputs.ids), segments=segments, layout=layout)

    def one_stream(
        self, blocks: Blocks | ItemBlocks | list[BlockRow], length: int, *, segments: bool, layout: bool
    ) -> tuple[SegmentTable | OneRowLayout | np.ndarray, int | float]:
        """:meth:`prompt`'s result from one stream's ``blocks`` over ``length`` tokens: the one-row path
        for a few blocks, placement and segments for more."""
        if type(blocks) is not list and isinstance(blocks, Blocks) and blocks.start.size <= FEW_BLOCKS:
            blocks = block_rows(blocks)
        if type(blocks) is list:
            if not segments:
                return render_one_row(blocks, length, self.compat)
            return (layout_one_row if layout else segments_one_row)(blocks, length, self.compat)
        one_row = (np.zeros(1, dtype=np.int64), np.array([length], dtype=np.int64))
        placed = place(blocks, *one_row, self.compat)
        table = build_segments(placed, length)
        return (table if segments else render_all(table)), placed.delta[0].item()

    def prompt_blocks(self, inputs: RequestInputs) -> Blocks | ItemBlocks | list[BlockRow]:
        """The blocks of one prompt, sorted: :class:`Blocks` (or :class:`ItemBlocks`), or
        :data:`BlockRow` tuples when few.

        ``inputs.ids``: a 1-D int64 array, or a list when both offsets are given (:func:`as_ids` converts
        it where a parser scans it). Families that take item offsets override this; the base parses
        the prompt as a one-row stream."""
        if inputs.image_offsets is not None or inputs.video_offsets is not None:
            raise MRopeError(self.no_offsets_message())
        return self.parse(inputs)

    def check_extra_inputs(self, inputs: Mapping[str, Any]) -> None:
        """Refuse inputs the family does not take (accepted-but-ignored arguments hide bugs), naming the
        model types that take them: the families that state them in their :attr:`extra_inputs`."""
        unknown = sorted(set(inputs) - set(self.extra_inputs)) if inputs else None
        if unknown:
            owners = sorted(
                {t for cls in _families() if set(unknown) & set(cls.extra_inputs) for t in cls.model_types}
            )
            takes = (
                f"it takes {', '.join(self.extra_inputs)}"
                if self.extra_inputs
                else f"only for {', '.join(owners)}"
                if owners
                else "no family does"
            )
            raise MRopeError(f"{self.model_type} takes no {', '.join(unknown)} ({takes})")

    def rotary_arguments(self) -> dict[str, Any]:
        """What this family decides of its rotary embedding, as the keyword arguments of
        :func:`mrope.rotary.rotary_embedding_from_config`: its text config (``text_config``, else the config
        itself), ``layout``, ``is_neox_style``, and ``default_mrope_section``, transformers' default for
        the text config's ``model_type`` (None where no family states one), used where the config leaves
        ``mrope_section`` out. :func:`mrope.rotary.rotary_embedding_for` builds the module from them."""
        text_config = self.config.get("text_config") or self.config
        return {
            "text_config": text_config,
            "layout": self.rotary_layout,
            "is_neox_style": self.rotary_is_neox_style,
            "default_mrope_section": default_mrope_section(text_config.get("model_type", "")),
        }

    # -- checks -------------------------------------------------------------------------------------
    @property
    def video_temporal_merge(self) -> int:
        """How many grid steps of a video make one temporal step of its block (Ernie-4.5-VL: its
        ``temporal_merge_size``); a video's T must be divisible by it."""
        return 1

    @property
    def default_second_per_grid_ts(self) -> float:
        """The seconds per grid step of a video given none (1.0; Qwen3-Omni under vLLM's rule: 2.0, as
        vLLM's code assumes)."""
        return 1.0

    @property
    def time_rate(self) -> float:
        """Time index units per second of video (families that scale time: Qwen2.5-VL's
        ``tokens_per_second``, the Omni families' ``position_id_per_seconds``)."""
        raise NotImplementedError

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """The checked image grids, video grids and seconds per video grid step (None if not given) of a
        stream of ``length`` tokens.

        Every rule on these inputs is here, and all of them cost O(items): grid values, the grids'
        placeholder tokens in all against ``length`` (see :func:`check_grids`; checked before any
        per-item or per-frame array is built, and exactly: a count past int64 would otherwise wrap), and
        the time of each video's last frame (see :func:`._seconds.check_second_per_grid_ts`)."""
        merge, temporal = self.spatial_merge_size, self._video_temporal
        images, image_tokens = check_grids(image_grid_thw, "image_grid_thw", merge, 1)
        videos, video_tokens = check_grids(video_grid_thw, "video_grid_thw", merge, temporal)
        if image_tokens + video_tokens > length:
            raise_too_many_tokens(images, videos, length, merge, temporal)
        if second_per_grid_ts is None and not len(videos):  # (nothing to check: no time)
            return images, videos, None
        return images, videos, check_second_per_grid_ts(self, second_per_grid_ts, videos)


def _families() -> list[type[Family]]:
    """Every family class defined (the subclasses of :class:`Family`, at any depth)."""
    found, todo = [], [Family]
    while todo:
        subclasses = todo.pop().__subclasses__()
        found += subclasses
        todo += subclasses
    return found


def default_mrope_section(text_model_type: str) -> tuple[int, ...] | None:
    """transformers' default ``mrope_section`` of a text ``model_type``, as a family states it in
    :attr:`Family.default_mrope_sections` (any family: Alpamayo 2 Super's text config is Qwen3-VL's);
    None where none does."""
    for cls in _families():
        section = cls.default_mrope_sections.get(text_model_type)
        if section is not None:
            return section
    return None


def check_offsets(offsets: Any, count: int, what: str) -> list[int] | None:
    """``{what}_offsets`` as a list of Python ints, one per item (``count`` items); None if not given."""
    if offsets is None:
        return None
    values = offsets
    if type(offsets) is not list or (offsets and any(type(o) is not int for o in offsets)):
        values = to_int_array(offsets, name=f"{what}_offsets", ndim=1).tolist()
    if len(values) != count:
        raise MRopeError(
            f"{what}_offsets has {len(values)} values but {what}_grid_thw describes {count} {what}s: "
            "one offset per item"
        )
    return values


def check_prompt_order(offsets: list[int], what: str, why: str) -> None:
    """Refuse ``{what}_offsets`` that do not increase where a family finds those items in the prompt, in
    prompt order (``why``), pairing them with the grids in that order: offsets out of order cannot then
    say which grid is whose. (Where each item is placed at its own offset with its own grid, offsets come
    in any order.) O(items)."""
    for k in range(1, len(offsets)):
        if offsets[k] < offsets[k - 1]:
            raise MRopeError(
                f"{what}_offsets[{k}] = {offsets[k]} comes before {what}_offsets[{k - 1}] = "
                f"{offsets[k - 1]}: {why}, in prompt order, so the {what}s (their offsets and grids) must be "
                "given in prompt order"
            )


def as_ids(ids: Any) -> np.ndarray:
    """The prompt as a 1-D int64 array (a list kept by :meth:`Family.positions` is converted here, where
    a parser scans it)."""
    return to_int_array(ids, name="input_ids", ndim=1)
