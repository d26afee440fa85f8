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
"""

from __future__ import annotations

import numpy as np

from ..core import SegmentTable
from ._omni import AUDIO, AUDIO_IN_VIDEO, IMAGE, Items, OmniFamily, SegmentBuilder

f32 = np.float32


class Qwen3Omni(OmniFamily):
    model_types = ("qwen3_omni_moe", "qwen3_omni_moe_thinker")
    settings = {**OmniFamily.settings, "n_window": 50}
    rotary_layout = "interleaved"

    def audio_tokens(self, seqlens: np.ndarray) -> np.ndarray:
        chunk = self.n_window * 2
        rest = (seqlens % chunk - 1) // 2 + 1
        return ((rest - 1) // 2 + 1 - 1) // 2 + 1 + seqlens // chunk * 13

    def time_index(self, kind: int, frames: int, seconds: float) -> np.ndarray:
        """Time index of each frame (float32), as transformers computes it."""
        if kind == IMAGE:
            return (np.arange(frames) * self.position_id_per_seconds).astype(np.float32)
        return np.arange(frames, dtype=np.float32) * f32(seconds) * f32(self.position_id_per_seconds)

    def place_items(
        self,
        length: int,
        row_starts: np.ndarray,
        row_lengths: np.ndarray,
        items: Items,
        images: np.ndarray,
        videos: np.ndarray,
        seconds: np.ndarray,
    ) -> tuple[SegmentTable, np.ndarray]:
        out = SegmentBuilder(np.float64)
        delta = np.zeros(row_starts.size, dtype=np.float32)
        bare = np.ones(row_starts.size, dtype=bool)
        bare[items.row] = False
        out.text(row_starts[bare], 0)  # rows of text only: integer positions, delta 0
        row_of = items.row.tolist()
        for i, r in enumerate(row_of):
            if i == 0 or row_of[i - 1] != r:  # a new row: text from its start, at position 0
                text_start, st, row_max = int(row_starts[r]), f32(0), f32(-1)
            kind, bos, content = int(items.kind[i]), int(items.bos[i]), int(items.content[i])
            if bos > text_start:
                out.text(text_start, st)
                row_max = max(row_max, f32(st + (bos - text_start - 1)))
                st = f32(st + (bos - text_start))
            markers = 2 if kind == AUDIO_IN_VIDEO else 1
            out.text(bos, st)
            st = f32(st + markers)
            num_audio = int(items.num_audio[i])
            if kind == AUDIO:
                out.text(content, st)
                last_max = block_max = f32(st + (num_audio - 1))
                end = content + num_audio
            else:
                frames, height, width = self.item_grid(items, i, images, videos)
                t = (
                    st + self.time_index(kind, frames, seconds[items.grid[i]] if kind != IMAGE else 1.0)
                ).astype(np.float32)
                video_max = max(t[-1], f32(st + (height - 1)), f32(st + (width - 1)))
                plane = height * width
                if kind == AUDIO_IN_VIDEO:
                    audio = (st + np.arange(num_audio, dtype=np.float32)).astype(np.float32)
                    before = audio.searchsorted(t)  # audio tokens of a smaller time come before each frame
                    start = content + np.arange(frames) * plane + before
                    runs = np.concatenate([[0], before, [num_audio]])
                    run_start = content + np.arange(frames + 1) * plane + runs[:-1]
                    keep = runs[1:] > runs[:-1]
                    out.text(run_start[keep], st, origin=run_start[keep] - runs[:-1][keep])
                    last_max = audio[-1] if audio[-1] >= t[-1] else video_max
                    block_max = max(video_max, audio[-1])
                    end = content + frames * plane + num_audio
                else:
                    start = content + np.arange(frames) * plane
                    last_max = block_max = video_max
                    end = content + frames * plane
                out.add(start, t, st, width, 0)
            row_max = max(row_max, block_max)
            eos = f32(last_max + 1)
            out.text(end, eos)
            row_max = max(row_max, f32(eos + (markers - 1)))
            text_start, st = end + markers, f32(f32(eos + (markers - 1)) + 1)
            if i + 1 == len(row_of) or row_of[i + 1] != r:  # the row's trailing text
                row_end = int(row_starts[r] + row_lengths[r])
                if row_end > text_start:
                    out.text(text_start, st)
                    row_max = max(row_max, f32(st + (row_end - text_start - 1)))
                delta[r] = f32(f32(row_max + 1) - int(row_lengths[r]))
        return out.table(length), delta
