"""Qwen2.5-Omni (thinker): audio is text-like; a video with its audio interleaves in time chunks.

The rule, as transformers' ``get_rope_index`` computes it (no other convention exists: every block,
in both ``compat`` modes, is followed by text at ``max(block) + 1``):

- image and video blocks are Qwen2-VL blocks whose frame ``k`` has time index
  ``trunc(k * second_per_grid_ts * position_id_per_seconds)`` (float32, two roundings; images: ``k *
  position_id_per_seconds``);
- an audio of feature length ``L`` has ``((L - 1) // 2 + 1 - 2) // 2 + 1`` tokens, positioned like text;
- a video with its audio: both start at the same base; the two start markers share one position, the
  video and audio tokens alternate in chunks of ``position_id_per_seconds * seconds_per_chunk`` time
  units (video chunk, then audio chunk), and the two end markers share the position after the *last
  chunk's* maximum. A chunk boundary may fall inside a frame (transformers' chunker takes at most one
  boundary per token), which the table's ``origin`` row expresses.

vLLM's rule (``compat="vllm", video_time="float64"``: :mod:`mrope.families._omni`) differs: its rate is
``tokens_per_second`` (``vision_config.tokens_per_second``, 25 where absent) in place of
``position_id_per_seconds``, video time ``trunc(k * (second_per_grid_ts * tokens_per_second))`` in
float64, and a video with its audio is one block from ``audio_start`` on (``vision_start`` and
``audio_start`` take consecutive positions): frames go into time buckets ``t // tokens_per_chunk``,
and after each non-empty bucket's frames come the next ``tokens_per_chunk`` audio tokens, the rest of
the audio after the last bucket; the block holds as many tokens as the video and audio placeholders,
so its last placeholder and the two end markers are text after the block's largest position.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._errors import MRopeError
from ..core.place import ItemBlocks
from ..core.segments import SegmentBuilder
from ._omni import AUDIO, AUDIO_IN_VIDEO, IMAGE, Items, OmniFamily


@dataclass(eq=False, repr=False, kw_only=True)
class Qwen2_5Omni(OmniFamily):
    model_types = ("qwen2_5_omni", "qwen2_5_omni_thinker")
    default_mrope_sections = {"qwen2_5_omni_text": (16, 24, 24)}

    seconds_per_chunk: int | float
    #: vLLM's rate (``vision_config.tokens_per_second``, 25 where the config has none): its rule reads it
    #: where transformers' reads ``position_id_per_seconds``
    tokens_per_second: int | float = 25
    vllm_block_lead = 1
    #: time units per interleaving chunk, ``int(time_rate * seconds_per_chunk)``
    tokens_per_chunk: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.tokens_per_chunk = int(self.time_rate * self.seconds_per_chunk)
        if self.tokens_per_chunk <= 0:
            rate = "tokens_per_second" if self.vllm_rule else "position_id_per_seconds"
            raise MRopeError(
                f"{rate} * seconds_per_chunk must be >= 1, got {self.time_rate} * {self.seconds_per_chunk}"
            )

    @property
    def time_rate(self) -> float:
        return self.tokens_per_second if self.vllm_rule else self.position_id_per_seconds

    def audio_tokens(self, seqlens: np.ndarray) -> np.ndarray:
        return ((seqlens - 1) // 2 + 1 - 2) // 2 + 1

    def time_index(self, kind: int, frames: int, seconds: float) -> np.ndarray:
        """Time index of each frame (int64), as transformers computes it."""
        if kind == IMAGE:
            return (np.arange(frames) * self.position_id_per_seconds).astype(np.int64)
        scaled = np.arange(frames, dtype=np.float32) * np.float32(seconds)
        return (scaled * np.float32(self.position_id_per_seconds)).astype(np.int64)

    def item_blocks(
        self, items: Items, images: np.ndarray, videos: np.ndarray, seconds: np.ndarray
    ) -> ItemBlocks:
        """Vision items only (audio alone is text-like: it breaks no run of positions). A video with its
        audio spans ``audio_start ... audio_end`` (``vision_start`` before it and ``vision_end`` after it
        are text): ``audio_start`` shares the position of ``vision_start`` and ``audio_end`` that of
        ``vision_end``, which follows the last chunk."""
        vision = (items.kind != AUDIO).nonzero()[0]
        is_aiv = items.kind[vision] == AUDIO_IN_VIDEO
        start = np.where(is_aiv, items.bos[vision] + 1, items.content[vision])
        end = (
            items.content[vision]
            + items.num_vision[vision]
            + np.where(is_aiv, items.num_audio[vision] + 1, 0)
        )

        def layout(n: int, base: int, out: SegmentBuilder) -> tuple[int, int]:
            i = int(vision[n])
            kind, content = int(items.kind[i]), int(items.content[i])
            frames, height, width = self.item_grid(items, i, images, videos)
            t = self.time_index(kind, frames, seconds[items.grid[i]] if kind != IMAGE else 1.0)
            if kind == AUDIO_IN_VIDEO:
                out.text(content - 1, base - 1)  # audio_start, at vision_start's position
                last_max, block_max, end = self._audio_in_video(
                    out, content, base, t, height, width, int(items.num_audio[i])
                )
                out.text(end, last_max + 1)  # audio_end, at vision_end's position
                return max(block_max, last_max + 1), last_max
            plane = height * width
            out.add(content + np.arange(frames) * plane, base + t, base, width, 0)
            block_max = base + max(int(t[-1]), height - 1, width - 1)
            return block_max, block_max

        return ItemBlocks(start, end, items.row[vision], layout)

    def _audio_in_video(
        self,
        out: SegmentBuilder,
        content: int,
        base: int,
        t: np.ndarray,
        height: int,
        width: int,
        num_audio: int,
    ) -> tuple[int, int, int]:
        """Segments of a video interleaved with its audio from stream index ``content``.

        Returns the last chunk's maximum, the block's maximum and the stream index of the end markers."""
        frames, plane = t.size, height * width
        num_video = frames * plane
        per_chunk = self.tokens_per_chunk
        video_cuts = _chunk_cuts(lambda x: plane * t.searchsorted(x), num_video, int(t[-1]), per_chunk)
        audio_cuts = _chunk_cuts(lambda x: x, num_audio, num_audio - 1, per_chunk)
        video_begin = np.concatenate([[0], video_cuts])
        audio_begin = np.concatenate([[0], audio_cuts])
        chunks = max(video_begin.size, audio_begin.size)
        sizes = np.zeros((chunks, 2), dtype=np.int64)  # per chunk: video tokens, then audio tokens
        sizes[: video_begin.size, 0] = np.diff(video_begin, append=num_video)
        sizes[: audio_begin.size, 1] = np.diff(audio_begin, append=num_audio)
        stream = content + np.concatenate([[0], sizes.reshape(-1).cumsum()[:-1]]).reshape(chunks, 2)
        # video: one segment per frame piece between frame starts and chunk starts
        cuts = np.union1d(np.arange(frames) * plane, video_begin)
        chunk = video_begin.searchsorted(cuts, side="right") - 1
        start = stream[chunk, 0] + cuts - video_begin[chunk]
        frame = cuts // plane
        out.add(start, base + t[frame], base, width, 0, origin=start - (cuts - frame * plane))
        audio_stream = stream[: audio_begin.size, 1]
        out.text(audio_stream, base + audio_begin)
        video_max = base + max(int(t[-1]), height - 1, width - 1)
        audio_max = base + num_audio - 1
        last_max = audio_max if audio_begin.size == chunks else video_max
        return last_max, max(video_max, audio_max), content + num_video + num_audio

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
        """vLLM's chunks (see the module docstring and :func:`_vllm_chunks`)."""
        return _vllm_chunks(out, start, base, t, height, width, num_audio, self.tokens_per_chunk)


