"""Prompts laid out as each family's processor lays them out: :func:`build_prompt`.

A prompt is a list of parts: ``{"text": 12}`` (12 text tokens) or ``{"text": [ids...]}``; ``{"image":
[T, H, W]}`` (the grid before merging); ``{"video": [T, H, W], "second_per_grid_ts": 0.5,
"timestamp_tokens": 3}`` (``timestamp_tokens``: the text tokens of each frame's timestamp, a count, or
each frame's ids, in the families that split a video into frames); Omni only: ``{"audio": 300}`` (feature
frames) and a video's ``"audio": 300`` (its audio, with ``use_audio_in_video``). The layout and the markers
are the family's (:attr:`mrope.Family.prompt_layout`, :meth:`mrope.Family.prompt_markers`):

- ``whole``: ``vision_start, pads, vision_end`` (a video one block);
- ``frames``: as whole for images, a video one ``<timestamp> vision_start, pads, vision_end`` per frame;
- ``glm``: ``image_start, image pads, image_end``; a video ``video_start``, per frame an image block and
  its timestamp, ``video_end``;
- ``ernie``: ``image_start, image pads, image_end``; ``video_start, video pads, video_end``;
- ``omni``: as whole, an audio ``audio_start, audio pads, audio_end``, a video with its audio
  ``vision_start, audio_start, video pads, audio pads, audio_end, vision_end``;
- ``newline``: pads only, ``T * H' * (W' + 1)`` of them (a newline token, the item's pad, ends each
  merged row): image pads for an image, video pads for a video (HY-V4-VL; its config names no markers);
- ``hunyuan``: images only, ``image_start, pads, image_end`` with ``H' * (W' + 1)`` pads plus the
  family's ``run_extra_tokens`` (HunYuan-VL: two more image tokens, the run's first and last).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._errors import MRopeError
from .families import Family

__all__ = ["DEFAULT_TIMESTAMP_TOKENS", "LAYOUTS", "PART_KINDS", "Prompt", "build_prompt"]

LAYOUTS = ("whole", "frames", "glm", "ernie", "omni", "newline", "hunyuan")
PART_KINDS = ("text", "image", "video", "audio")
DEFAULT_TIMESTAMP_TOKENS = 3


@dataclass(frozen=True)
class Prompt:
    """A laid-out prompt: its token ids and the inputs of :meth:`mrope.Family.positions` (grids before
    merging, lists; ``audio_seqlens`` None outside the Omni families)."""

    input_ids: list[int]
    image_grid_thw: list[list[int]] = field(default_factory=list)
    video_grid_thw: list[list[int]] = field(default_factory=list)
    second_per_grid_ts: list[float] | None = None
    audio_seqlens: list[int] | None = None
    use_audio_in_video: bool = False

    def inputs(self) -> dict[str, Any]:
        """The keyword inputs of :meth:`mrope.Family.positions` (None where empty)."""
        out: dict[str, Any] = {
            "image_grid_thw": self.image_grid_thw or None,
            "video_grid_thw": self.video_grid_thw or None,
        }
        if self.second_per_grid_ts is not None:
            out["second_per_grid_ts"] = self.second_per_grid_ts
        if self.audio_seqlens is not None:
            out.update(audio_seqlens=self.audio_seqlens or None, use_audio_in_video=self.use_audio_in_video)
        return out


def build_prompt(
    family: Family,
    parts: Sequence[Any],
    *,
    use_audio_in_video: bool = False,
    markers: bool = True,
    max_tokens: int | None = None,
) -> Prompt:
    """The token ids and grids of ``parts`` (see the module docstring), laid out as the family's
    processor lays them out.

    ``markers=False`` (``whole`` layout only) leaves out vision_start/vision_end, so that a block can sit at
    the first or last index of the prompt. The size is known from the parts before any token is laid out
    (O(parts)): a prompt of more than ``max_tokens`` tokens is refused, naming the part that passes it.
    Raises :class:`mrope.MRopeError` for a family without a layout or a malformed part."""
    layout = family.prompt_layout
    if layout is None:
        raise MRopeError(f"no prompt layout for {family.model_type}: give 'input_ids' instead of 'prompt'")
    if not markers and layout != "whole":
        raise MRopeError("markers=False is only meaningful for the whole layout (Qwen2/2.5-VL, PaddleOCR-VL)")
    settings, marks = family.settings, family.prompt_markers()
    merge, temporal = family.spatial_merge_size, family.video_temporal_merge
    text_id = _text_id(marks)
    pieces: list[_Piece] = []
    size = 0
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
    audios: list[int] = []
    image_marks = ("image_start_token_id", "image_end_token_id")
    if layout not in ("glm", "ernie"):
        image_marks = ("vision_start_token_id", "vision_end_token_id")

    def marker(name: str) -> int:
        if not isinstance(marks.get(name), int):
            raise MRopeError(
                f"{family.model_type}: the prompt needs {name!r}: give it in 'config' or 'settings'"
            )
        return marks[name]

    def block(pad: int, count: int, start: str, end: str) -> list[tuple[int, int]]:
        if not markers:
            return [(pad, count)]
        return [(marker(start), 1), (pad, count), (marker(end), 1)]

    for number, part in enumerate(parts):
        where = f"prompt[{number}]"
        kinds = [kind for kind in PART_KINDS if isinstance(part, dict) and kind in part]
        if kinds == ["video", "audio"]:  # a video with its audio
            kinds = ["video"]
        if len(kinds) != 1:
            raise MRopeError(
                f"{where}: a part is an object with one of text, image, video, audio; got {part!r}"
            )
        kind = kinds[0]
        piece = _Piece()
        if kind == "text":
            piece.ids = _text(part["text"], where)
            if piece.ids is None:
                piece.runs = [(text_id, _count(part["text"], f"{where} text", 0))]
        elif kind == "audio":
            if layout != "omni":
                raise MRopeError(f"{where}: {family.model_type} takes no audio")
            audios.append(_count(part["audio"], f"{where} audio"))
            piece.runs = block(
                settings["audio_token_id"],
                _audio_tokens(family, audios[-1]),
                "audio_start_token_id",
                "audio_end_token_id",
            )
        elif kind == "image":
            grid = _grid(part["image"], merge, 1, where)
            images.append(grid)
            if layout == "newline":
                piece.runs = [(settings["image_token_id"], _newline_tokens(grid, merge))]
            elif layout == "hunyuan":
                pads = _newline_tokens(grid, merge) + family.run_extra_tokens
                piece.runs = block(
                    settings["image_token_id"], pads, "image_start_token_id", "image_end_token_id"
                )
            else:
                piece.runs = block(
                    settings["image_token_id"], grid[0] * grid[1] * grid[2] // merge**2, *image_marks
                )
        elif layout == "hunyuan":
            raise MRopeError(f"{where}: {family.model_type} takes no video")
        else:
            grid = _grid(part["video"], merge, temporal, where)
            videos.append(grid)
            if "second_per_grid_ts" in part:
                seconds.append(part["second_per_grid_ts"])
            plane = grid[1] * grid[2] // merge**2
            stamps = _timestamps(
                part.get("timestamp_tokens", DEFAULT_TIMESTAMP_TOKENS), text_id, grid[0], where
            )
            if layout == "glm":  # per frame an image block and its timestamp, between the video markers
                piece.runs = [(marker("video_start_token_id"), 1)]
                piece.frames = grid[0]
                piece.frame = block(settings["image_token_id"], plane, *image_marks)
                piece.stamps, piece.stamp_first = stamps, False
                piece.after = [(marker("video_end_token_id"), 1)]
            elif layout == "frames":  # per frame its timestamp and a block
                piece.frames = grid[0]
                piece.frame = block(
                    settings["video_token_id"], plane, "vision_start_token_id", "vision_end_token_id"
                )
                piece.stamps = stamps
            elif layout == "newline":
                piece.runs = [(settings["video_token_id"], _newline_tokens(grid, merge))]
            elif layout == "ernie":
                piece.runs = block(
                    settings["video_token_id"],
                    grid[0] // temporal * plane,
                    "video_start_token_id",
                    "video_end_token_id",
                )
            elif layout == "omni" and use_audio_in_video:
                if "audio" not in part:
                    raise MRopeError(
                        f"{where}: use_audio_in_video: the video needs its 'audio' (feature frames)"
                    )
                audios.append(_count(part["audio"], f"{where} audio"))
                piece.runs = [
                    (marker("vision_start_token_id"), 1),
                    (marker("audio_start_token_id"), 1),
                    (settings["video_token_id"], grid[0] * plane),
                    (settings["audio_token_id"], _audio_tokens(family, audios[-1])),
                    (marker("audio_end_token_id"), 1),
                    (marker("vision_end_token_id"), 1),
                ]
            else:
                piece.runs = block(
                    settings["video_token_id"],
                    grid[0] * plane,
                    "vision_start_token_id",
                    "vision_end_token_id",
                )
        size += piece.size()
        if max_tokens is not None and size > max_tokens:
            raise MRopeError(
                f"{where}: the prompt reaches {size:,} tokens with this {kind}: prompts are laid out up to "
                f"{max_tokens:,} tokens"
            )
        pieces.append(piece)
    if seconds and len(seconds) != len(videos):
        raise MRopeError("give second_per_grid_ts for every video or for none")
    if use_audio_in_video and layout != "omni":
        raise MRopeError(f"use_audio_in_video: {family.model_type} takes no audio")
    ids: list[int] = []
    for piece in pieces:
        piece.extend(ids)
    omni = layout == "omni"
    return Prompt(
        ids,
        images,
        videos,
        seconds or None,
        audios if omni else None,
        use_audio_in_video and omni,
    )


@dataclass
class _Piece:
    """One part's tokens, run-length encoded: ``ids`` as given, or ``runs`` (token id, count), then
    ``frames`` times the runs of ``frame`` with each frame's timestamp ids ``stamps[k]`` before it
    (after it unless ``stamp_first``), then ``after``; its size is known before it is laid out."""

    ids: list[int] | None = None
    runs: list[tuple[int, int]] = field(default_factory=list)
    frames: int = 0
    frame: list[tuple[int, int]] = field(default_factory=list)
    stamps: list[list[int]] | tuple[int, int] = (0, 0)
    stamp_first: bool = True
    after: list[tuple[int, int]] = field(default_factory=list)

    def size(self) -> int:
        if self.ids is not None:
            return len(self.ids)
        if isinstance(self.stamps, tuple):
            stamped = self.frames * self.stamps[1]
        else:
            stamped = sum(len(s) for s in self.stamps)
        return (
            sum(n for _, n in self.runs + self.after) + self.frames * sum(n for _, n in self.frame) + stamped
        )

    def extend(self, ids: list[int]) -> None:
        """Append the piece's tokens to ``ids`` (with a count of timestamp tokens, a frame is laid out
        once, then repeated)."""
        if self.ids is not None:
            ids.extend(self.ids)
            return
        for token, count in self.runs:
            ids.extend([token] * count)
        if self.frames:
            frame: list[int] = []
            for token, count in self.frame:
                frame.extend([token] * count)
            if isinstance(self.stamps, tuple):
                stamp = [self.stamps[0]] * self.stamps[1]
                ids.extend((stamp + frame if self.stamp_first else frame + stamp) * self.frames)
            else:
                for stamp in self.stamps:
                    ids.extend(stamp + frame if self.stamp_first else frame + stamp)
        for token, count in self.after:
            ids.extend([token] * count)


def _timestamps(value: Any, text_id: int, frames: int, where: str) -> list[list[int]] | tuple[int, int]:
    """A video's timestamps: (text id, count) for a count per frame, else each frame's ids (a list)."""
    if isinstance(value, list):
        if len(value) != frames or not all(_text(v, where) is not None for v in value):
            raise MRopeError(
                f"{where}: timestamp_tokens lists each frame's ids ({frames} lists of ints), got {value!r}"
            )
        return value
    return text_id, _count(value, f"{where} timestamp_tokens", 0)


def _text_id(markers: dict[str, Any]) -> int:
    """A text token id that is none of the family's special ids: the first from 1000 up."""
    special = set(markers.values())
    return next(i for i in range(1000, 1000 + len(special) + 1) if i not in special)


