"""How a family's processor lays out a prompt's items as tokens: :class:`PromptLayout`, one object per
layout, which a family states as its :attr:`~mrope.Family.prompt_layout`.

:func:`mrope.prompts.build_prompt` reads the parts of a prompt (text, images, videos, audios) and asks
the family's layout for each item's tokens, run-length encoded as a :class:`Piece`; it names no layout.
The layouts shared by several families are here (:data:`WHOLE`, Qwen2-VL's: markers around the pads);
a family's own layout is in its module (frames: Qwen3-VL; glm: GLM-4.1V; ernie: Ernie-4.5-VL; omni: the
Omni thinkers; newline: HY-V4-VL; hunyuan: HunYuan-VL).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .._errors import MRopeError

#: a run of tokens: (token id, count)
Run = tuple[int, int]


@dataclass
class Piece:
    """One part's tokens, run-length encoded: ``ids`` as given, or ``runs`` (token id, count), then
    ``frames`` times the runs of ``frame`` with each frame's timestamp ids ``stamps[k]`` before it
    (after it unless ``stamp_first``), then ``after``; its size is known before it is laid out."""

    ids: list[int] | None = None
    runs: list[Run] = field(default_factory=list)
    frames: int = 0
    frame: list[Run] = field(default_factory=list)
    stamps: list[list[int]] | tuple[int, int] = (0, 0)
    stamp_first: bool = True
    after: list[Run] = field(default_factory=list)

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


@dataclass
class Draft:
    """What a layout reads while one prompt is laid out: the family, its settings and marker ids,
    whether markers are laid out, whether videos carry their audio, and the audios' feature lengths so
    far (a video with its audio adds its own)."""

    family: Any  # the family (:class:`mrope.Family`: this module is below it, and names it not)
    settings: dict[str, Any]
    marks: dict[str, int]
    markers: bool = True
    use_audio_in_video: bool = False
    audios: list[int] = field(default_factory=list)

    @property
    def merge(self) -> int:
        return self.family.spatial_merge_size

    def marker(self, name: str) -> int:
        """The marker token ``name`` (a config or the settings must give it)."""
        if not isinstance(self.marks.get(name), int):
            raise MRopeError(
                f"{self.family.model_type}: the prompt needs {name!r}: give it in 'config' or 'settings'"
            )
        return self.marks[name]

    def block(self, pad: int, count: int, start: str, end: str) -> list[Run]:
        """``count`` pads between the markers ``start`` and ``end`` (the pads alone without markers)."""
        if not self.markers:
            return [(pad, count)]
        return [(self.marker(start), 1), (pad, count), (self.marker(end), 1)]


class PromptLayout:
    """A processor's layout of images (and videos, audios) as tokens: ``vision_start, pads, vision_end``
    for an image (``image_marks``), a video one block of ``T * H' * W'`` video pads. A subclass states
    what differs: ``name`` (said in messages and by :data:`mrope.prompts.LAYOUTS`), the image markers,
    a video's or an audio's tokens, whether markers may be left out."""

    name: ClassVar[str]
    #: the markers around an image's pads
    image_marks: ClassVar[tuple[str, str]] = ("vision_start_token_id", "vision_end_token_id")
    #: whether ``markers=False`` (a block at the first or last index of a prompt) is meaningful
    markers_optional: ClassVar[bool] = False
    #: whether the layout has videos; whether it has audios (and videos that carry theirs)
    takes_videos: ClassVar[bool] = True
    takes_audio: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def image(self, draft: Draft, grid: list[int]) -> list[Run]:
        """An image's tokens (``grid``: (T, H, W) before merging)."""
        pads = grid[0] * grid[1] * grid[2] // draft.merge**2
        return draft.block(draft.settings["image_token_id"], pads, *self.image_marks)

    def video(self, draft: Draft, grid: list[int], stamps: Any, part: dict[str, Any], where: str) -> Piece:
        """A video's tokens (``stamps``: each frame's timestamp ids, or (text id, count per frame), for the
        layouts that put them between frames; ``part``: the prompt's part, ``where`` names it)."""
        pads = grid[0] * grid[1] * grid[2] // draft.merge**2
        return Piece(
            runs=draft.block(
                draft.settings["video_token_id"], pads, "vision_start_token_id", "vision_end_token_id"
            )
        )

    def audio(self, draft: Draft, seqlen: int) -> list[Run]:
        """An audio's tokens (``seqlen`` feature frames): a layout with audio (:attr:`takes_audio`)
        states them."""
        raise MRopeError(f"{draft.family.model_type} takes no audio")


class WholeLayout(PromptLayout):
    """Qwen2-VL's, Qwen2.5-VL's, PaddleOCR-VL's: markers around the pads of an image or a video; the
    markers may be left out (a block at the first or last index: transformers finds blocks without)."""

    name = "whole"
    markers_optional = True


WHOLE = WholeLayout()


def count(value: Any, what: str, least: int = 1) -> int:
    """``value`` as an integer count of at least ``least`` (a bool is not a count)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise MRopeError(f"{what} must be an integer >= {least}, got {value!r}")
    return value


def newline_pads(grid: list[int], merge: int) -> int:
    """Placeholder tokens of an item whose merged rows each end in a newline: ``T * H' * (W' + 1)``."""
    return grid[0] * (grid[1] // merge) * (grid[2] // merge + 1)
