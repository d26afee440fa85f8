"""The rules on a video's time inputs: its seconds per grid step (``second_per_grid_ts``) and the offsets
of its frames (``frame_offsets``), checked once per call for every family.

The array path (:func:`check_second_per_grid_ts`, from :meth:`Family.check_vision_inputs`) and the items
path (:func:`check_seconds`, from a family's ``item_rows``) share one rule on Python values:
:func:`check_seconds`. Each function reads the family's public settings only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .._arrays import to_int_array, to_numpy
from .._errors import MRopeError
from ..core.place import LARGEST_POSITION
from .inputs import Seconds, seconds_dtype


class VideoTiming(Protocol):
    """What these checks read of a family (:class:`mrope.Family` has it): how it scales video time."""

    @property
    def model_type(self) -> str: ...
    @property
    def uses_second_per_grid_ts(self) -> bool: ...
    @property
    def video_frames_in_prompt(self) -> bool: ...
    @property
    def video_temporal_merge(self) -> int: ...
    @property
    def time_rate(self) -> float: ...
    @property
    def default_second_per_grid_ts(self) -> float: ...


def check_second_per_grid_ts(family: VideoTiming, seconds: Any, videos: np.ndarray) -> Seconds | None:
    """The seconds per grid step of each video as float64 with the dtype they were given in (None if
    not given; see :class:`Seconds`): each in ``[0, LARGEST_POSITION]``, and, for families that scale
    time, no video's last frame past ``LARGEST_POSITION`` (its time index, ``(T - 1) * seconds *
    time_rate``, would otherwise pass int64 when cast)."""
    checked, given = None, None
    if seconds is not None:
        if not family.uses_second_per_grid_ts:
            raise seconds_refused(family)
        arr = seconds if type(seconds) is np.ndarray else to_numpy(seconds, name="second_per_grid_ts")
        if arr.ndim != 1 or arr.shape[0] != len(videos):
            raise MRopeError(
                f"second_per_grid_ts must have shape ({len(videos)},), one value per video, "
                f"got shape {tuple(arr.shape)}"
            )
        dtype = arr.dtype
        if dtype.kind not in "iuf":
            raise MRopeError(f"second_per_grid_ts must be numbers, got dtype {dtype}")
        values = arr if dtype is _FLOAT64 else arr.astype(np.float64)
        checked = Seconds(values, seconds_dtype(seconds, dtype))
        given = values.tolist()
    if given is not None or (family.uses_second_per_grid_ts and len(videos)):
        check_seconds(family, given, [t for t, _, _ in videos.tolist()])
    return checked


def check_seconds(family: VideoTiming, given: list[float] | None, frames: Sequence[int]) -> None:
    """The rules of :func:`check_second_per_grid_ts` on Python values: each video's seconds per grid
    step (``given``; None: not given, the family's ``default_second_per_grid_ts`` each) in ``[0,
    LARGEST_POSITION]`` and, for families that scale time, the time index of each video's last frame
    (``frames``: each video's T) no further. One Python step per video."""
    if given is not None:
        for i, x in enumerate(given):  # (NaN fails ``0 <= x``)
            if not 0 <= x <= LARGEST_POSITION:
                rule = (
                    f"must be at most {LARGEST_POSITION}" if 0 <= x < math.inf else "must be finite and >= 0"
                )
                raise MRopeError(f"second_per_grid_ts[{i}] = {x}: {rule}")
    if not family.uses_second_per_grid_ts:
        return
    temporal, rate = family.video_temporal_merge, family.time_rate
    default = family.default_second_per_grid_ts
    for i, t in enumerate(frames):
        x = default if given is None else given[i]
        if (t // temporal - 1) * x * rate > LARGEST_POSITION:
            raise MRopeError(
                f"second_per_grid_ts[{i}] = {x:g}{' (not given)' if given is None else ''}: video "
                f"{i}'s last frame (T = {t // temporal}) would get time index "
                f"{(t // temporal - 1) * x * rate:.3g}, past the largest position {LARGEST_POSITION}"
            )


def seconds_refused(family: VideoTiming) -> MRopeError:
    """The error for seconds given to a family that does not scale video time."""
    return MRopeError(f"{family.model_type} does not scale video time: second_per_grid_ts must be None")


def check_frame_offsets(
    family: VideoTiming, frame_offsets: Any, videos: np.ndarray, video_offsets: list[int] | None
) -> np.ndarray:
    """``frame_offsets`` as an int64 array, one per video frame; only for frame families, with
    ``video_offsets``."""
    if not family.video_frames_in_prompt:
        raise MRopeError(
            f"{family.model_type} takes no frame_offsets (only families whose videos are frames "
            "separated by timestamp text: Qwen3-VL, GLM-4.1V and their kin)"
        )
    if video_offsets is None:
        raise MRopeError("frame_offsets needs video_offsets (where each video's placeholders start)")
    offsets = to_int_array(frame_offsets, name="frame_offsets", ndim=1)
    count = int(videos[:, 0].sum()) if len(videos) else 0
    if offsets.shape[0] != count:
        raise MRopeError(
            f"frame_offsets has {offsets.shape[0]} values but video_grid_thw describes {count} frames: "
            "one offset per frame"
        )
    return offsets


_FLOAT64 = np.dtype(np.float64)
