"""What the Omni thinkers (Qwen2.5-Omni, Qwen3-Omni) share: audio inputs, the item parser, the table.

An Omni prompt is text plus *items*, each a start marker, placeholder tokens and an end marker:

- image: ``vision_start, image pads, vision_end``;
- video: ``vision_start, video pads, vision_end``;
- audio: ``audio_start, audio pads, audio_end``;
- video with its audio (``use_audio_in_video``): ``vision_start, audio_start, <video and audio pads
  interleaved>, audio_end, vision_end``.

Items are found from their start markers (vectorized); the parser checks every item's placeholder
counts against its grid or audio length. Each family then describes its items as
:class:`~mrope.core.place.ItemBlocks`: which stream tokens each item spans, where transformers starts
new runs of text, and how one item's segments lie at a given base (:meth:`OmniFamily.item_blocks`).
Placing them (bases, where text resumes, deltas) is :func:`mrope.core.place`'s, and the table is built
by the shared :class:`~mrope.core.segments.SegmentBuilder`, as for every family.

Two rules, chosen by the family's settings (:attr:`OmniFamily.vllm_rule`):

- transformers' thinker code (the default, and under every setting but the one below; SGLang agrees);
- vLLM's (``compat="vllm", video_time="float64"``, the settings of
  :data:`mrope.integrations.vllm.features.VLLM_SETTINGS`: vLLM 0.32's ``get_mrope_input_positions`` of
  each thinker). Every item is a grid block followed by text at ``max(block) + 1``, with integer time
  ``trunc(k * (second_per_grid_ts * rate))`` in float64 (images: ``k * rate``) and integer positions
  (Qwen3-Omni's too: an int64 result); audio is text; a video with its audio is interleaved as each
  family's :meth:`OmniFamily.vllm_audio_in_video` says. The pair of settings names vLLM's arithmetic
  for every family, so one setting serves vLLM's whole rule here. :meth:`OmniFamily.vllm_item_blocks`
  writes it once for both thinkers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._arrays import to_int_array
from .._errors import MRopeError
from ..core.place import VIDEO_TIMES, ItemBlocks, frame_times, time_interval
from ..core.segments import SegmentBuilder
from ._base import Family
from .inputs import ArrayLike, RequestInputs
from .layout import Draft, Piece, PromptLayout, Run, count
from .qwen2_vl import video_by_placeholder

IMAGE, VIDEO, AUDIO, AUDIO_IN_VIDEO = 0, 1, 2, 3


@dataclass(frozen=True)
class Items:
    """The items of a stream in stream order; every array has shape (num_items,), int64."""

    kind: np.ndarray  # IMAGE, VIDEO, AUDIO or AUDIO_IN_VIDEO
    bos: np.ndarray  # stream index of the (first) start marker
    content: np.ndarray  # stream index of the first placeholder
    row: np.ndarray
    grid: np.ndarray  # row of image_grid_thw (images) or video_grid_thw (videos), else -1
    audio: np.ndarray  # index into audio_seqlens, else -1
    num_vision: np.ndarray  # vision placeholders (T * H' * W')
    num_audio: np.ndarray  # audio placeholders


class OmniLayout(PromptLayout):
    """The Omni thinkers': images and videos as Qwen2-VL's; an audio ``audio_start, audio pads,
    audio_end``; a video with its audio (``use_audio_in_video``) ``vision_start, audio_start, video pads,
    audio pads, audio_end, vision_end`` (its part gives the audio's feature frames, ``"audio"``)."""

    name = "omni"
    takes_audio = True

    def audio(self, draft: Draft, seqlen: int) -> list[Run]:
        pads = audio_pads(draft.family, seqlen)
        return draft.block(
            draft.settings["audio_token_id"], pads, "audio_start_token_id", "audio_end_token_id"
        )

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        if not draft.use_audio_in_video:
            return super().video(draft, grid, stamps, part, where)
        if "audio" not in part:
            raise MRopeError(f"{where}: use_audio_in_video: the video needs its 'audio' (feature frames)")
        draft.audios.append(count(part["audio"], f"{where} audio"))
        plane = grid[1] * grid[2] // draft.merge**2
        return Piece(
            runs=[
                (draft.marker("vision_start_token_id"), 1),
                (draft.marker("audio_start_token_id"), 1),
                (draft.settings["video_token_id"], grid[0] * plane),
                (draft.settings["audio_token_id"], audio_pads(draft.family, draft.audios[-1])),
                (draft.marker("audio_end_token_id"), 1),
                (draft.marker("vision_end_token_id"), 1),
            ]
        )


def audio_pads(family: Any, seqlen: int) -> int:
    """Placeholder tokens of an audio of ``seqlen`` feature frames (the Omni family's own count)."""
    return int(family.audio_tokens(np.array([seqlen], dtype=object))[0])  # Python ints: no overflow


@dataclass(eq=False, repr=False, kw_only=True)
class OmniFamily(Family):
    """Shared settings, audio inputs and parsing of the Omni thinkers; subclasses lay out the items."""

    image_token_id: int
    video_token_id: int
    audio_token_id: int
    vision_start_token_id: int = 151652
    audio_start_token_id: int
    spatial_merge_size: int
    position_id_per_seconds: int | float
    extra_inputs = ("audio_seqlens", "use_audio_in_video")
    prompt_layout = OmniLayout()
    takes_offsets = False
    uses_second_per_grid_ts = True
    # Qwen2.5-Omni's to_dict() names the ids *_token_index
    aliases: ClassVar[dict[str, str]] = {
        "image_token_index": "image_token_id",
        "video_token_index": "video_token_id",
        "audio_token_index": "audio_token_id",
    }

    #: under vLLM's rule, where a video with its audio starts its interleaved block: at its first
    #: placeholder (0), or one token early, at ``audio_start`` (1: Qwen2.5-Omni)
    vllm_block_lead: ClassVar[int] = 0

    @property
    def vllm_rule(self) -> bool:
        """Whether the family computes vLLM's positions (``compat="vllm", video_time="float64"``, see the
        module docstring) rather than transformers'."""
        return self.compat == "vllm" and self.video_time == "float64"

    def vllm_difference(self) -> str | None:
        """Transformers' rule (every setting but vLLM's: :attr:`vllm_rule`) is not vLLM's."""
        if self.vllm_rule:
            return None
        return (
            f"{self.model_type} computes transformers' Omni rule (compat={self.compat!r}, "
            f"video_time={self.video_time!r}); vLLM's is compat='vllm', video_time='float64' "
            "(VLLM_SETTINGS)"
        )

    @classmethod
    def read_settings(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """Settings from the thinker config: top level, ``vision_config``, then ``audio_config``."""
        found = super().read_settings(config)
        for alias, name in cls.aliases.items():
            if name not in found and config.get(alias) is not None:
                found[name] = config[alias]
        audio = config.get("audio_config") or {}
        if not isinstance(audio, Mapping):
            raise MRopeError(
                f"{config.get('model_type')} config: audio_config must be a mapping (a dict), got "
                f"{type(audio).__name__}"
            )
        for name in cls.setting_names():
            if name not in found and audio.get(name) is not None:
                found[name] = audio[name]
        return found

    @property
    def time_rate(self) -> float:
        return self.position_id_per_seconds

    def prompt_markers(self) -> dict[str, int]:
        """The shared markers; an end marker the config lacks is its start marker + 1 (the checkpoints')."""
        markers = super().prompt_markers()
        markers.setdefault("vision_end_token_id", self.vision_start_token_id + 1)
        markers.setdefault("audio_end_token_id", self.audio_start_token_id + 1)
        return markers

    def is_video_block(self, ids: np.ndarray, block_starts: np.ndarray) -> np.ndarray:
        return video_by_placeholder(ids, block_starts, self.image_token_id, self.video_token_id)

    # -- audio ----------------------------------------------------------------------------------------
    def audio_run_ids(self) -> tuple[int, ...]:
        """Audio placeholders and, outside a vision block, image and video placeholders (Qwen3-Omni gives
        a video's placeholders audio positions where its audio is interleaved)."""
        return self.audio_token_id, self.image_token_id, self.video_token_id

    def audio_start_id(self) -> int | None:
        return self.audio_start_token_id

    def audio_tokens(self, seqlens: np.ndarray) -> np.ndarray:
        """Placeholder tokens of audios of feature lengths ``seqlens`` (the encoder's output lengths)."""
        raise NotImplementedError

    def check_audio_seqlens(self, audio_seqlens: Any) -> np.ndarray:
        """Audio placeholder counts (num_audios,) from feature lengths; refuses negative lengths and
        lengths that give no audio token."""
        if audio_seqlens is None:
            return np.zeros(0, dtype=np.int64)
        seqlens = to_int_array(audio_seqlens, name="audio_seqlens", ndim=1)
        bad = (seqlens < 0).nonzero()[0]
        if bad.size:
            i = int(bad[0])
            raise MRopeError(f"audio_seqlens[{i}] = {int(seqlens[i])}: audio lengths must be >= 0")
        tokens = self.audio_tokens(seqlens)
        bad = (tokens <= 0).nonzero()[0]
        if bad.size:
            i = int(bad[0])
            raise MRopeError(
                f"audio_seqlens[{i}] = {int(seqlens[i])} gives {int(tokens[i])} audio tokens; an audio "
                f"needs at least one"
            )
        return tokens

    # -- parsing --------------------------------------------------------------------------------------
    @property
    def placeholder_ids(self) -> tuple[int, int, int]:
        """The image, video and audio placeholder token ids."""
        return self.image_token_id, self.video_token_id, self.audio_token_id

    def find_items(
        self,
        ids: np.ndarray,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
        images: np.ndarray,
        videos: np.ndarray,
        audio_tokens: np.ndarray,
        use_audio_in_video: bool,
    ) -> Items:
        """Items of the stream from their start markers, checked against the grids and audio lengths."""
        row_ends = row_starts + row_lengths
        vision_start = (ids == self.vision_start_token_id).nonzero()[0]
        audio_start = (ids == self.audio_start_token_id).nonzero()[0]
        in_row_next = _next_in_row(vision_start, row_starts, row_ends)
        following = np.where(in_row_next, ids[np.minimum(vision_start + 1, max(ids.size - 1, 0))], -1)
        vision_kind = np.full(vision_start.size, -1, dtype=np.int64)
        vision_kind[following == self.image_token_id] = IMAGE
        vision_kind[following == self.video_token_id] = VIDEO
        vision_kind[following == self.audio_start_token_id] = AUDIO_IN_VIDEO
        if (vision_kind < 0).any():
            i = int(vision_start[(vision_kind < 0).argmax()])
            raise MRopeError(
                f"vision_start token at stream index {i} is followed by "
                f"{'the end of its row' if following[(vision_kind < 0).argmax()] < 0 else 'a text token'}"
                f"; expected an image, video or audio_start token"
            )
        nested = np.isin(audio_start - 1, vision_start[vision_kind == AUDIO_IN_VIDEO])
        bos = np.concatenate([vision_start, audio_start[~nested]])
        kind = np.concatenate([vision_kind, np.full(int((~nested).sum()), AUDIO, dtype=np.int64)])
        order = bos.argsort(kind="stable")
        bos, kind = bos[order], kind[order]
        row = row_starts.searchsorted(bos, side="right") - 1

        is_image, is_audio_in_video = kind == IMAGE, kind == AUDIO_IN_VIDEO
        is_video = (kind == VIDEO) | is_audio_in_video
        has_audio = (kind == AUDIO) | is_audio_in_video
        _check_count(
            "image",
            int(is_image.sum()),
            len(images),
            "image_grid_thw",
            "vision_start followed by an image token",
        )
        _check_count(
            "video",
            int(is_video.sum()),
            len(videos),
            "video_grid_thw",
            "vision_start followed by a video or audio_start token",
        )
        _check_count(
            "audio",
            int(has_audio.sum()),
            len(audio_tokens),
            "audio_seqlens",
            "audio_start tokens, those of videos with audio included",
        )
        if is_audio_in_video.any() and not use_audio_in_video:
            v = int(is_video[: int(is_audio_in_video.argmax())].sum())
            raise MRopeError(
                f"video {v} is followed by its audio (vision_start, audio_start) but "
                f"use_audio_in_video is False"
            )
        if use_audio_in_video and (kind == VIDEO).any():
            v = int(is_video[: int((kind == VIDEO).argmax())].sum())
            raise MRopeError(
                f"use_audio_in_video is True but video {v} has no audio (its vision_start is followed "
                f"by a video token, not audio_start)"
            )

        grid = np.full(bos.size, -1, dtype=np.int64)
        grid[is_image] = np.arange(len(images))
        grid[is_video] = np.arange(len(videos))
        audio = np.full(bos.size, -1, dtype=np.int64)
        audio[has_audio] = np.arange(len(audio_tokens))
        merge = self.spatial_merge_size
        grids = np.zeros((bos.size, 3), dtype=np.int64)
        grids[is_image] = images
        grids[is_video] = videos
        num_vision = grids.prod(axis=1) // merge**2
        num_audio = np.where(has_audio, audio_tokens[np.maximum(audio, 0)] if audio_tokens.size else 0, 0)
        content = bos + 1 + is_audio_in_video
        items = Items(kind, bos, content, row, grid, audio, num_vision, num_audio)
        self._check_contents(ids, items, row_starts, row_ends, images, videos)
        return items

    def _check_contents(
        self,
        ids: np.ndarray,
        items: Items,
        row_starts: np.ndarray,
        row_ends: np.ndarray,
        images: np.ndarray,
        videos: np.ndarray,
    ) -> None:
        """Every item's placeholders are where its grid or audio length says, and none lies elsewhere."""
        counts = np.zeros((3, ids.size + 1), dtype=np.int64)
        for k, token in enumerate(self.placeholder_ids):
            np.cumsum(ids == token, out=counts[k, 1:])
        end = items.content + items.num_vision + items.num_audio
        expected = np.zeros((3, items.kind.size), dtype=np.int64)
        expected[0] = np.where(items.kind == IMAGE, items.num_vision, 0)
        expected[1] = np.where(items.kind != IMAGE, items.num_vision, 0)
        expected[2] = items.num_audio
        eos = 1 + (items.kind == AUDIO_IN_VIDEO)
        past_row = end + eos > row_ends[items.row]
        # the end marker(s) included: a longer run of placeholders is a count error, not a missing marker
        found = counts[:, np.minimum(end + eos, ids.size)] - counts[:, items.content]
        # the run alone: with as many placeholders as its span, none of its tokens is foreign (a foreign
        # token inside the run and a placeholder after it leave the count with the end marker(s) right)
        in_run = counts[:, np.minimum(end, ids.size)] - counts[:, items.content]
        miscounted = (found != expected).any(axis=0)
        wrong = past_row | miscounted | (in_run != expected).any(axis=0)
        names = ("image", "video", "audio")
        if wrong.any():
            i = int(wrong.argmax())
            r = int(items.row[i])
            row_start = int(row_starts[r])
            where = f"from stream index {int(items.content[i]) - row_start} of row {r}"
            item = self.describe(items, i, images, videos)
            if past_row[i]:
                raise MRopeError(
                    f"{item} needs {int(end[i] - items.content[i])} placeholder tokens and {int(eos[i])} end "
                    f"token(s) {where}, but the row ends first"
                )
            need = ", ".join(f"{int(expected[k, i])} {names[k]}" for k in range(3) if expected[k, i])
            if miscounted[i]:
                got = ", ".join(f"{int(found[k, i])} {names[k]}" for k in range(3) if found[k, i]) or "none"
                raise MRopeError(f"{item} needs {need} placeholder tokens {where}, found {got}")
            # a foreign token inside the run: name the first (only this item's run is read)
            own = [t for k, t in enumerate(self.placeholder_ids) if expected[k, i]]
            run = ids[int(items.content[i]) : int(end[i])]
            j = int(items.content[i]) + int((~np.isin(run, own)).argmax())
            raise MRopeError(
                f"{item} needs {need} placeholder tokens in one run {where}, but token {int(ids[j])} at "
                f"stream index {j - row_start} breaks the run (it is no placeholder of the item)"
            )
        stray = counts[:, -1] - expected.sum(axis=1)
        if stray.any():
            k = int((stray != 0).argmax())
            raise MRopeError(
                f"{int(stray[k])} {names[k]} placeholder tokens lie outside every item (an item starts "
                f"with vision_start or audio_start)"
            )
        same_row = items.row[1:] == items.row[:-1]
        overlap = same_row & (items.bos[1:] < (end + eos)[:-1])
        if overlap.any():
            i = int(overlap.argmax())
            raise MRopeError(
                f"{self.describe(items, i, images, videos)} has no end token: the next item starts "
                f"right after its placeholders"
            )

    def describe(self, items: Items, i: int, images: np.ndarray, videos: np.ndarray) -> str:
        """Item ``i`` for messages, with its grid or audio length."""
        kind, g, a = int(items.kind[i]), int(items.grid[i]), int(items.audio[i])
        audio = f"audio {a} ({int(items.num_audio[i])} tokens)"
        if kind == AUDIO:
            return audio
        grids, name = (images, "image") if kind == IMAGE else (videos, "video")
        item = f"{name} {g} ({name}_grid_thw[{g}] = {tuple(int(x) for x in grids[g])})"
        return f"{item} with its {audio}" if kind == AUDIO_IN_VIDEO else item

    # -- the pipeline ---------------------------------------------------------------------------------
    def no_offsets_message(self) -> str:
        return f"{self.model_type} locates its items in input_ids: it takes no image_offsets or video_offsets"

    def check_audio_inputs(
        self, audio_seqlens: ArrayLike | None, use_audio_in_video: bool | None
    ) -> tuple[np.ndarray, bool]:
        """The audios' placeholder tokens, and whether videos carry their audio (a bool or None, as
        :class:`MultimodalInputs` checked it)."""
        return self.check_audio_seqlens(audio_seqlens), bool(use_audio_in_video)

    def parse(self, inputs: RequestInputs) -> ItemBlocks:
        """The stream's items (images, videos, audios, videos with their audio), found and checked."""
        videos = inputs.videos
        if inputs.seconds is None:
            seconds = np.full(len(videos), self.default_second_per_grid_ts)
        else:
            seconds = inputs.seconds.values
        audio_tokens = np.zeros(0, dtype=np.int64) if inputs.audio_tokens is None else inputs.audio_tokens
        row_starts, row_lengths = inputs.rows()
        items = self.find_items(
            inputs.array,
            row_starts,
            row_lengths,
            inputs.images,
            videos,
            audio_tokens,
            inputs.use_audio_in_video,
        )
        blocks = self.vllm_item_blocks if self.vllm_rule else self.item_blocks
        return blocks(items, inputs.images, videos, seconds)

    def item_blocks(
        self, items: Items, images: np.ndarray, videos: np.ndarray, seconds: np.ndarray
    ) -> ItemBlocks:
        """The family's items as blocks for :func:`mrope.core.place` under transformers' rule: spans,
        text cuts, and the layout of one item at its base."""
        raise NotImplementedError

    # -- vLLM's rule ----------------------------------------------------------------------------------
    def vllm_time_index(self, kind: int, frames: int, seconds: float) -> np.ndarray:
        """Time index of each frame (int64, read-only) as vLLM computes it: ``trunc(k * (seconds *
        rate))`` in float64 (images: 1 second), ``rate`` the family's :attr:`time_rate`."""
        interval = time_interval(self.time_rate, np.float64(1.0 if kind == IMAGE else seconds), _FLOAT64)
        return frame_times(frames, interval)

    def vllm_item_blocks(
        self, items: Items, images: np.ndarray, videos: np.ndarray, seconds: np.ndarray
    ) -> ItemBlocks:
        """The items as blocks under vLLM's rule: images and videos are grid blocks, a video with its
        audio is :meth:`vllm_audio_in_video`'s block from :attr:`vllm_block_lead` tokens before its first
        placeholder; audio alone is text. Text resumes at ``max(block) + 1`` after each."""
        vision = (items.kind != AUDIO).nonzero()[0]
        is_aiv = items.kind[vision] == AUDIO_IN_VIDEO
        start = items.content[vision] - np.where(is_aiv, self.vllm_block_lead, 0)
        end = start + items.num_vision[vision] + items.num_audio[vision]

        def layout(n: int, base: int, out: SegmentBuilder) -> tuple[int, int]:
            i = int(vision[n])
            kind, first = int(items.kind[i]), int(start[n])
            frames, height, width = self.item_grid(items, i, images, videos)
            t = self.vllm_time_index(kind, frames, seconds[items.grid[i]] if kind != IMAGE else 1.0)
            if kind == AUDIO_IN_VIDEO:
                top = self.vllm_audio_in_video(out, first, base, t, height, width, int(items.num_audio[i]))
                return top, top
            out.add(first + np.arange(frames) * (height * width), base + t, base, width, 0)
            top = base + max(int(t[-1]), height - 1, width - 1)
            return top, top

        return ItemBlocks(start, end, items.row[vision], layout)

    def vllm_audio_in_video(
        self,
        out: SegmentBuilder,
        start: int,
        base: int,
        t: np.ndarray,
        height: int,
        width: int,
        num_audio: int,
    ) -> int:
        """Segments of a video interleaved with its audio under vLLM's rule, from stream index ``start``
        at ``base`` (frame ``k`` at ``base + t[k]``, audio token ``j`` at ``base + j``); returns the
        block's largest position."""
        raise NotImplementedError

    def item_grid(self, items: Items, i: int, images: np.ndarray, videos: np.ndarray) -> tuple[int, int, int]:
        """(T, H', W') of item ``i`` (an image or a video) after the spatial merge."""
        grids = images if items.kind[i] == IMAGE else videos
        t, h, w = (int(x) for x in grids[items.grid[i]])
        return t, h // self.spatial_merge_size, w // self.spatial_merge_size


_FLOAT64 = VIDEO_TIMES["float64"]


def merge_by_time(
    out: SegmentBuilder,
    content: int,
    base: Any,
    t: np.ndarray,
    audio: np.ndarray,
    height: int,
    width: int,
) -> None:
    """Segments of a video's frames and its audio tokens merged by time from stream index ``content``
    (Qwen3-Omni, both rules): frame ``k`` (positions ``t[k]``, h and w from ``base``) comes before the
    audio tokens of a larger time (``audio``: each token's position, ``base + j``), after those of a
    smaller one. One segment per frame and per run of audio between frames."""
    frames, plane, num_audio = t.size, height * width, audio.size
    before = audio.searchsorted(t)  # audio tokens of a smaller time come before each frame
    runs = np.concatenate([[0], before, [num_audio]])
    run_start = content + np.arange(frames + 1) * plane + runs[:-1]
    keep = runs[1:] > runs[:-1]
    out.text(run_start[keep], base, origin=run_start[keep] - runs[:-1][keep])
    out.add(content + np.arange(frames) * plane + before, t, base, width, 0)


def _next_in_row(index: np.ndarray, row_starts: np.ndarray, row_ends: np.ndarray) -> np.ndarray:
    """Whether ``index + 1`` lies in the row of ``index``."""
    row = row_starts.searchsorted(index, side="right") - 1
    return index + 1 < row_ends[row]


def _check_count(what: str, found: int, given: int, name: str, how: str) -> None:
    if found != given:
        raise MRopeError(f"found {found} {what}s ({how}) but {name} describes {given}")
