"""Qwen2.5-VL: Qwen2-VL's rule, with video time scaled by ``second_per_grid_ts * tokens_per_second``.

Frame ``k`` of a video has time index ``trunc(k * interval)``, ``interval = tokens_per_second *
second_per_grid_ts``, in the arithmetic of :class:`mrope.core.place.TimeArithmetic`:

- ``compat="vllm"``: the family's ``video_time``, whatever the dtype of the seconds (their values are
  read exactly): ``"float32"`` (default; the interval rounded once to float32, a float32 product, as
  SGLang computes with its float32 seconds) or ``"float64"`` (vLLM's numpy float64);
- ``compat="transformers"``: transformers' own, which computes in the dtype of the seconds tensor
  (:data:`mrope.core.place.TRANSFORMERS_TIMES`): bfloat16 or float16 (a model's ``inputs.to(dtype)``
  casts them), float32 (the processor's), float64; integer seconds (or none) stay integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import MRopeError
from ..core.place import (
    FLOAT16,
    VIDEO_TIMES,
    TimeArithmetic,
    scaled_time,
    time_interval,
    transformers_time,
)
from .inputs import Seconds
from .qwen2_vl import Qwen2VL


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen2_5_VL(Qwen2VL):
    model_types = ("qwen2_5_vl",)
    default_mrope_sections = {"qwen2_5_vl_text": (16, 24, 24)}

    #: where a config leaves it out, transformers' ``Qwen2_5_VLVisionConfig`` default (4), which its config
    #: class fills in and vLLM and SGLang read from the loaded config: a ``config.json`` without it means
    #: the same read as a dict or through ``AutoConfig`` (the released checkpoints give 2)
    tokens_per_second: int | float = 4
    uses_second_per_grid_ts = True

    def time_arithmetic(self, seconds: Seconds | None) -> TimeArithmetic:
        """The arithmetic of the videos' time (see the module docstring): ``video_time``'s under
        ``compat="vllm"``, transformers' for the dtype of ``seconds`` under ``"transformers"``."""
        if self.compat == "vllm":
            return VIDEO_TIMES[self.video_time]
        return transformers_time("int" if seconds is None else seconds.dtype, self.tokens_per_second)

    def video_interval(
        self, second_per_grid_ts: Seconds | None, videos: np.ndarray | list[list[int]]
    ) -> tuple[np.ndarray | float, int]:
        """``tokens_per_second * second_per_grid_ts`` (1 second when not given) in the videos' time
        arithmetic (:meth:`time_arithmetic`), and its rounding
        (:func:`mrope.families._seconds.check_second_per_grid_ts` bounds each video's last time index).
        A video whose time passes float16's range (transformers' float16 arithmetic gives it garbage
        positions) is refused."""
        if len(videos) == 0:
            return 1.0, 0
        arithmetic = self.time_arithmetic(second_per_grid_ts)
        seconds = np.ones(len(videos)) if second_per_grid_ts is None else second_per_grid_ts.values
        interval = time_interval(self.tokens_per_second, seconds, arithmetic)
        if arithmetic.rounding == FLOAT16:  # (bfloat16 has float32's range: no time reaches its end)
            frames = np.asarray(videos, dtype=np.int64)[:, 0]
            last = scaled_time(frames - 1, interval, FLOAT16)
            bad = np.flatnonzero(~np.isfinite(last))
            if bad.size:
                i = int(bad[0])
                raise MRopeError(
                    f"second_per_grid_ts[{i}] = {seconds[i]:g} ({arithmetic.name}): transformers computes "
                    f"video {i}'s time in {arithmetic.name}, in which its last frame's time index "
                    f"({int(frames[i]) - 1} * {self.tokens_per_second} * {seconds[i]:g}) overflows: give "
                    "the seconds as float32"
                )
        return interval, arithmetic.rounding

    @property
    def time_rate(self) -> float:
        return self.tokens_per_second
