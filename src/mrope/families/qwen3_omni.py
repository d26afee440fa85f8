"""Qwen3-Omni (thinker): float32 positions, fractional video time, video and audio merged by time.

The rule, as transformers' ``get_rope_index`` computes it (every block is followed by text at
``max(block) + 1``, in both ``compat`` modes):

- positions are float32: a video frame ``k`` has time index ``k * second_per_grid_ts *
  position_id_per_seconds`` (float32, not truncated: often fractional), images ``k *
  position_id_per_seconds``; everything after a fractional maximum is fractional too;
- an audio of feature length ``L`` has ``L // 100 * 13`` tokens plus the two-convolution count of
  ``L % 100`` (``n_window`` 50), positioned like text;
- a video with its audio: ``vision_start, audio_start`` take two consecutive positions, then video
  and audio tokens share one base and are merged by time (a frame before the audio tokens of equal
  time), the two end markers follow the last merged piece's maximum.

Every sum is rounded to float32 in transformers' order (``base + offset`` once per token, the running
base once per step), so the results are equal to the last bit. Positions are exact while they stay
below 2**24.

vLLM's rule (``compat="vllm", video_time="float64"``: :mod:`mrope.families._omni`) differs: positions
are integers (int64), a frame's time ``trunc(k * (second_per_grid_ts * position_id_per_seconds))`` in
float64, a video without ``second_per_grid_ts`` takes 2 seconds per grid step (vLLM's default), and
after a video with its audio (merged by time as above, in integers) the two end markers follow the
block's largest position, not its last piece's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.place import ItemBlocks
from ..core.segments import SegmentBuilder
from ._omni import AUDIO, AUDIO_IN_VIDEO, IMAGE, Items, OmniFamily, merge_by_time

f32 = np.float32


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen3Omni(OmniFamily):
    model_types = ("qwen3_omni_moe", "qwen3_omni_moe_thinker")
    default_mrope_sections = {"qwen3_omni_moe_text": (24, 20, 20)}
    rotary_layout = "interleaved"

    n_window: int = 50

    @property
    def default_second_per_grid_ts(self) -> float:
        return 2.0 if self.vllm_rule else 1.0

    def audio_tokens(self, seqlens: np.ndarray) -> np.ndarray:
        chunk = self.n_window * 2
        rest = (seqlens % chunk - 1) // 2 + 1
        return ((rest - 1) // 2 + 1 - 1) // 2 + 1 + seqlens // chunk * 13

    def time_index(self, kind: int, frames: int, seconds: float) -> np.ndarray:
        """Time index of each frame (float32), as transformers computes it."""
        if kind == IMAGE:
            return (np.arange(frames) * self.position_id_per_seconds).astype(np.float32)
        return np.arange(frames, dtype=np.float32) * f32(seconds) * f32(self.position_id_per_seconds)

    def item_blocks(
        self, items: Items, images: np.ndarray, videos: np.ndarray, seconds: np.ndarray
    ) -> ItemBlocks:
        """Every item spans its placeholders; its start and end markers are text, in runs of their own
        (transformers rounds the running base at each): the start markers in one run, each end marker in
        its own."""
        start = items.content
        end = items.content + items.num_vision + items.num_audio
        is_aiv = items.kind == AUDIO_IN_VIDEO
        cuts = np.concatenate([items.bos, end + 1, end[is_aiv] + 2])
        cuts.sort()

        def layout(i: int, st: np.float32, out: SegmentBuilder) -> tuple[np.float32, np.float32]:
            kind, content = int(items.kind[i]), int(items.content[i])
            num_audio = int(items.num_audio[i])
            if kind == AUDIO:
                out.text(content, st)
                last = f32(st + (num_audio - 1))
                return last, last
            frames, height, width = self.item_grid(items, i, images, videos)
            t = (st + self.time_index(kind, frames, seconds[items.grid[i]] if kind != IMAGE else 1.0)).astype(
                np.float32
            )
            video_max = max(t[-1], f32(st + (height - 1)), f32(st + (width - 1)))
            plane = height * width
            if kind == AUDIO_IN_VIDEO:
                audio = (st + np.arange(num_audio, dtype=np.float32)).astype(np.float32)
                merge_by_time(out, content, st, t, audio, height, width)
                last = audio[-1] if audio[-1] >= t[-1] else video_max
                return max(video_max, audio[-1]), last
            out.add(content + np.arange(frames) * plane, t, st, width, 0)
            return video_max, video_max

        return ItemBlocks(start, end, items.row, layout, floats=True, cuts=cuts)

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
        """Frames and audio tokens merged by time (a frame first on a tie), in integers."""
        merge_by_time(out, start, base, base + t, base + np.arange(num_audio), height, width)
        return base + max(int(t[-1]), height - 1, width - 1, num_audio - 1)
