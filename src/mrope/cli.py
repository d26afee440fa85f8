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
  - ``"prompt"``, a list of parts laid out as the model's processor lays them out (markers included;
    :func:`mrope.prompts.build_prompt`):
    ``{"text": 12}`` (12 text tokens) or ``{"text": [ids...]}``; ``{"image": [T, H, W]}`` (the grid
    before merging); ``{"video": [T, H, W], "second_per_grid_ts": 0.5, "timestamp_tokens": 3}``
    (seconds for the families that scale time; ``timestamp_tokens``, default 3, the text tokens of each
    frame's timestamp in the families that split a video into frames: Qwen3-VL and its kin, GLM; or each
    frame's ids, a list of lists); Omni
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

from . import prompts
from ._errors import MRopeError
from .core import COMPATS
from .families import Family, from_config
from .show import MAX_TOKENS, show

__all__ = ["PromptFile", "build_prompt", "load_prompt", "main"]

#: the largest prompt file read (64 MiB): room for MAX_TOKENS ids, written out, and a config
MAX_FILE_BYTES = 64 << 20
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
    """The prompt file of ``parts`` (see the module docstring), laid out by :func:`mrope.prompts.build_prompt`
    up to :data:`mrope.show.MAX_TOKENS` tokens (counted from the parts, before any token is laid out)."""
    prompt = prompts.build_prompt(family, parts, use_audio_in_video=use_audio_in_video, max_tokens=MAX_TOKENS)
    return PromptFile(family, prompt.input_ids, prompt.inputs())


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
        "--compat",
        choices=COMPATS,
        help="the convention drawn (default: the family's own: the file's, else vllm)",
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
