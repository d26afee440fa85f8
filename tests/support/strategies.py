"""Hypothesis strategies and prompt builders shared by mrope's tests: the one prompt generator.

- :class:`Prompt` is one tokenized prompt with its grids (and, for the Omni families, its audio lengths),
  laid out as the family's processor lays it out; :func:`build_prompt` builds one from parts (text,
  :class:`Image`, :class:`Video`, :class:`Audio`) and :func:`prompts` generates random ones for a family.
- :func:`pad_batch` pads prompts left or right into a :class:`Batch` (ids plus attention_mask,
  grids of all rows in row order); :func:`batches` generates them.
- :func:`streams` generates raw core inputs (rows of text runs and vision blocks) for the core tests.

Grids are drawn *after* merging (H', W') and multiplied by the family's merge size, so every grid
is valid; layouts (:func:`layout_kind`, the family's ``prompt_layout``; :mod:`mrope.prompts` lays them out):

- ``whole`` (Qwen2-VL, Qwen2.5-VL, PaddleOCR-VL): ``vision_start, pads * (T*H'*W'), vision_end`` for
  images and videos.
- ``frames`` (Qwen3-VL(-MoE), Qwen3.5, Cosmos3, Cohere Compass): images the same; a video of T frames is
  T groups ``<timestamp text> vision_start, video pads * (H'*W'), vision_end``.
- ``glm`` (GLM-4.1V/4.5V/4.6V, GLM-OCR): images ``image_start, image pads, image_end``; a video is
  ``video_start``, then per frame ``image_start, image pads * (H'*W'), image_end, <timestamp text>``,
  then ``video_end``.
- ``ernie`` (Ernie-4.5-VL): images ``image_start, image pads, image_end``; a video ``video_start, video
  pads * (T/temporal_merge_size*H'*W'), video_end`` (T a multiple of the temporal merge).
- ``omni`` (Qwen2.5-Omni, Qwen3-Omni thinkers): images and videos as ``whole``; an audio ``audio_start,
  audio pads, audio_end``; a video with its audio (``use_audio_in_video``) ``vision_start, audio_start,
  video pads, audio pads, audio_end, vision_end``.
- ``newline`` (HY-V4-VL): pads only, ``T*H'*(W'+1)`` (a newline token ends each merged row); like
  ``whole`` without markers, same-modality neighbours get text between them.
- ``hunyuan`` (HunYuan-VL): images only, of one frame: ``image_start, image pads * (H'*(W'+1) + 2),
  image_end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from mrope import prompts as prompts_module
from mrope.core import Blocks
from mrope.core.segments import FIELDS, HW0, IS_TEXT, ORIGIN, START, T0, WIDTH

# ids that no family treats as special (Cosmos3-Edge's special ids lie below 100)
TEXT_IDS = st.integers(100, 1000)
# fractional and awkward second_per_grid_ts values (as the processor's float32), plus 0 and whole seconds
# (0.7: k * 1.4 truncates differently in float32 and float64, 7 vs 6 at k = 5)
SECONDS = (0.5, 1.3, 0.25, 2.7, 0.7, 1.0, 2.0, 0.0, 0.1, 1 / 3, 4.0, 5.5)


def f32(x: float) -> float:
    """``x`` rounded to float32, as a Python float (what a float32 tensor holds)."""
    return float(np.float32(x))


@dataclass(frozen=True)
class Image:
    """An image of merged size H' x W' (grid ``(frames, H'*merge, W'*merge)``; processors give 1 frame)."""

    height: int
    width: int
    frames: int = 1


@dataclass(frozen=True)
class Video:
    """A video of T frames of merged size H' x W'; ``timestamps[k]``: text ids before/after frame k
    (families that split frames; missing entries are empty); ``audio``: the length (``audio_seqlens``
    entry) of the audio it carries (Omni, ``use_audio_in_video``), or None."""

    frames: int
    height: int
    width: int
    timestamps: tuple[tuple[int, ...], ...] = ()
    audio: int | None = None

    def timestamp(self, k: int) -> list[int]:
        return list(self.timestamps[k]) if k < len(self.timestamps) else []


@dataclass(frozen=True)
class Audio:
    """An audio of ``seqlen`` feature frames (its ``audio_seqlens`` entry; Omni families only)."""

    seqlen: int


Part = Sequence[int] | Image | Video | Audio


@dataclass(frozen=True)
class Prompt:
    """One prompt: token ids and the grids (before merging) of its images and videos, in order; for the
    Omni families also its audio lengths (a list, None for other families) and ``use_audio_in_video``."""

    input_ids: list[int]
    image_grid_thw: list[list[int]]
    video_grid_thw: list[list[int]]
    second_per_grid_ts: list[float] | None = None
    audio_seqlens: list[int] | None = None
    use_audio_in_video: bool = False

    def kwargs(self, kind: str = "list") -> dict[str, Any]:
        """Grids, times (and Omni's audio inputs) as keyword arguments (``None`` where empty) as lists,
        numpy or torch.

        torch: int64 grids and audio lengths, float32 times, as the processors produce them."""
        if kind not in ("list", "numpy", "torch"):
            raise ValueError(f"kind must be list, numpy or torch, got {kind!r}")
        out: dict[str, Any] = {
            "image_grid_thw": self.image_grid_thw or None,
            "video_grid_thw": self.video_grid_thw or None,
            "second_per_grid_ts": self.second_per_grid_ts,
        }
        if self.audio_seqlens is not None:
            out["audio_seqlens"] = self.audio_seqlens or None
        if kind != "list":
            out = {k: None if v is None else _as_array(k, v, kind) for k, v in out.items()}
        if self.audio_seqlens is not None:
            out["use_audio_in_video"] = self.use_audio_in_video
        return out

    def describe(self) -> str:
        """A short summary for assertion messages (hypothesis prints the full example)."""
        audio = "" if self.audio_seqlens is None else f", audio_seqlens={self.audio_seqlens}"
        return (
            f"L={len(self.input_ids)}, images={self.image_grid_thw}, videos={self.video_grid_thw}, "
            f"second_per_grid_ts={self.second_per_grid_ts}{audio}"
            + (", use_audio_in_video" if self.use_audio_in_video else "")
        )


def _as_array(name: str, values: Any, kind: str) -> Any:
    """``values`` of the keyword ``name`` as the processors give it: float32 times, int64 otherwise."""
    floating = name == "second_per_grid_ts"
    if kind == "numpy":
        return np.asarray(values, dtype=np.float32 if floating else np.int64)
    import torch

    return torch.tensor(values, dtype=torch.float32 if floating else torch.int64)


def layout_kind(family: Any) -> str:
    """How the family lays out its items: ``whole``, ``frames``, ``glm``, ``ernie`` or ``omni``."""
    if family.prompt_layout is None:
        raise KeyError(f"no prompt layout for {family.model_type}: set its family's prompt_layout")
    return family.prompt_layout.name


def build_prompt(
    family: Any,
    parts: Sequence[Part],
    second_per_grid_ts: Sequence[float] | None = None,
    *,
    markers: bool = True,
    use_audio_in_video: bool = False,
) -> Prompt:
    """The prompt of ``parts`` as the family's processor lays it out (:func:`mrope.prompts.build_prompt`).

    ``markers=False`` (``whole`` layout only) leaves out vision_start/vision_end, so that a block can sit
    at the very first or last index of the prompt (transformers finds blocks without markers).
    ``use_audio_in_video`` (Omni): every video carries its audio (``Video.audio``)."""
    merge = family.spatial_merge_size
    library_parts: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Image):
            library_parts.append({"image": [part.frames, part.height * merge, part.width * merge]})
        elif isinstance(part, Audio):
            library_parts.append({"audio": part.seqlen})
        elif isinstance(part, Video):
            if use_audio_in_video and part.audio is None:
                raise ValueError("use_audio_in_video: every video needs its audio (Video.audio)")
            video: dict[str, Any] = {
                "video": [part.frames, part.height * merge, part.width * merge],
                "timestamp_tokens": [part.timestamp(k) for k in range(part.frames)],
            }
            if part.audio is not None:
                video["audio"] = part.audio
            library_parts.append(video)
        else:
            library_parts.append({"text": [int(i) for i in part]})
    laid_out = prompts_module.build_prompt(
        family, library_parts, use_audio_in_video=use_audio_in_video, markers=markers
    )
    seconds = None if second_per_grid_ts is None else [f32(s) for s in second_per_grid_ts]
    return Prompt(
        laid_out.input_ids,
        laid_out.image_grid_thw,
        laid_out.video_grid_thw,
        seconds,
        laid_out.audio_seqlens,
        laid_out.use_audio_in_video,
    )


def text(n: int, first: int = 1) -> list[int]:
    """``n`` plain text ids (deterministic, for hand-built prompts)."""
    return list(range(first, first + n))


# hand-picked layouts that random prompts reach only sometimes: name -> (parts, second_per_grid_ts)
_EDGE_LAYOUTS: dict[str, tuple[list[Part], list[float] | None]] = {
    "image at the very start": ([Image(2, 3), text(3)], None),
    "video at the very end": ([text(2), Video(4, 2, 2, ((7,), (8, 9)))], [0.5]),
    "only a video": ([Video(3, 2, 2, ((5,), (), (6, 7)))], [2.7]),
    "only an image": ([Image(1, 1)], None),
    "only markers between blocks": (
        [text(1), Image(2, 2), Video(5, 1, 2), Image(1, 1), Video(2, 3, 1), text(1)],
        [1.3, 0.25],
    ),
    "long video of small frames": ([text(2), Video(6, 1, 1, ((1, 2),) * 6), text(3)], [0.7]),
    "wide image after tall video": ([text(4), Video(2, 5, 1), text(1), Image(1, 6), text(2)], [0.0]),
}
EDGE_LAYOUTS = tuple(_EDGE_LAYOUTS)


def edge_layout(family: Any, name: str) -> Prompt:
    """The hand-picked layout ``name`` (one of ``EDGE_LAYOUTS``) for ``family``."""
    parts, seconds = _EDGE_LAYOUTS[name]
    return build_prompt(family, parts, seconds if family.uses_second_per_grid_ts else None)


@dataclass(frozen=True)
class _Sizes:
    """The bounds of :func:`prompts` (see there)."""

    max_images: int
    max_videos: int
    max_audios: int
    max_text: int
    max_side: int
    max_frames: int
    max_image_frames: int
    max_audio_seqlen: int
    markers: bool
    use_audio_in_video: bool


def _min_audio_seqlen(family: Any) -> int:
    """The shortest audio that gives at least one placeholder token."""
    return int(np.argmax(family.audio_tokens(np.arange(64)) > 0))


@st.composite
def _items(draw: st.DrawFn, family: Any, sizes: _Sizes) -> list[Image | Video | Audio]:
    kind = layout_kind(family)
    side = st.integers(1, sizes.max_side)
    # HunYuan-VL: images of one frame (the processor's; transformers reads only H and W), no video
    image_frames = st.just(1) if kind == "hunyuan" else st.integers(1, sizes.max_image_frames)
    images = [
        Image(draw(side), draw(side), draw(image_frames))
        for _ in range(draw(st.integers(0, sizes.max_images)))
    ]
    split = kind in ("frames", "glm")
    temporal = getattr(family, "temporal_merge_size", 1) if kind == "ernie" else 1
    seqlen = st.integers(_min_audio_seqlen(family), sizes.max_audio_seqlen) if kind == "omni" else None
    videos = []
    for _ in range(draw(st.integers(0, 0 if kind == "hunyuan" else sizes.max_videos))):
        frames = draw(st.integers(1, sizes.max_frames)) * temporal
        stamps = tuple(tuple(draw(st.lists(TEXT_IDS, max_size=4))) for _ in range(frames)) if split else ()
        audio = draw(seqlen) if sizes.use_audio_in_video and seqlen is not None else None
        videos.append(Video(frames, draw(side), draw(side), stamps, audio))
    audios = (
        [] if seqlen is None else [Audio(draw(seqlen)) for _ in range(draw(st.integers(0, sizes.max_audios)))]
    )
    return draw(st.permutations(images + videos + audios))


@st.composite
def _prompts(draw: st.DrawFn, family: Any, sizes: _Sizes) -> Prompt:
    items = draw(_items(family, sizes))
    runs = []
    for i in range(len(items) + 1):
        inner = 0 < i < len(items)
        # without markers, same-modality neighbours need text between them to stay separate blocks
        bare = not sizes.markers or layout_kind(family) == "newline"
        min_size = 1 if (inner and bare) or not items else 0
        # length 0 often: blocks at the very start or end, blocks with only their markers between
        size = draw(st.one_of(st.just(min_size), st.integers(min_size, sizes.max_text)))
        runs.append(draw(st.lists(TEXT_IDS, min_size=size, max_size=size)))
    parts: list[Part] = [runs[0]]
    for item, run in zip(items, runs[1:], strict=True):
        parts += [item, run]
    num_videos = sum(isinstance(i, Video) for i in items)
    seconds = None
    # the Omni families always get the processor's times; the others sometimes none (1 second per grid)
    omni = layout_kind(family) == "omni"
    if family.uses_second_per_grid_ts and (omni or draw(st.integers(0, 4)) > 0):
        value = st.one_of(st.sampled_from(SECONDS), st.floats(0, 8, width=32))
        seconds = [draw(value) for _ in range(num_videos)]
    return build_prompt(
        family, parts, seconds, markers=sizes.markers, use_audio_in_video=sizes.use_audio_in_video
    )


def prompts(
    family: Any,
    *,
    max_images: int = 4,
    max_videos: int = 2,
    max_audios: int = 2,
    max_text: int = 20,
    max_side: int = 6,
    max_frames: int = 6,
    max_image_frames: int = 1,
    max_audio_seqlen: int = 400,
    markers: bool = True,
    use_audio_in_video: bool = False,
) -> st.SearchStrategy[Prompt]:
    """Random prompts of ``family``: text runs of random length (often empty), 0-``max_images`` images
    and 0-``max_videos`` videos (Omni: and 0-``max_audios`` audios) in random order, merged H', W' in
    1..``max_side``, T in 1..``max_frames`` (times Ernie's temporal merge size; images T in
    1..``max_image_frames``), random and fractional ``second_per_grid_ts`` (or ``None``) for families
    that scale time, audio lengths up to ``max_audio_seqlen`` feature frames; with
    ``use_audio_in_video`` (Omni) every video carries its audio. Never empty."""
    sizes = _Sizes(
        max_images,
        max_videos,
        max_audios,
        max_text,
        max_side,
        max_frames,
        max_image_frames,
        max_audio_seqlen,
        markers,
        use_audio_in_video,
    )
    return _prompts(family, sizes)


def text_prompts(max_text: int = 20, *, family: Any = None) -> st.SearchStrategy[Prompt]:
    """Text-only prompts (at least one token); for an Omni ``family``, with its (empty) audio inputs."""
    audio = [] if family is not None and layout_kind(family) == "omni" else None
    return st.lists(TEXT_IDS, min_size=1, max_size=max_text).map(lambda ids: Prompt(ids, [], [], None, audio))


@dataclass(frozen=True)
class Batch:
    """Padded prompts: ids and attention_mask (B, L) as lists, grids (and Omni's audio lengths) of all
    rows in row order."""

    input_ids: list[list[int]]
    attention_mask: list[list[int]]
    image_grid_thw: list[list[int]]
    video_grid_thw: list[list[int]]
    second_per_grid_ts: list[float] | None
    prompts: tuple[Prompt, ...]
    side: str
    audio_seqlens: list[int] | None = None
    use_audio_in_video: bool = False

    def kwargs(self, kind: str = "list") -> dict[str, Any]:
        """Grids and times as keyword arguments, see :meth:`Prompt.kwargs`."""
        return Prompt(
            [],
            self.image_grid_thw,
            self.video_grid_thw,
            self.second_per_grid_ts,
            self.audio_seqlens,
            self.use_audio_in_video,
        ).kwargs(kind)

    def real(self, row: int) -> slice:
        """The slice of row ``row`` that holds its prompt (not padding)."""
        n, length = len(self.prompts[row].input_ids), len(self.input_ids[row])
        return slice(length - n, length) if self.side == "left" else slice(0, n)

    def describe(self) -> str:
        return f"{self.side}-padded batch of {[len(p.input_ids) for p in self.prompts]} tokens, " + "; ".join(
            f"row {i}: {p.describe()}" for i, p in enumerate(self.prompts)
        )


def pad_batch(prompts: Sequence[Prompt], side: str = "left", *, pad_id: int = 0, extra: int = 0) -> Batch:
    """Pad ``prompts`` on ``side`` to the longest plus ``extra``; mask 1 on real tokens.

    Grids (and audio lengths) are concatenated in row order. ``second_per_grid_ts`` is ``None`` if no
    prompt has it, else one value per video (1.0, the peers' default, for prompts without it)."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be left or right, got {side!r}")
    length = max(len(p.input_ids) for p in prompts) + extra
    ids, mask = [], []
    for p in prompts:
        pad = length - len(p.input_ids)
        real = [1] * len(p.input_ids)
        if side == "left":
            ids.append([pad_id] * pad + p.input_ids)
            mask.append([0] * pad + real)
        else:
            ids.append(p.input_ids + [pad_id] * pad)
            mask.append(real + [0] * pad)
    seconds = None
    if any(p.second_per_grid_ts is not None for p in prompts):
        seconds = [s for p in prompts for s in (p.second_per_grid_ts or [1.0] * len(p.video_grid_thw))]
    audio = None
    if any(p.audio_seqlens is not None for p in prompts):
        audio = [n for p in prompts for n in (p.audio_seqlens or [])]
    return Batch(
        ids,
        mask,
        [g for p in prompts for g in p.image_grid_thw],
        [g for p in prompts for g in p.video_grid_thw],
        seconds,
        tuple(prompts),
        side,
        audio,
        any(p.use_audio_in_video for p in prompts),
    )


@st.composite
def _batches(
    draw: st.DrawFn, family: Any, max_rows: int, prompt: st.SearchStrategy[Prompt], placeholder_pads: bool
) -> Batch:
    rows = draw(st.lists(st.one_of(prompt, text_prompts(family=family)), min_size=1, max_size=max_rows))
    # padding that reads as a placeholder must be ignored by the mask
    pads = [0]
    if placeholder_pads:
        pads += [family.image_token_id] + (
            [family.video_token_id] if hasattr(family, "video_token_id") else []
        )
    return pad_batch(
        rows,
        draw(st.sampled_from(["left", "right"])),
        pad_id=draw(st.sampled_from(pads)),
        extra=draw(st.integers(0, 2)),
    )


def batches(
    family: Any, *, max_rows: int = 3, placeholder_pads: bool = True, **prompt_options: Any
) -> st.SearchStrategy[Batch]:
    """Random left- or right-padded batches of 1-``max_rows`` rows, prompts of :func:`prompts` mixed
    with text-only rows; with ``placeholder_pads`` the pad id is sometimes a placeholder id."""
    options = {"max_images": 2, "max_videos": 1} | prompt_options
    return _batches(family, max_rows, prompts(family, **options), placeholder_pads)


# -- core inputs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stream:
    """Core input: rows ``[row_starts[r], row_starts[r] + row_lengths[r])`` of a stream of ``length``
    tokens (padding may lie between, before and after rows) and their vision blocks, sorted by start."""

    row_starts: np.ndarray
    row_lengths: np.ndarray
    length: int
    blocks: Blocks

    def rows(self) -> list[tuple[int, list[tuple[int, int, int, int, float]]]]:
        """Per row: (length, [(start within row, frames, height, width, interval)]), for the reference."""
        out = []
        b = self.blocks
        for lo, n in zip(self.row_starts.tolist(), self.row_lengths.tolist(), strict=True):
            mine = [
                (
                    int(b.start[i]) - lo,
                    int(b.frames[i]),
                    int(b.height[i]),
                    int(b.width[i]),
                    float(b.interval[i]),
                )
                for i in range(b.start.size)
                if lo <= b.start[i] < lo + n
            ]
            out.append((n, mine))
        return out

    def describe(self) -> str:
        """A short summary for assertion messages."""
        b = self.blocks
        grids = list(zip(b.frames.tolist(), b.height.tolist(), b.width.tolist(), strict=True))
        return (
            f"rows at {self.row_starts.tolist()} of lengths {self.row_lengths.tolist()} in {self.length}, "
            f"blocks at {b.start.tolist()} (T, H', W') {grids} intervals {b.interval.tolist()}"
        )

    def row_mask(self) -> np.ndarray:
        """(length,) bool: True on tokens inside a row."""
        mask = np.zeros(self.length, dtype=bool)
        for lo, n in zip(self.row_starts.tolist(), self.row_lengths.tolist(), strict=True):
            mask[lo : lo + n] = True
        return mask


INTERVALS = st.one_of(
    st.sampled_from([1.0, 0.0, 0.5, 2.0, 2.6, 5.4, 0.25, 1 / 3, 1.4]), st.floats(0, 20, width=32)
)


@st.composite
def streams(
    draw: st.DrawFn,
    *,
    max_rows: int = 3,
    max_blocks: int = 4,
    max_text: int = 6,
    max_side: int = 5,
    max_frames: int = 5,
    padding: bool = True,
) -> Stream:
    """Random core inputs: 1-``max_rows`` rows (possibly empty), each text runs (often empty) around
    0-``max_blocks`` blocks of any T, H', W' and float32 interval; with ``padding``, 0-3 padding
    tokens before each row and after the last."""
    pad = st.integers(0, 3) if padding else st.just(0)
    run = st.one_of(st.just(0), st.integers(0, max_text))
    side = st.integers(1, max_side)
    starts, frames, heights, widths, intervals = [], [], [], [], []
    row_starts, row_lengths = [], []
    pos = 0
    for _ in range(draw(st.integers(1, max_rows))):
        pos += draw(pad)
        row_starts.append(pos)
        for _ in range(draw(st.integers(0, max_blocks))):
            pos += draw(run)
            t, h, w = draw(st.integers(1, max_frames)), draw(side), draw(side)
            starts.append(pos)
            frames.append(t)
            heights.append(h)
            widths.append(w)
            intervals.append(draw(INTERVALS))
            pos += t * h * w
        pos += draw(run)
        row_lengths.append(pos - row_starts[-1])
    pos += draw(pad)

    def arr(values: list, dtype: Any) -> np.ndarray:
        return np.asarray(values, dtype=dtype).reshape(-1)

    frames_, heights_, widths_ = arr(frames, np.int64), arr(heights, np.int64), arr(widths, np.int64)
    blocks = Blocks(
        start=arr(starts, np.int64),
        frames=frames_,
        height=heights_,
        width=widths_,
        interval=arr(intervals, np.float32),
        num_tokens=frames_ * heights_ * widths_,
    )
    return Stream(arr(row_starts, np.int64), arr(row_lengths, np.int64), pos, blocks)


@st.composite
def segment_data(draw: st.DrawFn, max_segments: int = 8) -> np.ndarray:
    """A segment table's data (6, S) int64 in the rows of :mod:`mrope.core.segments`: sorted by start,
    the first at 0, any fields, each origin at most 3 before its start (for the renderer's primitives)."""
    count = draw(st.integers(1, max_segments))
    gaps = draw(st.lists(st.integers(0, 6), min_size=count - 1, max_size=count - 1))
    data = np.zeros((len(FIELDS), count), dtype=np.int64)
    data[START] = np.cumsum([0, *gaps])
    for row, low, high in ((T0, 0, 50), (HW0, 0, 50), (WIDTH, 1, 5), (IS_TEXT, 0, 1)):
        data[row] = draw(st.lists(st.integers(low, high), min_size=count, max_size=count))
    data[ORIGIN] = data[START] - np.array(draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)))
    return data
