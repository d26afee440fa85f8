"""MiniCPM-V 4.7 (``minicpmv4_7``): canvas positions, which the family computes itself.

transformers 5.24's ``MiniCPMV4_7Model.get_rope_index`` (vLLM 0.32's ``get_mrope_input_positions`` is the
same rule where the config sets ``uses_mrope_canvas``; sequential positions otherwise). A *crop* is a run
of image (or video) tokens; it follows ``<image>`` (``image_start_id``: a frame's thumbnail) or ``<slice>``
(``slice_start_id``: a detail slice of the open frame). A frame is its thumbnail and the slices after it,
tiled row-major: ``cols`` is one more than the first slice followed by more than ``</slice><slice>`` (a
newline), ``rows = len(slices) // cols`` (else one row). Crop ``i`` of each modality has
``target_sizes[i]`` (``target_sizes_videos[i]``), its merged grid ``(H // m, W // m)`` (``m`` = 4 under
``downsample_mode`` ``"16x"``, 2 under ``"4x"``). Frame at origin ``o``, canvas ``(CH, CW)`` = ``(rows *
sh0, cols * sw0)`` from the first slice's grid (no slices: the thumbnail's grid):

- every token from its ``<image>`` up to the markers after its last crop: ``(o, o, o)``; ``<image>``:
  ``(o, o - 1, o - 1)`` (0 at ``o = 0``); the token after the thumbnail: ``(o, o + CH, o + CW)``;
- thumbnail token ``(i, j)``: ``(o, o + r(i, th, CH), o + r(j, tw, CW))``, ``r(i, n, c)`` =
  ``round(linspace(0, c - 1, n))[i]`` in torch's float32 arithmetic (strides of 2 to 4);
- slice ``k`` at ``(a, b) = (k // cols * sh0, k % cols * sw0)``, of grid ``(sh, sw)``: token ``(i, j)`` at
  ``(o, o + a + i, o + b + j)``, its ``<slice>`` at ``(o, o + a, o + b)``, the token after it at
  ``(o, o + a + sh - 1, o + b + sw - 1)``, the tokens between it and the next slice (a newline) at
  ``(o, o + (k // cols + 1) * sh0 - 1, o + cols * sw0)``.

Text takes the running position; a frame takes ``max(CH, CW) + 1`` of them. Frames that only markers and
newlines separate share a group (a video's frames; a picture right against another), the later frame's
``<image>`` then positioned by it. The h and w of a token differ from each other and the thumbnail is
resampled: the family computes its positions itself, and its segments (the serving table's state) are
recovered from them (:func:`mrope.render.segments_of`: a frame's slices and rows on two bases by their
origins, a thumbnail token each).
The token types are read from the ids (``mm_token_type_ids`` is not needed); ``delta`` is
``max + 1 - L`` (transformers' ``rope_deltas``), a token past the prompt at ``index + delta``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .._arrays import to_int_array
from .._errors import MRopeError
from ..core import segments_one_row
from ..core.place import LARGEST_POSITION
from ..render import segments_of
from ._base import Family, check_setting
from .inputs import ArrayLike, RequestInputs, Seconds

_NONE = np.zeros((0, 3), dtype=np.int64)
#: the spatial merge of each ``downsample_mode``
MERGES = {"16x": 4, "4x": 2}
#: the config fields of the markers, in transformers' order
MARKERS = ("slice_start_id", "slice_end_id", "image_start_id", "image_end_id", "newline_id")


class Canvas(NamedTuple):
    """A stream's crops (in order) and frames (in order), as :meth:`MiniCPMV4_7.frames` finds them."""

    start: np.ndarray  # each crop's first token
    end: np.ndarray  # one past its last
    height: np.ndarray  # its merged grid
    width: np.ndarray
    frame: np.ndarray  # its frame
    is_slice: np.ndarray  # a slice (else its frame's thumbnail)
    rank: np.ndarray  # its rank among its frame's slices (-1: the thumbnail)
    gap: np.ndarray  # tokens between it and the next crop
    has_next: np.ndarray  # a slice followed by a slice of its frame
    frame_start: np.ndarray  # each frame's <image>
    frame_end: np.ndarray  # one past the markers after its last crop (within its row)
    span_end: np.ndarray  # the next frame's <image> where it is of the same group, else frame_end
    cols: np.ndarray  # its slices' columns (0 without slices)
    slices: np.ndarray  # its slices
    slice_h: np.ndarray  # its first slice's grid (0 without slices)
    slice_w: np.ndarray
    canvas_h: np.ndarray  # its canvas
    canvas_w: np.ndarray