def _vllm_chunks(
    out: SegmentBuilder,
    start: int,
    base: int,
    t: np.ndarray,
    height: int,
    width: int,
    num_audio: int,
    per_chunk: int,
) -> int:
    """Segments of vLLM's interleaved video and audio from stream index ``start``; returns the largest
    position. Frame ``k`` lies in bucket ``t[k] // per_chunk``; non-empty bucket ``r`` (in order) is
    followed by audio tokens ``r * per_chunk`` on (the next bucket's frames end that run), the last
    run holding the rest of the audio."""
    plane = height * width
    bucket = t // per_chunk
    rank = np.zeros(t.size, dtype=np.int64)  # of each frame's bucket among the non-empty ones
    np.cumsum(bucket[1:] != bucket[:-1], out=rank[1:])
    audio_before = np.minimum(rank * per_chunk, num_audio)
    out.add(start + np.arange(t.size) * plane + audio_before, base + t, base, width, 0)
    first = np.arange(int(rank[-1]) + 1) * per_chunk  # each bucket's first audio token
    frames_through = rank.searchsorted(np.arange(first.size), side="right")
    keep = first < num_audio
    out.text(start + frames_through[keep] * plane + first[keep], base + first[keep])
    return base + max(int(t[-1]), height - 1, width - 1, num_audio - 1)


def _chunk_cuts(first_at_or_above, n: int, top: int, per_chunk: int) -> np.ndarray:
    """Where transformers' ``get_chunked_index`` starts chunks 2, 3, ... of ``n`` nondecreasing values.

    Chunk ``c`` starts at the first token after the previous start whose value is ``>= c * per_chunk``
    (one start per token at most): ``b_c = max(b_{c-1} + 1, f(c * per_chunk))`` with ``b_0 = 0``, where
    ``f(x)`` (``first_at_or_above``) is the first token of value ``>= x``; so ``b_c = c + max(0,
    max_{j <= c} f_j - j)``. ``top`` is the largest value."""
    count = min(n - 1, top // per_chunk)
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    c = np.arange(1, count + 1)
    starts = c + np.maximum.accumulate(np.maximum(first_at_or_above(c * per_chunk) - c, 0))
    return starts[starts < n]
