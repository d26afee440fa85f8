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

from ._errors import MRopeError
from .families import FAMILIES, Family
from .families.layout import Draft, Piece, count

__all__ = ["DEFAULT_TIMESTAMP_TOKENS", "LAYOUTS", "PART_KINDS", "Prompt", "build_prompt"]

#: the names of the families' layouts (each family's :attr:`mrope.Family.prompt_layout`)
LAYOUTS = tuple(dict.fromkeys(cls.prompt_layout.name for cls in FAMILIES if cls.prompt_layout is not None))
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
    if not markers and not layout.markers_optional:
        raise MRopeError(
            f"markers=False is only meaningful for a layout whose markers may be left out (Qwen2/2.5-VL, "
            f"PaddleOCR-VL), not {layout.name!r}"
        )
    if use_audio_in_video and not layout.takes_audio:
        raise MRopeError(f"use_audio_in_video: {family.model_type} takes no audio")
    draft = Draft(family, family.settings, family.prompt_markers(), markers, use_audio_in_video)
    merge, temporal = family.spatial_merge_size, family.video_temporal_merge
    text_id = _text_id(draft.marks)
    pieces: list[Piece] = []
    size = 0
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
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
        piece = Piece()
        if kind == "text":
            piece.ids = _text(part["text"], where)
            if piece.ids is None:
                piece.runs = [(text_id, count(part["text"], f"{where} text", 0))]
        elif kind == "audio":
            if not layout.takes_audio:
                raise MRopeError(f"{where}: {family.model_type} takes no audio")
            draft.audios.append(count(part["audio"], f"{where} audio"))
            piece.runs = layout.audio(draft, draft.audios[-1])
        elif kind == "image":
            grid = _grid(part["image"], merge, 1, where)
            images.append(grid)
            piece.runs = layout.image(draft, grid)
        elif not layout.takes_videos:
            raise MRopeError(f"{where}: {family.model_type} takes no video")
        else:
            grid = _grid(part["video"], merge, temporal, where)
            videos.append(grid)
            if "second_per_grid_ts" in part:
                seconds.append(part["second_per_grid_ts"])
            stamps = _timestamps(
                part.get("timestamp_tokens", DEFAULT_TIMESTAMP_TOKENS), text_id, grid[0], where
            )
            piece = layout.video(draft, grid, stamps, part, where)
        size += piece.size()
        if max_tokens is not None and size > max_tokens:
            raise MRopeError(
                f"{where}: the prompt reaches {size:,} tokens with this {kind}: prompts are laid out up to "
                f"{max_tokens:,} tokens"
            )
        pieces.append(piece)
    if seconds and len(seconds) != len(videos):
        raise MRopeError("give second_per_grid_ts for every video or for none")
    ids: list[int] = []
    for piece in pieces:
        piece.extend(ids)
    return Prompt(
        ids,
        images,
        videos,
        seconds or None,
        draft.audios if layout.takes_audio else None,
        use_audio_in_video,
    )


def _timestamps(value: Any, text_id: int, frames: int, where: str) -> list[list[int]] | tuple[int, int]:
    """A video's timestamps: (text id, count) for a count per frame, else each frame's ids (a list)."""
    if isinstance(value, list):
        if len(value) != frames or not all(_text(v, where) is not None for v in value):
            raise MRopeError(
                f"{where}: timestamp_tokens lists each frame's ids ({frames} lists of ints), got {value!r}"
            )
        return value
    return text_id, count(value, f"{where} timestamp_tokens", 0)


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


def _grid(value: Any, merge: int, temporal: int, where: str) -> list[int]:
    if not (isinstance(value, list) and len(value) == 3):
        raise MRopeError(f"{where}: a grid is [T, H, W], got {value!r}")
    t, h, w = (count(v, f"{where} grid {value}") for v in value)
    if h % merge or w % merge:
        raise MRopeError(f"{where}: grid {value}: H and W must be multiples of spatial_merge_size {merge}")
    if t % temporal:
        raise MRopeError(f"{where}: grid {value}: T must be a multiple of temporal_merge_size {temporal}")
    return [t, h, w]