def resampled(i: np.ndarray, n: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``round(torch.linspace(0, c - 1, n))[i]`` elementwise (int64), in the float32 arithmetic of torch's
    kernel: ``step * i`` in the first half, ``end - step * (n - 1 - i)`` with one rounding (a fused
    multiply-add) in the second; ties to even; 0 for ``n == 1``. (``n == c``: ``i`` exactly.)"""
    end = (c - 1).astype(np.float32)
    step = end / np.maximum(n - 1, 1).astype(np.float32)
    low = step * i.astype(np.float32)
    high = (end.astype(np.float64) - step.astype(np.float64) * (n - 1 - i)).astype(np.float32)
    values = np.rint(np.where(i < n // 2, low, high)).astype(np.int64)
    return np.where(n > 1, values, 0)  # (one step: the start)


@dataclass(eq=False, repr=False, kw_only=True)
class MiniCPMV4_7(Family):
    model_types = ("minicpmv4_7",)
    takes_offsets = False
    extra_inputs = ("target_sizes", "target_sizes_videos", "downsample_mode")
    rotary_layout = "interleaved"
    default_mrope_sections = {"qwen3_5_text": (11, 11, 10)}

    image_token_id: int
    video_token_id: int
    image_start_id: int
    image_end_id: int
    slice_start_id: int
    slice_end_id: int
    newline_id: int
    #: ``"16x"`` (merge 4) or ``"4x"`` (merge 2); a call's ``downsample_mode`` overrides it
    downsample_mode: str = "16x"

    def __post_init__(self) -> None:
        super().__post_init__()
        ids = {name: getattr(self, name) for name in ("image_token_id", "video_token_id", *MARKERS)}
        if len(set(ids.values())) != len(ids):
            raise MRopeError(f"{self.model_type}: its token ids must differ, got {ids}")

    @property
    def spatial_merge_size(self) -> int:  # type: ignore[override]
        """Patches per merged token along each side, by :attr:`downsample_mode`."""
        return MERGES[self.downsample_mode]

    def no_offsets_message(self) -> str:
        return f"{self.model_type} finds its crops in input_ids: it takes no offsets"

    def read_extra_inputs(self, checked: RequestInputs, extra: Mapping[str, Any]) -> RequestInputs:
        """The crops' ``(H, W)`` patch grids (``target_sizes``, ``target_sizes_videos``: as ``(1, H, W)``
        images and videos) and the merge of ``downsample_mode`` (not given: the family's)."""
        mode = extra.get("downsample_mode", self.downsample_mode)
        check_setting(self.model_type, "downsample_mode", mode)
        images = self.crop_sizes(extra.get("target_sizes"), "target_sizes")
        videos = self.crop_sizes(extra.get("target_sizes_videos"), "target_sizes_videos")
        return checked._replace(images=images, videos=videos, merge=MERGES[mode])

    @staticmethod
    def crop_sizes(sizes: ArrayLike | None, name: str) -> np.ndarray:
        """``(n, 2)`` patch grids ``(H, W) >= 0`` as ``(n, 3)`` rows ``(1, H, W)``."""
        if sizes is None:
            return _NONE
        hw = to_int_array(sizes, name=name, ndim=2)
        if hw.shape[1] != 2 or (hw < 0).any():
            raise MRopeError(f"{name} must be (num_crops, 2) patch grids (H, W) >= 0, got {hw.tolist()}")
        return np.concatenate([np.ones((hw.shape[0], 1), dtype=np.int64), hw], axis=1)

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """No grids or seconds: the crops' grids are ``target_sizes`` and ``target_sizes_videos``."""
        given = {"image_grid_thw": image_grid_thw, "video_grid_thw": video_grid_thw}
        given["second_per_grid_ts"] = second_per_grid_ts
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise MRopeError(
                f"{self.model_type} takes no {', '.join(named)}: its crops' grids are target_sizes and "
                "target_sizes_videos"
            )
        return _NONE, _NONE, None

    def parse(self, inputs: RequestInputs) -> Any:
        """No placed blocks: :meth:`stream_positions` computes the positions."""
        raise MRopeError(f"{self.model_type} computes its positions itself: it has no blocks to place")

    def prompt(self, inputs: RequestInputs, *, segments: bool, layout: bool = False) -> Any:
        """One prompt's positions and delta; with ``segments``, the segments recovered from them."""
        positions, delta = self.stream_positions(inputs)
        if segments:
            if not positions.shape[1]:  # no tokens: the one empty text segment of any empty prompt
                return segments_one_row([], 0, self.compat)
            return segments_of(positions), int(delta[0])
        return positions, int(delta[0])

    def stream_positions(self, inputs: RequestInputs) -> tuple[np.ndarray, np.ndarray]:
        """Positions (3, N) of a stream of rows and each row's delta (slots outside every row: 0)."""
        ids = inputs.array
        starts, lengths = inputs.rows()
        n = ids.size
        index = np.arange(n, dtype=np.int64)
        row = (starts.searchsorted(index, side="right") - 1) if starts.size else np.full(n, -1)
        row_end = np.where(row >= 0, (starts + lengths)[np.maximum(row, 0)], 0)
        real = (row >= 0) & (index < row_end)
        frames = self.frames(ids, inputs, row, row_end, real)
        positions = self.render(ids, frames, starts, row, real)
        delta = np.zeros(starts.size, dtype=np.int64)
        if n:
            peak = np.where(real, positions.max(axis=0), 0)
            np.maximum.at(delta, row[real], peak[real])
        return positions, delta + 1 - lengths

    # -- the crops and frames of a stream ----------------------------------------------------------------
    def frames(
        self, ids: np.ndarray, inputs: RequestInputs, row: np.ndarray, row_end: np.ndarray, real: np.ndarray
    ) -> Canvas:
        """Every crop with its merged grid and place on its frame's canvas, and every frame: its span,
        canvas and group."""
        kind = np.where(ids == self.image_token_id, 1, np.where(ids == self.video_token_id, 2, 0)) * real
        opens = kind != 0
        opens[1:] &= (kind[1:] != kind[:-1]) | (row[1:] != row[:-1])
        closes = kind != 0
        closes[:-1] &= (kind[1:] != kind[:-1]) | (row[1:] != row[:-1])
        start, end = np.flatnonzero(opens), np.flatnonzero(closes) + 1
        crop_kind, crop_row = kind[start], row[start]
        first_of_row = np.ones(start.size, dtype=bool)
        first_of_row[1:] = crop_row[1:] != crop_row[:-1]
        before = np.where(start > 0, ids[start - 1], -1)
        row_start = inputs.rows()[0][crop_row] if start.size else start
        is_slice = (before == self.slice_start_id) & ~first_of_row
        bad = (start == row_start) | ((before != self.image_start_id) & (before != self.slice_start_id))
        if bad.any():
            i = int(bad.argmax())
            raise MRopeError(
                f"input_ids row {crop_row[i]}, index {start[i] - row_start[i]}: a crop (a run of "
                f"{'image' if crop_kind[i] == 1 else 'video'} tokens) must follow <image> (image_start_id "
                f"{self.image_start_id}) or <slice> (slice_start_id {self.slice_start_id})"
            )
        frame = np.cumsum(~is_slice) - 1
        thumb = np.flatnonzero(~is_slice)  # each frame's thumbnail crop
        wrong = np.flatnonzero(crop_kind != crop_kind[thumb[frame]])
        if wrong.size:
            i = int(wrong[0])
            raise MRopeError(
                f"input_ids row {crop_row[i]}, index {start[i] - row_start[i]}: a slice of another modality "
                "than its frame's thumbnail"
            )
        height, width = self.crop_grids(inputs, crop_kind, start, end, crop_row, row_start, inputs.merge or 4)

        # slices: their rank in the frame, the columns of the frame's canvas (a wider gap ends a row)
        frames_count = thumb.size
        slices = np.bincount(frame[is_slice], minlength=frames_count)
        rank = np.arange(start.size) - thumb[frame] - 1  # (-1: the thumbnail)
        gap = np.zeros(start.size, dtype=np.int64)
        gap[:-1] = start[1:] - end[:-1]
        has_next = np.zeros(start.size, dtype=bool)
        has_next[:-1] = is_slice[1:] & (frame[1:] == frame[:-1])
        wide = is_slice & has_next & (gap > 2)
        cols = slices.copy()
        np.minimum.at(cols, frame[wide], rank[wide] + 1)
        rows = np.where(cols > 0, slices // np.maximum(cols, 1), 1)
        square = rows * cols == slices
        rows, cols = np.where(square, rows, 1), np.where(square, cols, slices)
        first_slice = thumb + 1  # (valid where the frame has slices)
        has_slices = slices > 0
        slice_h = np.where(has_slices, height[np.minimum(first_slice, start.size - 1)], 0)
        slice_w = np.where(has_slices, width[np.minimum(first_slice, start.size - 1)], 0)
        canvas_h = np.where(has_slices, rows * slice_h, height[thumb])
        canvas_w = np.where(has_slices, cols * slice_w, width[thumb])

        # spans: from <image> to past the markers after the last crop (within the row); groups
        marker = np.isin(ids, np.array([getattr(self, name) for name in MARKERS])) & real
        stops = np.flatnonzero(~marker)
        last_end = np.zeros(frames_count, dtype=np.int64)
        np.maximum.at(last_end, frame, end)
        found = stops.searchsorted(last_end)
        frame_end = np.minimum(np.append(stops, ids.size)[found], row_end[start[thumb] - 1])
        frame_start = start[thumb] - 1
        others = np.concatenate([[0], np.cumsum(~marker)])  # non-markers before each index
        previous_end = np.where(thumb > 0, end[np.maximum(thumb - 1, 0)], 0)
        joins = ~first_of_row[thumb] & (others[frame_start] == others[previous_end])
        follows = np.zeros(frames_count, dtype=bool)  # the next frame is of the same group
        follows[:-1] = joins[1:]
        span_end = np.where(follows, np.append(frame_start[1:], 0), frame_end)
        return Canvas(
            start,
            end,
            height,
            width,
            frame,
            is_slice,
            rank,
            gap,
            has_next,
            frame_start,
            frame_end,
            span_end,
            cols,
            slices,
            slice_h,
            slice_w,
            canvas_h,
            canvas_w,
        )

    def crop_grids(
        self,
        inputs: RequestInputs,
        kind: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        row: np.ndarray,
        row_start: np.ndarray,
        merge: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each crop's merged grid ``(H // m, W // m)`` from the next size of its modality; each crop must
        hold its grid's tokens and each size describe a crop."""
        height = np.zeros(start.size, dtype=np.int64)
        width = np.zeros(start.size, dtype=np.int64)
        for code, name, sizes in (
            (1, "target_sizes", inputs.images),
            (2, "target_sizes_videos", inputs.videos),
        ):
            mine = np.flatnonzero(kind == code)
            if mine.size != len(sizes):
                what = "image" if code == 1 else "video"
                raise MRopeError(
                    f"input_ids holds {mine.size} {what} crops (runs of {what} tokens) but {name} has "
                    f"{len(sizes)} sizes: one (H, W) per crop, in order"
                )
            height[mine], width[mine] = sizes[:, 1] // merge, sizes[:, 2] // merge
            tokens = end[mine] - start[mine]
            short = np.minimum(height[mine], tokens) * np.minimum(width[mine], tokens)
            wrong = np.flatnonzero((height[mine] > tokens) | (width[mine] > tokens) | (short != tokens))
            if wrong.size:
                i, c = int(wrong[0]), mine[wrong[0]]
                raise MRopeError(
                    f"{name}[{i}] = {tuple(sizes[i, 1:].tolist())} is a crop of {tokens[i]} tokens "
                    f"(input_ids row {row[c]}, index {start[c] - row_start[c]}): expected "
                    f"(H // {merge}) * (W // {merge}) = {height[c] * width[c]}"
                )
        return height, width

    # -- positions --------------------------------------------------------------------------------------
    def render(
        self, ids: np.ndarray, f: Canvas, starts: np.ndarray, row: np.ndarray, real: np.ndarray
    ) -> np.ndarray:
        """The positions of a stream from its crops and frames (:meth:`frames`)."""
        n = ids.size
        frame_start, span_end = f.frame_start, f.span_end
        step = np.maximum(f.canvas_h, f.canvas_w) + 1
        # the running position: 1 per text token, each frame's step at its <image>, nothing inside it
        inside = np.zeros(n + 1, dtype=np.int64)
        np.add.at(inside, frame_start, 1)
        np.add.at(inside, span_end, -1)
        covered = np.cumsum(inside[:n]) > 0
        advance = (real & ~covered).astype(np.int64)
        advance[frame_start] = step
        total = np.cumsum(advance) - advance
        row_first = np.minimum(starts[np.maximum(row, 0)], max(n - 1, 0)) if n else row
        running = np.where(real, total - total[row_first], 0)
        origin = running[frame_start]
        if origin.size and int((origin + step).max()) > LARGEST_POSITION:
            raise MRopeError(f"{self.model_type}: positions reach past the largest, {LARGEST_POSITION:,}")
        positions = np.broadcast_to(running, (3, n)).copy()
        # every token of a frame's span: its origin; its <image>: the halo before the canvas
        owner = frame_start.searchsorted(np.flatnonzero(covered), side="right") - 1
        positions[:, covered] = origin[owner]
        positions[1:, frame_start] = np.maximum(origin - 1, 0)
        self.write_markers(positions, f, origin)
        self.write_crops(positions, f, origin)
        return positions

    def write_markers(self, positions: np.ndarray, f: Canvas, origin: np.ndarray) -> None:
        """The h and w of the markers (and newlines) of each frame, as transformers writes them in order
        (a later write wins), within the frame's span (the next frame's writes win past it)."""
        start, end, frame, is_slice, rank = f.start, f.end, f.frame, f.is_slice, f.rank
        cols, slice_h, slice_w = f.cols, f.slice_h, f.slice_w
        thumb = ~is_slice
        fr = frame[is_slice]
        k = rank[is_slice]
        h_off, w_off = (k // cols[fr]) * slice_h[fr], (k % cols[fr]) * slice_w[fr]
        last = (2 * f.slices + 1)[frame]
        # the token after the thumbnail, each slice's <slice> and the token after it, the newlines
        at = [end[thumb], start[is_slice] - 1, end[is_slice]]
        of = [frame[thumb], fr, fr]
        order = [np.zeros(thumb.sum(), dtype=np.int64), 2 * k + 1, 2 * k + 2]
        h = [f.canvas_h[frame[thumb]], h_off, h_off + f.height[is_slice] - 1]
        w = [f.canvas_w[frame[thumb]], w_off, w_off + f.width[is_slice] - 1]
        gaps = np.flatnonzero(is_slice & f.has_next & (f.gap > 2))
        if gaps.size:
            count = f.gap[gaps] - 2
            first = np.repeat(end[gaps] + 1 - np.cumsum(count) + count, count) + np.arange(count.sum())
            gf, gk = np.repeat(frame[gaps], count), np.repeat(rank[gaps], count)
            at.append(first)
            of.append(gf)
            order.append(last[gaps].repeat(count))
            h.append((gk // cols[gf] + 1) * slice_h[gf] - 1)
            w.append(cols[gf] * slice_w[gf])
        index, owner, key = np.concatenate(at), np.concatenate(of), np.concatenate(order)
        keep = (index >= f.frame_start[owner]) & (index < f.frame_end[owner])
        keep &= index < f.span_end[owner]
        index, owner, key = index[keep], owner[keep], key[keep]
        hs, ws = np.concatenate(h)[keep], np.concatenate(w)[keep]
        if not index.size:
            return
        winner = np.lexsort((key, index))  # the last write to each index wins
        latest = np.append(index[winner][1:] != index[winner][:-1], True)
        chosen = winner[latest]
        positions[1, index[chosen]] = origin[owner[chosen]] + hs[chosen]
        positions[2, index[chosen]] = origin[owner[chosen]] + ws[chosen]

    def write_crops(self, positions: np.ndarray, f: Canvas, origin: np.ndarray) -> None:
        """The crops' tokens: a thumbnail resampled over its canvas, a slice at its place on it."""
        start, end, frame, is_slice, rank = f.start, f.end, f.frame, f.is_slice, f.rank
        height, width = f.height, f.width
        cols = f.cols[frame]
        k = np.maximum(rank, 0)
        h_off = np.where(is_slice, (k // np.maximum(cols, 1)) * f.slice_h[frame], 0)
        w_off = np.where(is_slice, (k % np.maximum(cols, 1)) * f.slice_w[frame], 0)
        canvas_h = np.where(is_slice, height, f.canvas_h[frame])
        canvas_w = np.where(is_slice, width, f.canvas_w[frame])
        tokens = end - start
        crop = np.repeat(np.arange(start.size), tokens)
        offset = np.arange(crop.size) - np.repeat(np.cumsum(tokens) - tokens, tokens)
        wide = width[crop]
        i, j = offset // wide, offset % wide
        at = start[crop] + offset
        base = origin[frame[crop]]
        positions[0, at] = base
        positions[1, at] = base + h_off[crop] + resampled(i, height[crop], canvas_h[crop])
        positions[2, at] = base + w_off[crop] + resampled(j, wide, canvas_w[crop])
