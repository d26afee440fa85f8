"""What vLLM hands the model runner at a request's admission, as mrope's inputs.

vLLM 0.32 computes a request's M-RoPE positions once, at admission, with the model's
``get_mrope_input_positions(prompt_token_ids, mm_features)``. Each multimodal item is a
``vllm.multimodal.inputs.MultiModalFeatureSpec``: its ``modality``, its ``mm_position`` (a
``PlaceholderRange`` whose ``offset`` is where the item's placeholder range starts in the prompt) and
its ``data`` (a ``MultiModalKwargsItem`` of ``MultiModalFieldElem``, e.g. ``image_grid_thw``).
:func:`inputs_from_mm_features` turns them into the keyword inputs of :meth:`mrope.Family.positions`,
:meth:`mrope.Family.segments` and :meth:`mrope.serving.PositionTable.add`, offsets included, so that
mrope does not scan the prompt where an item is one block.

What the offset points at (vLLM 0.32's processors, checked against their ``_get_prompt_updates``):

- images (every family), and videos of Qwen2-VL, Qwen2.5-VL, Ernie-4.5-VL: the item's first
  placeholder token (the replacement is the pad tokens only; ``vision_start`` lies before it);
- Qwen3-VL and its kin (Qwen3.5, Cosmos3, Qwen4-Exp): the first timestamp token of the video's first
  frame (the replacement is, per frame, timestamp text, ``vision_start``, pads, ``vision_end``);
- GLM-4.1V/4.5V/4.6V, GLM-OCR: the video's ``<|begin_of_video|>``;
- Keye-VL: the video's first placeholder token (its frames adjacent); Keye-VL-1.5: the frame token
  before the first frame (per frame: frame token, timestamp text, pads), its ``video_grid_thw`` one row
  per frame, each row taken as a video of its own (:func:`row_offsets`);
- OpenPangu-VL: the first pad of the video's first frame (the frames joined by ``vision_end,
  vision_start``).

MiniCPM-V 4.6 and Qwen3-ASR position every token in order: their items give no inputs.

The Omni thinkers (Qwen2.5-Omni, Qwen3-Omni) locate their items in the prompt (they take no offsets):
their features give the grids, each video's ``second_per_grid_ts`` (the family's default where a video
has none, as vLLM's code assumes: 1 s, Qwen3-Omni 2 s), each audio's ``audio_feature_lengths`` in
offset order (an audio interleaved with its video has the video's offset, ``audio_start``) and the
videos' shared ``use_audio_in_video`` (:func:`omni_inputs`).

These are the offsets :meth:`mrope.Family.positions` takes (see its ``image_offsets`` and
``video_offsets``); the frame families find the frames in the prompt and check them against the offsets.

:data:`VLLM_SETTINGS` are the family settings under which mrope's positions equal vLLM 0.32's own (the
tests compare them element for element with vLLM's code). :func:`unsupported_reason` names the families
whose rule in vLLM differs from mrope's in ways no setting covers (none today).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..._arrays import int_list, to_grid_array
from ..._errors import MRopeError
from ...families import Family
from ...families.inputs import PromptItem

#: settings (``from_config(config, **VLLM_SETTINGS)``) that reproduce vLLM 0.32's positions: compat
#: "vllm" (text after a block at ``max(block) + 1``) and vLLM's float64 arithmetic of scaled video time
#: (``int64(k * (second_per_grid_ts * tokens_per_second))``, Qwen2.5-VL); for the Omni thinkers, vLLM's
#: whole rule (integer positions, its interleaving of a video with its audio: :mod:`mrope.families._omni`)
VLLM_SETTINGS: dict[str, Any] = {"compat": "vllm", "video_time": "float64"}
#: the inputs beyond the grids and offsets that admission reads from vLLM's mm_features (an Omni
#: thinker's audio, :func:`omni_inputs`); a family that takes others is left to positions mode
ADMISSION_READS = ("audio_seqlens", "use_audio_in_video")


@functools.lru_cache(maxsize=64)  # per family object (settings do not change): admission asks each time
def unsupported_reason(family: Family) -> str | None:
    """Why mrope cannot reproduce vLLM 0.32's positions for this family (None: it does, with
    :data:`VLLM_SETTINGS`)."""
    rows = family.segment_rows_error("mrope's vLLM integration")
    if rows is not None:
        return str(rows)
    if not family.decode_follows_index:  # GLM-Image: vLLM takes mrope_position_delta past the prompt
        return (
            f"{family.model_type}: the tokens generated after the prompt do not take index + delta (they "
            "take family.generation_positions()): mrope's vLLM integration serves index + delta"
        )
    unread = [name for name in family.extra_inputs if name not in ADMISSION_READS]
    if unread:  # (MiniCPM-V 4.7's crop sizes)
        return (
            f"{family.model_type} takes {', '.join(family.extra_inputs)}, which the plugin's admission "
            "does not read from vLLM's mm_features"
        )
    return family.vllm_difference()


def inputs_from_mm_features(family: Family, mm_features: Sequence[Any]) -> dict[str, Any]:
    """The keyword inputs of :meth:`Family.positions` and :meth:`PositionTable.add` for a vLLM request.

    Parameters
    ----------
    family : the request's family, from ``from_config(hf_config, **VLLM_SETTINGS)``
    mm_features : the request's ``MultiModalFeatureSpec`` list (``req_state.mm_features``), any order;
        only image and video features (a ``prompt_embeds`` feature must be left out by the caller)

    Returns
    -------
    dict with ``image_grid_thw`` and ``video_grid_thw`` ((n, 3) int64 arrays, None when empty),
    ``image_offsets`` and ``video_offsets`` (lists of int: both always given, so that the prompt is not
    scanned for a modality it lacks), and for families that scale video time ``second_per_grid_ts``
    ((num_videos,) float64 holding vLLM's float32 values; 1.0 where a video has none, as in vLLM); for
    frame families (Qwen3-VL, GLM-4.1V) ``frame_offsets`` from the videos' ``is_embed`` runs
    (:func:`frame_offsets`), so that admission does not scan the prompt. Items are in placeholder order
    (by offset), as vLLM iterates them.

    Raises
    ------
    MRopeError
        A family whose vLLM rule mrope does not reproduce (:func:`unsupported_reason`), a modality the
        family has no rule for, a feature without data or without its grid, a video time given to a
        family that does not scale time.
    """
    reason = unsupported_reason(family)
    if reason is not None:
        raise MRopeError(reason)
    if not family.places_items:  # every token in order (MiniCPM-V 4.6, Qwen3-ASR): items give nothing
        return {}
    if family.extra_inputs:  # the Omni thinkers: audio, and no offsets
        return omni_inputs(family, mm_features)
    return _inputs_of(family, _read_features(family, mm_features))


def omni_inputs(family: Family, mm_features: Sequence[Any]) -> dict[str, Any]:
    """The keyword inputs of an Omni thinker's request, read as vLLM 0.32's ``iter_mm_features`` reads
    them: ``image_grid_thw``, ``video_grid_thw`` and ``second_per_grid_ts`` (the family's default where a
    video has none) in offset order, ``audio_seqlens`` (each audio's ``audio_feature_lengths``, offset
    order: an audio interleaved with its video has the video's offset) and ``use_audio_in_video`` (the
    videos' shared field; vLLM pairs video ``i`` with audio ``i``, so it needs as many audios as
    videos, as vLLM's processor does). The items are found in the prompt (no offsets)."""
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
    audio: list[int] = []
    flags: set[bool] = set()
    for _, modality, offset, data in _in_order(mm_features):
        if modality == "image":
            images.append(_grid(data.get("image_grid_thw"), "image_grid_thw", offset))
        elif modality == "video":
            videos.append(_grid(data.get("video_grid_thw"), "video_grid_thw", offset))
            given = data.get("second_per_grid_ts")
            seconds.append(family.default_second_per_grid_ts if given is None else float(given.data))
            flag = data.get("use_audio_in_video")
            flags.add(flag is not None and bool(_scalar(flag, "use_audio_in_video", offset)))
        elif modality == "audio":
            audio.append(int(_scalar(data.get("audio_feature_lengths"), "audio_feature_lengths", offset)))
        else:
            raise MRopeError(
                f"{family.model_type} has no M-RoPE rule for a {modality!r} feature (at offset {offset})"
            )
    if len(flags) > 1:
        raise MRopeError("use_audio_in_video differs between the request's videos (vLLM shares it)")
    use_audio_in_video = flags == {True}
    if use_audio_in_video and len(audio) != len(videos):
        raise MRopeError(
            f"use_audio_in_video with {len(videos)} videos and {len(audio)} audios: vLLM pairs video i "
            "with audio i, and its processor needs as many of each"
        )
    return {
        "image_grid_thw": np.array(images, dtype=np.int64) if images else None,
        "video_grid_thw": np.array(videos, dtype=np.int64) if videos else None,
        "second_per_grid_ts": np.array(seconds, dtype=np.float64) if videos else None,
        "audio_seqlens": np.array(audio, dtype=np.int64) if audio else None,
        "use_audio_in_video": use_audio_in_video,
    }


def admission_inputs(family: Family, mm_features: Sequence[Any]) -> dict[str, Any]:
    """The keyword inputs of :meth:`Family.positions` and :meth:`PositionTable.add` for a vLLM request,
    in the form that costs the family least: ``items`` (:class:`mrope.families.PromptItem`, read
    straight from the features, no array built) for a family with a rule on items
    (:attr:`Family.rule_on_items`) whose videos have one grid row each, else
    :func:`inputs_from_mm_features`. Raises what :func:`inputs_from_mm_features` raises."""
    if not family.rule_on_items:
        return inputs_from_mm_features(family, mm_features)
    reason = unsupported_reason(family)
    if reason is not None:
        raise MRopeError(reason)
    features = _read_features(family, mm_features)
    if any(len(feature.grids) != 1 for feature in features):  # a video of several rows: the arrays
        return _inputs_of(family, features)
    return {"items": [PromptItem(f.modality, f.offset, f.grids[0], f.seconds) for f in features]}


class _Feature(NamedTuple):
    """One image or video feature's values, read once for either form of the inputs."""

    modality: str  # "image" or "video"
    offset: int
    grids: list[list[int]]  # (T, H, W): one, or a video's runs of equal frames (Keye-VL-1.5), in order
    seconds: float | None  # a video's second_per_grid_ts; None: not given (and for images)
    position: Any  # vLLM's PlaceholderRange (its is_embed runs locate frames)


def _read_features(family: Family, mm_features: Sequence[Any]) -> list[_Feature]:
    """The request's image and video features in placeholder order; a modality the family has no rule
    for, a feature without data or without its grid is refused."""
    features = []
    for feature, modality, offset, data in _in_order(mm_features):
        seconds = None
        if modality == "image":
            grids = [_grid(data.get("image_grid_thw"), "image_grid_thw", offset)]
        elif modality == "video":
            elem = data.get("video_grid_thw")
            if elem is None or getattr(elem.data, "ndim", 1) == 1:
                grids = [_grid(elem, "video_grid_thw", offset)]
            else:  # one row per run of equal frames (Keye-VL-1.5's slow and fast frames)
                name = f"the feature at offset {offset}'s video_grid_thw"
                grids = to_grid_array(elem.data, name=name).tolist()
            given = data.get("second_per_grid_ts")
            seconds = None if given is None else float(given.data)
        else:
            raise MRopeError(
                f"{family.model_type} has no M-RoPE rule for a {modality!r} feature (at offset {offset})"
            )
        features.append(_Feature(modality, offset, grids, seconds, feature.mm_position))
    return features


def _inputs_of(family: Family, features: list[_Feature]) -> dict[str, Any]:
    """:func:`inputs_from_mm_features`' arrays and offsets of the features."""
    images: list[list[int]] = []
    videos: list[list[int]] = []
    seconds: list[float] = []
    image_offsets: list[int] = []
    video_offsets: list[int] = []
    video_ranges: list[Any] = []
    for feature in features:
        if feature.modality == "image":
            images += feature.grids
            image_offsets.append(feature.offset)
            continue
        videos += feature.grids
        if len(feature.grids) == 1:
            video_offsets.append(feature.offset)
        else:
            grids = np.array(feature.grids, dtype=np.int64)
            video_offsets += row_offsets(feature.position, grids, family.spatial_merge_size)
        video_ranges.append(feature.position)
        seconds += [1.0 if feature.seconds is None else feature.seconds] * len(feature.grids)
    inputs: dict[str, Any] = {
        "image_grid_thw": np.array(images, dtype=np.int64) if images else None,
        "video_grid_thw": np.array(videos, dtype=np.int64) if videos else None,
        "image_offsets": image_offsets,
        "video_offsets": video_offsets,
    }
    if family.video_frames_in_prompt and videos:
        frames = frame_offsets(video_ranges, sum(grid[0] for grid in videos))
        if frames is None:
            frames = adjacent_frames(video_ranges, video_offsets, videos, family.spatial_merge_size)
        if frames is not None:
            inputs["frame_offsets"] = frames
    if family.uses_second_per_grid_ts:
        inputs["second_per_grid_ts"] = np.array(seconds, dtype=np.float64) if videos else None
    elif any(s != 1.0 for s in seconds):
        i = next(i for i, s in enumerate(seconds) if s != 1.0)
        raise MRopeError(
            f"video {i} (offset {video_offsets[i]}) has second_per_grid_ts {seconds[i]}, but "
            f"{family.model_type} does not scale video time"
        )
    return inputs


def frame_offsets(ranges: Sequence[Any], num_frames: int) -> np.ndarray | None:
    """Where each video frame's placeholders start, from the videos' ``PlaceholderRange``s: the runs
    of ``is_embed`` (the frame tokens vLLM's processors mark among a frame video's timestamps and
    markers), in order. None where a range has no ``is_embed`` or the runs are not ``num_frames``
    (the family then finds the frames in the prompt, and names what is wrong)."""
    starts = []
    for placeholder in ranges:
        embed = placeholder.is_embed
        if embed is None:
            return None
        mask = np.asarray(embed.numpy() if hasattr(embed, "numpy") else embed, dtype=bool)
        first = mask.copy()
        first[1:] &= ~mask[:-1]
        starts.append(np.flatnonzero(first) + placeholder.offset)
    frames = np.concatenate(starts) if len(starts) > 1 else starts[0]
    return frames if frames.shape[0] == num_frames else None


def adjacent_frames(
    ranges: Sequence[Any], offsets: list[int], videos: list[list[int]], merge: int
) -> np.ndarray | None:
    """Where each video frame's placeholders start when every video's range holds its frames' tokens
    only (Keye-VL: the frames adjacent, no text between them): video ``i``'s frame ``k`` at
    ``offsets[i] + k * H' * W'``. None where a range holds more (the family finds the frames)."""
    grids = np.array(videos, dtype=np.int64)
    plane = (grids[:, 1] // merge) * (grids[:, 2] // merge)
    if sum(r.length for r in ranges) != int((grids[:, 0] * plane).sum()):
        return None
    count = grids[:, 0]
    frame = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(np.array(offsets, dtype=np.int64), count) + frame * np.repeat(plane, count)


def row_offsets(placeholder: Any, grids: np.ndarray, merge: int) -> list[int]:
    """Where each grid row of a video given as several rows (a run of equal frames each) starts: the
    item's offset for the first, then each row's first frame, from the ``is_embed`` runs where the
    range has them, else right after the row before it (adjacent frames)."""
    tokens = grids[:, 0] * (grids[:, 1] // merge) * (grids[:, 2] // merge)
    first_frame = np.cumsum(grids[:, 0]) - grids[:, 0]
    frames = frame_offsets([placeholder], int(grids[:, 0].sum()))
    starts = placeholder.offset + np.cumsum(tokens) - tokens if frames is None else frames[first_frame]
    starts[0] = placeholder.offset
    return starts.tolist()


def _offset(feature: Any) -> int:
    return feature.mm_position.offset


def _in_order(mm_features: Sequence[Any]) -> Iterator[tuple[Any, str, int, Any]]:
    """Each feature with its modality, offset and data, in placeholder order (as vLLM iterates them);
    a feature without data (vLLM clears it for items of a prefix-cache hit) is refused."""
    for feature in mm_features if len(mm_features) < 2 else sorted(mm_features, key=_offset):
        modality, offset, data = feature.modality, feature.mm_position.offset, feature.data
        if data is None:
            raise MRopeError(
                f"{modality} feature at offset {offset} has no data (vLLM clears it for cached items): "
                "its grid is needed"
            )
        yield feature, modality, offset, data


def _scalar(elem: Any, name: str, offset: int) -> int:
    """The one integer (or bool) of a feature's ``name`` field element (None: missing), refused when it
    is not one integer (a float is never truncated)."""
    if elem is None:
        raise MRopeError(f"the feature at offset {offset} has no {name}")
    values = np.asarray(elem.data)
    if values.size != 1 or values.dtype.kind not in "biu":
        raise MRopeError(
            f"the feature at offset {offset}'s {name} must be one integer, got {values.size} values of "
            f"dtype {values.dtype}"
        )
    return int(values.reshape(-1)[0])


def _grid(elem: Any, name: str, offset: int) -> list[int]:
    """The item's (T, H, W) from its ``name`` field element (None: missing), as integers: float grids
    are refused as the core refuses them (never truncated)."""
    if elem is None:
        raise MRopeError(f"the feature at offset {offset} has no {name}")
    what = f"the feature at offset {offset}'s {name}"
    grid = int_list(elem.data, name=what)
    if len(grid) != 3:
        raise MRopeError(f"{what} must be (T, H, W), got {grid}")
    return grid


def feature_spec(modality: str, offset: int, length: int, data: dict[str, Any], is_embed: Any = None) -> Any:
    """A vLLM ``MultiModalFeatureSpec`` of one item, as vLLM's processor builds it (for tests and
    benchmarks): ``data`` maps field names (``image_grid_thw``, ...) to the item's tensors, each wrapped
    in a ``MultiModalFieldElem`` of a batched field; the ``PlaceholderRange`` starts at ``offset``."""
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalFeatureSpec,
        MultiModalFieldElem,
        MultiModalKwargsItem,
        PlaceholderRange,
    )

    field = MultiModalBatchedField(keep_on_cpu=True)
    return MultiModalFeatureSpec(
        data=MultiModalKwargsItem({k: MultiModalFieldElem(data=v, field=field) for k, v in data.items()}),
        modality=modality,
        identifier=f"{modality}-{offset}",
        mm_position=PlaceholderRange(offset=offset, length=length, is_embed=is_embed),
    )
