"""The ``mrope`` command: ``mrope show PROMPT.json --out PATH [--compare] [--compat vllm|transformers]``.

``show`` draws a prompt's positions with :func:`mrope.show.show` (matplotlib: ``pip install
'mrope[show]'``). The prompt file is a JSON object:

- the model, one of: ``"config"``, a transformers config as a dict (its ``to_dict()``) or the path of a
  checkpoint's ``config.json`` (relative to the prompt file); or ``"model_type"`` with ``"settings"``,
  the family's settings (token ids, ``spatial_merge_size``...; ``mrope.from_config`` names any that
  is missing). With a config, ``"settings"`` are overrides (e.g. ``{"tokens_per_second": 2}``).
- optionally ``"compat"`` (``"vllm"`` or ``"transformers"``; ``--compat`` wins) and ``"video_time"``.
- the prompt, one of:

  - ``"input_ids"`` with ``"image_grid_thw"``, ``"video_grid_thw"``, ``"second_per_grid_ts"``,
    ``"audio_seqlens"`` and ``"use_audio_in_video"`` as needed (what ``family.positions`` takes);
  - ``"prompt"``, a list of parts laid out as the model's processor lays them out (markers included):
    ``{"text": 12}`` (12 text tokens) or ``{"text": [ids...]}``; ``{"image": [T, H, W]}`` (the grid
    before merging); ``{"video": [T, H, W], "second_per_grid_ts": 0.5, "timestamp_tokens": 3}``
    (seconds for the families that scale time; ``timestamp_tokens``, default 3, the text tokens of each
    frame's timestamp in the families that split a video into frames: Qwen3-VL and its kin, GLM); Omni
    only: ``{"audio": 300}`` (an audio of 300 feature frames) and a video's ``"audio": 300`` (its
    audio, with ``"use_audio_in_video": true`` at the top level).

Example::

    {"model_type": "qwen2_5_vl",
     "settings": {"image_token_id": 151655, "video_token_id": 151656, "spatial_merge_size": 2,
                  "tokens_per_second": 2},
     "prompt": [{"text": 8}, {"image": [1, 16, 24]}, {"text": 4},
                {"video": [8, 8, 8], "second_per_grid_ts": 1.0}, {"text": 6}]}

The prompt is drawn up to :data:`mrope.show.MAX_TOKENS` tokens (2**20): its size is counted from the
parts (O(parts), before any token is laid out), and a larger prompt is refused naming the part that
passes the bound; a file over :data:`MAX_FILE_BYTES` is not read.

Every problem with the file or with the output path (a folder, a missing folder, a name the system
refuses) raises :class:`mrope.MRopeError` naming it; the command prints it and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._errors import MRopeError
from .families import Family, from_config
from .show import COMPATS, MAX_TOKENS, show

__all__ = ["PromptFile", "build_prompt", "load_prompt", "main"]

#: how each model type's processor lays out images and videos:
#: ``whole`` ``vision_start, pads, vision_end`` (a video one block);
#: ``frames`` as whole for images, a video one ``<timestamp> vision_start, pads, vision_end`` per frame;
#: ``glm`` ``image_start, image pads, image_end``; a video ``video_start``, per frame an image block and
#: its timestamp, ``video_end``;
#: ``ernie`` ``image_start, image pads, image_end``; ``video_start, video pads, video_end``;
#: ``omni`` as whole, an audio ``audio_start, audio pads, audio_end``, a video with its audio
#: ``vision_start, audio_start, video pads, audio pads, audio_end, vision_end``.
LAYOUTS = {
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "paddleocr_vl"), "whole"),
    **dict.fromkeys(
        (
            "qwen3_vl",
            "qwen3_vl_moe",
            "qwen3_5",
            "qwen3_5_moe",
            "qwen4_exp",
            "cosmos3_edge",
            "cosmos3_omni",
            "cohere_compass",
        ),
        "frames",
    ),
    **dict.fromkeys(("glm4v", "glm4v_moe", "glm46v", "glm_ocr"), "glm"),
    "ernie4_5_vl_moe": "ernie",
    **dict.fromkeys(
        ("qwen2_5_omni", "qwen2_5_omni_thinker", "qwen3_omni_moe", "qwen3_omni_moe_thinker"), "omni"
    ),
}
#: marker ids a config may lack, per layout (the released checkpoints' values); a config's own win
DEFAULT_MARKERS = {
    "whole": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    "frames": {"vision_start_token_id": 151652, "vision_end_token_id": 151653},
    "glm": {"image_start_token_id": 151339, "image_end_token_id": 151340},
    "ernie": {
        "image_start_token_id": 101304,
        "image_end_token_id": 101305,
        "video_start_token_id": 101306,
        "video_end_token_id": 101307,
    },
    "omni": {},
}
PART_KINDS = ("text", "image", "video", "audio")
#: the largest prompt file read (64 MiB): room for MAX_TOKENS ids, written out, and a config
MAX_FILE_BYTES = 64 << 20
DEFAULT_TIMESTAMP_TOKENS = 3
PROMPT_INPUTS = (
    "image_grid_thw",
    "video_grid_thw",
    "second_per_grid_ts",
    "audio_seqlens",
    "use_audio_in_video",
)
KNOWN_KEYS = {
    "config",
    "model_type",
    "settings",
    "compat",
    "video_time",
    "prompt",
    "input_ids",
    *PROMPT_INPUTS,
}


@dataclass(frozen=True)
class PromptFile:
    """A prompt file, read: its family and the arguments of ``family.positions``."""

    family: Family
    input_ids: list[int]
    inputs: dict[str, Any] = field(default_factory=dict)


def load_prompt(path: str | Path) -> PromptFile:
    """Read a prompt file (see the module docstring).

    Raises
    ------
    MRopeError
        The file is missing, larger than :data:`MAX_FILE_BYTES` or not a JSON object, names no model or
        an unknown one, has an unknown key or a malformed part, or its prompt has more than
        :data:`mrope.show.MAX_TOKENS` tokens (counted from its parts, before any is laid out).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise MRopeError(
                f"{path}: the prompt file has {size:,} bytes: more than the "
                f"{MAX_FILE_BYTES:,} of a prompt mrope show can draw ({MAX_TOKENS:,} tokens)"
            )
        spec = json.loads(path.read_text())
    except OSError as error:
        raise MRopeError(f"cannot read the prompt file {str(path)!r}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise MRopeError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(spec, dict):
        raise MRopeError(f"{path}: the prompt file must hold a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - KNOWN_KEYS)
    if unknown:
        raise MRopeError(f"{path}: unknown keys {unknown}; known: {sorted(KNOWN_KEYS)}")
    family = _family(spec, path)
    if ("prompt" in spec) == ("input_ids" in spec):
        raise MRopeError(f"{path}: give either 'prompt' (a list of parts) or 'input_ids', not both or none")
    if "input_ids" in spec:
        if isinstance(spec["input_ids"], list) and len(spec["input_ids"]) > MAX_TOKENS:
            raise MRopeError(
                f"{path}: 'input_ids' has {len(spec['input_ids']):,} tokens: mrope show draws prompts of "
                f"at most {MAX_TOKENS:,} tokens"
            )
        inputs = {name: spec[name] for name in PROMPT_INPUTS if spec.get(name) is not None}
        return PromptFile(family, spec["input_ids"], inputs)
    parts = spec["prompt"]
    if not isinstance(parts, list):
        raise MRopeError(f"{path}: 'prompt' must be a list of parts, got {type(parts).__name__}")
    use_audio = spec.get("use_audio_in_video", False)
    if not isinstance(use_audio, bool):
        raise MRopeError(f"{path}: 'use_audio_in_video' must be true or false, got {use_audio!r}")
    return build_prompt(family, parts, use_audio_in_video=use_audio)


def _family(spec: dict[str, Any], path: Path) -> Family:
    config = spec.get("config")
    if isinstance(config, str):  # a config.json next to the prompt file
        config_path = path.parent / config
        try:
            config = json.loads(config_path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise MRopeError(f"{path}: cannot read the config {str(config_path)!r}: {error}") from None
    if config is None:
        if "model_type" not in spec:
            raise MRopeError(f"{path}: name the model with 'config' or 'model_type'")
        config = {"model_type": spec["model_type"]}
    elif not isinstance(config, dict):
        raise MRopeError(f"{path}: 'config' must be a JSON object or a path, got {type(config).__name__}")
    elif "model_type" in spec:
        config = {**config, "model_type": spec["model_type"]}
    settings = spec.get("settings", {})
    if not isinstance(settings, dict):
        raise MRopeError(f"{path}: 'settings' must be a JSON object, got {type(settings).__name__}")
    options = {key: spec[key] for key in ("compat", "video_time") if key in spec}
    return from_config(config, **options, **settings)


def build_prompt(family: Family, parts: Sequence[Any], *, use_audio_in_video: bool = False) -> PromptFile:
    """The token ids and grids of ``parts`` (see the module docstring), laid out as the family's
    processor lays them out.

    The size of the prompt is known from its parts before any token is laid out (O(parts)): a prompt of
    more than :data:`mrope.show.MAX_TOKENS` tokens is refused, naming the part that passes the bound."""
    layout = LAYOUTS.get(family.model_type)
    if layout is None:
        raise MRopeError(f"no prompt layout for {family.model_type}: give 'input_ids' instead of 'prompt'")
    settings, config = family.settings, {**DEFAULT_MARKERS[layout], **family.config, **family.settings}
    merge = settings["spatial_merge_size"]
    temporal = settings.get("temporal_merge_size", 1)
    text_id = _text_id(config)
    pieces: list[_Piece] = []
    size = 0
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
    audios: list[int] = []

    image_marks = ("image_start_token_id", "image_end_token_id")
    if layout not in ("glm", "ernie"):
        image_marks = ("vision_start_token_id", "vision_end_token_id")
    if layout == "omni":
        config.setdefault("vision_end_token_id", config["vision_start_token_id"] + 1)
        config.setdefault("audio_end_token_id", config["audio_start_token_id"] + 1)

    def marker(name: str) -> int:
        if not isinstance(config.get(name), int):
            raise MRopeError(
                f"{family.model_type}: the prompt needs {name!r}: give it in 'config' or 'settings'"
            )
        return config[name]

    def block(pad: int, count: int, start: str, end: str) -> list[tuple[int, int]]:
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
            piece.runs = block(
                settings["image_token_id"], grid[0] * grid[1] * grid[2] // merge**2, *image_marks
            )
        else:
            grid = _grid(part["video"], merge, temporal, where)
            videos.append(grid)
            if "second_per_grid_ts" in part:
                seconds.append(part["second_per_grid_ts"])
            plane = grid[1] * grid[2] // merge**2
            stamp = (
                text_id,
                _count(
                    part.get("timestamp_tokens", DEFAULT_TIMESTAMP_TOKENS), f"{where} timestamp_tokens", 0
                ),
            )
            if layout == "glm":  # per frame an image block and its timestamp, between the video markers
                frame = block(settings["image_token_id"], plane, *image_marks) + [stamp]
                piece.runs = [(marker("video_start_token_id"), 1)]
                piece.frames, piece.frame, piece.after = grid[0], frame, [(marker("video_end_token_id"), 1)]
            elif layout == "frames":  # per frame its timestamp and a block
                piece.frames = grid[0]
                piece.frame = [stamp] + block(
                    settings["video_token_id"], plane, "vision_start_token_id", "vision_end_token_id"
                )
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
        if size > MAX_TOKENS:
            raise MRopeError(
                f"{where}: the prompt reaches {size:,} tokens with this {kind}: mrope show draws prompts "
                f"of at most {MAX_TOKENS:,} tokens"
            )
        pieces.append(piece)
    if seconds and len(seconds) != len(videos):
        raise MRopeError("give second_per_grid_ts for every video or for none")
    inputs: dict[str, Any] = {"image_grid_thw": images or None, "video_grid_thw": videos or None}
    if seconds:
        inputs["second_per_grid_ts"] = seconds
    if layout == "omni":
        inputs.update(audio_seqlens=audios or None, use_audio_in_video=use_audio_in_video)
    elif use_audio_in_video:
        raise MRopeError(f"use_audio_in_video: {family.model_type} takes no audio")
    ids: list[int] = []
    for piece in pieces:
        piece.extend(ids)
    return PromptFile(family, ids, inputs)


@dataclass
class _Piece:
    """One part's tokens, run-length encoded: ``ids`` as given, or ``runs`` (token id, count), then
    ``frames`` times the runs of ``frame``, then ``after``; its size is known before it is laid out."""

    ids: list[int] | None = None
    runs: list[tuple[int, int]] = field(default_factory=list)
    frames: int = 0
    frame: list[tuple[int, int]] = field(default_factory=list)
    after: list[tuple[int, int]] = field(default_factory=list)

    def size(self) -> int:
        if self.ids is not None:
            return len(self.ids)
        return sum(n for _, n in self.runs + self.after) + self.frames * sum(n for _, n in self.frame)

    def extend(self, ids: list[int]) -> None:
        """Append the piece's tokens to ``ids`` (a frame is laid out once, then repeated)."""
        if self.ids is not None:
            ids.extend(self.ids)
            return
        for token, count in self.runs:
            ids.extend([token] * count)
        if self.frames:
            frame: list[int] = []
            for token, count in self.frame:
                frame.extend([token] * count)
            ids.extend(frame * self.frames)
        for token, count in self.after:
            ids.extend([token] * count)


def _text_id(config: dict[str, Any]) -> int:
    """A text token id that is none of the family's special ids: the first from 1000 up."""
    special = {value for key, value in config.items() if key.endswith("token_id") and isinstance(value, int)}
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


def _audio_tokens(family: Family, seqlen: int) -> int:
    """Placeholder tokens of an audio of ``seqlen`` feature frames (the Omni family's own count)."""
    return int(family.audio_tokens(np.array([seqlen], dtype=object))[0])  # Python ints: no overflow


def main(argv: Sequence[str] | None = None) -> int:
    """The ``mrope`` command; returns the exit status (0, or 2 after printing an error)."""
    parser = argparse.ArgumentParser(
        prog="mrope", description="mrope: M-RoPE positions of multimodal prompts"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    draw = commands.add_parser(
        "show",
        help="draw a prompt's t, h and w positions into a PNG",
        description="Draw a prompt's t, h and w positions into a PNG (the prompt file: see mrope.cli).",
    )
    draw.add_argument("prompt", help="the prompt file (JSON)")
    draw.add_argument("--out", required=True, help="the PNG to write")
    draw.add_argument("--compare", action="store_true", help="draw both conventions and their differences")
    draw.add_argument(
        "--compat", choices=COMPATS, help="the convention drawn (default: the file's, else vllm)"
    )
    draw.add_argument("--title", help="the title's first line")
    args = parser.parse_args(argv)
    try:
        prompt = load_prompt(args.prompt)
        out = show(
            prompt.family,
            prompt.input_ids,
            **prompt.inputs,
            path=args.out,
            compat=args.compat,
            compare=args.compare,
            title=args.title,
        )
    except MRopeError as error:
        print(f"mrope show: error: {error}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