def _text(value: Any, where: str) -> list[int] | None:
    """A text part's ids when it lists them, else None (a count of text tokens)."""
    if isinstance(value, list):
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            raise MRopeError(f"{where}: text ids must be integers, got {value!r}")
        return value
    return None


def _count(value: Any, what: str, least: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise MRopeError(f"{what} must be an integer >= {least}, got {value!r}")
    return value


def _grid(value: Any, merge: int, temporal: int, where: str) -> list[int]:
    if not (isinstance(value, list) and len(value) == 3):
        raise MRopeError(f"{where}: a grid is [T, H, W], got {value!r}")
    t, h, w = (_count(v, f"{where} grid {value}") for v in value)
    if h % merge or w % merge:
        raise MRopeError(f"{where}: grid {value}: H and W must be multiples of spatial_merge_size {merge}")
    if t % temporal:
        raise MRopeError(f"{where}: grid {value}: T must be a multiple of temporal_merge_size {temporal}")
    return [t, h, w]


def _newline_tokens(grid: list[int], merge: int) -> int:
    """Placeholder tokens of a ``newline`` item: ``T * H' * (W' + 1)``."""
    return grid[0] * (grid[1] // merge) * (grid[2] // merge + 1)


def _audio_tokens(family: Any, seqlen: int) -> int:
    """Placeholder tokens of an audio of ``seqlen`` feature frames (the Omni family's own count)."""
    return int(family.audio_tokens(np.array([seqlen], dtype=object))[0])  # Python ints: no overflow
