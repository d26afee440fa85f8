"""Where a prompt's items lie: the blocks of one modality found in a stream (the parsers' vectorized
scan), where a few items' placeholders start in one prompt (found by a scan, or as an engine recorded
them), their blocks checked at those offsets, and the items of several modalities in stream order.
The families' parsers and one-prompt paths call these; each family states only its own rule."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import MRopeError
from ..core import FEW_BLOCKS, BlockRow, Blocks, block_rows, blocks_from_rows, render_one_row
from ..core.blocks import (
    FEW_ITEMS,
    NO_FIT,
    empty_blocks,
    locate_few,
    locate_items,
)
from ..core.place import check_row_bound
from ..render.choose import compiled_kernel
from ._grids import grid_tokens, merge_divisor

if TYPE_CHECKING:
    from ._base import Family

_UNIT_STEP = np.float32(1.0)  # the temporal index step of items that do not scale time


def token_blocks(
    ids: np.ndarray,
    token_id: int,
    grids: np.ndarray,
    row_starts: np.ndarray,
    row_lengths: np.ndarray,
    merge: int,
    *,
    what: str,
    **options: Any,
) -> Blocks:
    """:func:`vision_blocks` of the items whose placeholder is ``token_id`` (grids in
    ``{what}_grid_thw``); ``options``: ``interval``, ``rounding``, ``frame_of``."""
    is_placeholder = ids == token_id
    if grids.shape[0] == 0 and not is_placeholder.any():  # the common "no videos" case: no index array
        return empty_blocks()
    placeholders = is_placeholder.nonzero()[0]
    return vision_blocks(
        placeholders,
        grids,
        row_starts,
        row_lengths,
        merge,
        what=what,
        grid_name=f"{what}_grid_thw",
        **options,
    )


def vision_blocks(
    placeholder_index: np.ndarray,
    grids: np.ndarray,
    row_starts: np.ndarray,
    row_lengths: np.ndarray,
    merge: int,
    *,
    what: str,
    grid_name: str,
    interval: np.ndarray | float = 1.0,
    rounding: int = 0,
    frame_of: np.ndarray | None = None,
) -> Blocks:
    """Blocks of one modality: item ``i`` has grid ``grids[i]`` (before merging) and owns the next
    ``T*H*W / merge**2`` placeholder tokens; frame ``k`` of item ``i`` has time index ``trunc(k *
    interval[i])``, rounded as ``rounding`` says (:func:`mrope.core.place.temporal_index`).
    ``frame_of`` (from ``split_frames``) says, for grids split into frames, which video and frame
    each item is, for error messages."""
    if grids.shape[0] == 0 and placeholder_index.size == 0:
        return empty_blocks()
    merged = grids // merge_divisor(merge)  # (T, H', W') per item
    num_tokens = merged.prod(axis=1)

    def describe(i: int) -> str:
        if frame_of is None:
            return f"{what} {i} ({grid_name}[{i}] = {tuple(int(g) for g in grids[i])})"
        video, frame = (int(v) for v in frame_of[i])
        hw = tuple(int(g) for g in grids[i, 1:])
        return f"frame {frame} of {what} {video} ({grid_name}[{video}] has H, W = {hw})"

    start = locate_items(
        placeholder_index,
        num_tokens,
        row_starts,
        row_lengths,
        what=what,
        grid_name=grid_name,
        describe=describe,
    )
    if not isinstance(interval, np.ndarray):
        interval = np.full(start.shape, interval, dtype=np.float32)
    codes = np.full(start.shape, rounding, dtype=np.int8) if rounding else None
    return Blocks(start, merged[:, 0], merged[:, 1], merged[:, 2], interval, num_tokens, codes)


def find_offsets(
    ids: np.ndarray,
    token_id: int,
    grids: np.ndarray | list[list[int]],
    merge: int,
    *,
    refuse: int | None = None,
) -> list[int] | None:
    """Where each of a few items' placeholders (``token_id``) start in one prompt, found by a scan:
    the offsets :func:`items_at` takes. None when the items are many, do not fit the placeholders or
    the prompt holds ``refuse`` (a token that rules this path out; the vectorized :func:`token_blocks`
    then serves, or names the bad item). One compiled pass where mrope's numba backend is loaded
    (:func:`mrope.render.numba.item_starts`), a few numpy calls otherwise (:func:`locate_few`)."""
    if len(grids) > FEW_ITEMS:
        return None
    rows = grids if type(grids) is list else grids.tolist()
    tokens = [t * (h // merge) * (w // merge) for t, h, w in rows]
    scan = compiled_kernel("item_starts_int64", load=False)
    if scan is not None:
        starts = np.array(tokens, dtype=np.int64)  # (each item's count, overwritten with its start)
        stop = -1 if refuse is None else refuse
        try:
            fits = scan(ids, token_id, stop, starts)
        except TypeError:  # ids of another dtype: numba's dispatcher compiles the scan for it
            fits = compiled_kernel("item_starts")(ids, token_id, stop, starts)
        return starts.tolist() if fits else None
    if refuse is not None and (ids == refuse).any():
        return None
    placeholder = np.flatnonzero(ids == token_id)
    if not tokens:  # no items: none of their placeholders may appear
        return None if placeholder.size else []
    return locate_few(placeholder, tokens)


def find_image_positions(
    family: Family, ids: np.ndarray, images: list[list[int]]
) -> tuple[np.ndarray, int] | None:
    """Positions (3, L) int64 and the delta of one prompt of images only, the images found by one scan:
    for an engine that hands over grids but no offsets (SGLang's ``get_rope_index``), the cheapest way
    to a prompt's positions. ``ids``: a 1-D integer array; ``images``: (T, H, W) Python ints, as
    ``tensor.tolist()`` gives them. The scan establishes what :meth:`Family.positions` checks of items at
    offsets (each image's placeholders consecutive, in order, none left over), so nothing is checked
    twice. Where mrope's numba backend is loaded and every image is one frame, one compiled pass scans,
    places and renders (:func:`mrope.render.numba.image_positions`: what a cold cache charges for is
    calls); otherwise the images at the offsets :func:`find_offsets` finds, rendered by
    :func:`mrope.core.render_one_row`. None where the family has no rule on items, the images are many or
    not three positive ints each, the prompt holds a video placeholder, or the images do not fit the
    placeholders: the grids as arrays then serve (or name what is wrong)."""
    if not family.rule_on_items or not images or ids.ndim != 1 or ids.dtype.kind not in "iu":
        return None
    merge, one_frame = family.spatial_merge_size, True
    try:
        for grid in images:  # (a plain loop: a generator costs more in a cold cache)
            t, h, w = grid
            if type(t) is not int or type(h) is not int or type(w) is not int:
                return None
            one_frame = one_frame and t == 1
        if grid_tokens(images, "image_grid_thw", merge, 1) > len(ids):
            return None  # more placeholders than tokens (an int64 may not even hold the grid)
    except (TypeError, ValueError):  # (MRopeError is a ValueError) a bad grid: the arrays name it
        return None
    token, stop = family.image_token_id, family.video_token_id
    place_and_render = compiled_kernel("image_positions_int64", load=False) if one_frame else None
    if place_and_render is None:
        offsets = find_offsets(ids, token, images, merge, refuse=stop)
        if offsets is None:
            return None
        pairs = zip(offsets, images, strict=True)
        rows = [(at, t, h // merge, w // merge, _UNIT_STEP, 0) for at, (t, h, w) in pairs]
        return render_one_row(rows, len(ids), family.compat)
    grids, out = np.array(images, dtype=np.int64), np.empty((3, len(ids)), dtype=np.int64)
    try:
        delta = place_and_render(ids, token, stop, grids, merge, out)
    except TypeError:  # ids of another dtype: numba's dispatcher compiles the pass for it
        delta = compiled_kernel("image_positions")(ids, token, stop, grids, merge, out)
    if delta == NO_FIT:
        return None
    check_row_bound(len(ids), delta)
    return out, delta


def items_at(
    ids: Any,
    token_id: int,
    grids: np.ndarray | list[list[int]],
    offsets: list[int],
    merge: int,
    *,
    what: str,
    interval: np.ndarray | float = 1.0,
    rounding: int = 0,
    others: Sequence[int] | None = None,
) -> list[BlockRow]:
    """Blocks of items whose placeholders start at ``offsets`` (checked by :func:`check_offsets`; in any
    order): item ``i`` (grid ``grids[i]`` before merging) owns ``ids[offsets[i] : offsets[i] + n_i]``, of
    which the first and last must be ``token_id``, and the tokens next to it are no ``token_id`` that no
    item accounts for (a grid shorter than its run of placeholders, or an item missing next to it: the
    scan refuses such a prompt too). ``others``: the offsets of the other modality's items; those that
    start with this token (vLLM's Ernie-4.5-VL videos take the image token) account for a placeholder
    that starts one, and one before an item is left to them where there are any. One Python step per item,
    the prompt read at each item's ends and their neighbours only: not scanned."""
    length = len(ids)
    steps = interval if isinstance(interval, np.ndarray) else None
    rows = []
    grid_list = grids if type(grids) is list else grids.tolist()
    starts: set[int] | None = None  # the items' starts and ends, made where a neighbour is a placeholder
    ends: set[int] | None = None
    # the other modality's items that share this token (vLLM's Ernie-4.5-VL): their starts account for a
    # placeholder after an item, and a placeholder before one is left to them
    others = [o for o in others or () if 0 <= o < length and ids[o] == token_id]
    leftover = None  # the first item next to a placeholder of its kind that no item accounts for
    for i, start in enumerate(offsets):
        t, h, w = grid_list[i]
        height, width = h // merge, w // merge
        end = start + t * height * width
        if start < 0 or end > length:
            raise MRopeError(
                f"{what} {i} ({what}_grid_thw[{i}] = {(t, h, w)}): {what}_offsets[{i}] = {start} puts "
                f"its {end - start} placeholder tokens at [{start}, {end}), outside the prompt of "
                f"{length} tokens"
            )
        first, last = ids[start], ids[end - 1]
        if first != token_id or last != token_id:
            raise MRopeError(
                f"{what} {i} ({what}_grid_thw[{i}] = {(t, h, w)}): {what}_offsets[{i}] = {start} puts "
                f"its {end - start} placeholder tokens at [{start}, {end}), but input_ids holds "
                f"{int(first)} and {int(last)} at {start} and {end - 1}, not the {what} token {token_id}"
            )
        # the placeholders next to it must be items' (one starting at its end, one ending at its start)
        if end < length and ids[end] == token_id:
            if starts is None:
                starts = set(offsets)
            if end not in starts and end not in others and leftover is None:
                leftover = (i, (t, h, w), start, end, f"follows it at {end}, starting no")
        if start > 0 and ids[start - 1] == token_id and not others:
            if ends is None:
                ends = {
                    o + g[0] * (g[1] // merge) * (g[2] // merge)
                    for o, g in zip(offsets, grid_list, strict=True)
                }
            if start not in ends and leftover is None:
                leftover = (i, (t, h, w), start, end, f"precedes it at {start - 1}, ending no")
        rows.append((start, t, height, width, _UNIT_STEP if steps is None else steps[i], rounding))
    if leftover is not None:  # (items that overlap explain it: named as merge_items names them)
        merge_items([rows], offsets if what == "image" else None, offsets if what == "video" else None)
        raise _leftover(what, *leftover, token_id)
    return rows


def _leftover(
    what: str, i: int, grid: tuple[int, int, int], start: int, end: int, where: str, token_id: int
) -> MRopeError:
    """The error for item ``i`` next to a placeholder of its kind that no item accounts for."""
    return MRopeError(
        f"{what} {i} ({what}_grid_thw[{i}] = {grid}): {what}_offsets[{i}] = {start} puts its {end - start} "
        f"placeholder tokens at [{start}, {end}), but the {what} token {token_id} {where} {what}: its grid "
        "describes fewer placeholders than the prompt holds there, or the items leave one out"
    )


def frames_at(ids: Any, token_id: int, videos: np.ndarray, offsets: np.ndarray, merge: int) -> Blocks:
    """Frame blocks (T = 1 each) of videos whose frames' placeholders start at ``offsets`` (checked
    by :func:`._seconds.check_frame_offsets`): frame ``k`` owns ``ids[offsets[k] : offsets[k] + n_k]``, of
    which the first and last must be ``token_id``; frames in prompt order (refused otherwise, naming the
    order), not overlapping. O(frames) in C:
    the prompt is not scanned (a list is read at these indices only)."""
    grids, frame_of = split_frames(videos)
    height, width = grids[:, 1] // merge, grids[:, 2] // merge
    num_tokens = height * width
    ends = offsets + num_tokens
    length = len(ids)
    back = np.flatnonzero(offsets[1:] < offsets[:-1])
    if back.size:  # (a frame is known by its rank: the offsets cannot be sorted)
        k = int(back[0]) + 1
        raise MRopeError(
            f"frame_offsets[{k}] = {offsets[k]} comes before frame_offsets[{k - 1}] = {offsets[k - 1]}: "
            "the frames (each video's in order, video after video) must be given in prompt order"
        )
    bad = (offsets < 0) | (ends > length)
    bad[1:] |= offsets[1:] < ends[:-1]
    if not bad.any() and offsets.size:
        bad = (_take(ids, offsets) != token_id) | (_take(ids, ends - 1) != token_id)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        video, frame = (int(v) for v in frame_of[k])
        start, end = int(offsets[k]), int(ends[k])
        grid = tuple(videos[video].tolist())
        raise MRopeError(
            f"frame {frame} of video {video} (video_grid_thw[{video}] = {grid}): frame_offsets[{k}] = "
            f"{start} puts its {end - start} placeholder tokens at [{start}, {end}), which is outside "
            f"the prompt of {length} tokens, overlaps the frame before it, or does not start and end "
            f"with the frame token {token_id}"
        )
    if offsets.size:  # the tokens next to each frame: no frame token that no frame accounts for
        after, before = ends < length, offsets > 0
        after[:-1] &= offsets[1:] != ends[:-1]  # (the next frame's start, right after it)
        before[1:] &= ends[:-1] != offsets[1:]
        follows, precedes = np.flatnonzero(after), np.flatnonzero(before)
        follows = follows[_take(ids, ends[follows]) == token_id] if follows.size else follows
        precedes = precedes[_take(ids, offsets[precedes] - 1) == token_id] if precedes.size else precedes
        if follows.size or precedes.size:
            k = int(min(follows[:1].tolist() + precedes[:1].tolist()))
            video, frame = (int(v) for v in frame_of[k])
            start, end = int(offsets[k]), int(ends[k])
            where = f"follows it at {end}" if k in follows[:1] else f"precedes it at {start - 1}"
            grid = tuple(videos[video].tolist())
            raise MRopeError(
                f"frame {frame} of video {video} (video_grid_thw[{video}] = {grid}): frame_offsets[{k}] = "
                f"{start} puts its {end - start} placeholder tokens at [{start}, {end}), but the frame "
                f"token {token_id} {where}, in no frame: its grid describes fewer placeholders than the "
                "prompt holds there, or a frame is missing from frame_offsets"
            )
    ones = np.ones(offsets.shape, dtype=np.int64)
    return Blocks(offsets, ones, height, width, ones.astype(np.float32), num_tokens)


def merge_items(
    parts: list[Blocks | list[BlockRow]], image_offsets: Any, video_offsets: Any
) -> Blocks | list[BlockRow]:
    """Blocks of several modalities (scanned :class:`Blocks` or rows at given offsets, in any order) in
    stream order: rows when few, else :class:`Blocks`. Raises :class:`MRopeError` naming two items that
    overlap (only items at given offsets can)."""
    rows: list[BlockRow] = []
    many = False
    for part in parts:
        if isinstance(part, list):
            rows += part
        elif part.start.size > FEW_BLOCKS:
            many = True
        elif part.start.size:
            rows += block_rows(part)
    if not many and len(rows) <= FEW_BLOCKS:
        if len(rows) > 1:
            rows.sort(key=_start_of)
            end = -1
            for start, frames, height, width, _, _ in rows:
                if start < end:
                    _overlap(start, image_offsets, video_offsets)
                end = start + frames * height * width
        return rows
    # (rows at offsets given in any order are sorted, whatever their count: each carries its own grid)
    blocks = Blocks.concat(
        [p if isinstance(p, Blocks) else blocks_from_rows(sorted(p, key=_start_of)) for p in parts]
    )
    bad = np.flatnonzero(blocks.start[1:] < (blocks.start + blocks.num_tokens)[:-1])
    if bad.size:
        _overlap(int(blocks.start[bad[0] + 1]), image_offsets, video_offsets)
    return blocks


def _overlap(start: int, image_offsets: Any, video_offsets: Any) -> None:
    """Raise for the item at ``start``, which begins inside the item before it."""
    for what, offsets in (("image", image_offsets), ("video", video_offsets)):
        if offsets is not None and start in offsets:
            i = offsets.index(start)
            raise MRopeError(
                f"{what} {i} ({what}_offsets[{i}] = {start}) starts inside the item before it: items "
                "must not overlap"
            )
    raise MRopeError(f"the placeholders found at {start} lie inside an item given by its offset")


def check_video_offsets(frames: Blocks, videos: np.ndarray, offsets: list[int]) -> None:
    """For families that split videos into frames found in the prompt: video ``i``'s frames lie at or
    after ``offsets[i]`` and end at or before ``offsets[i + 1]``."""
    if not offsets:
        return
    count = videos[:, 0]
    last = np.cumsum(count) - 1
    first = (last - count + 1).tolist()
    starts = frames.start[first].tolist()
    ends = (frames.start[last] + frames.num_tokens[last]).tolist()
    for i, (offset, start) in enumerate(zip(offsets, starts, strict=True)):
        after = offsets[i + 1] if i + 1 < len(offsets) else None
        if start < offset or (after is not None and ends[i] > after):
            grid = tuple(int(g) for g in videos[i])
            raise MRopeError(
                f"video {i} (video_grid_thw[{i}] = {grid}): its frames were found at "
                f"[{start}, {ends[i]}), outside [video_offsets[{i}] = {offset}, "
                + (f"video_offsets[{i + 1}] = {after})" if after is not None else "the prompt's end)")
            )


def _start_of(row: BlockRow) -> int:
    return row[0]


def _take(ids: Any, index: np.ndarray) -> np.ndarray:
    """``ids`` at ``index`` (int64): a list is read at those indices only (in C), never converted."""
    if isinstance(ids, np.ndarray):
        return ids[index]
    if index.size == 1:
        return np.array([ids[int(index[0])]], dtype=np.int64)
    return np.array(itemgetter(*index.tolist())(ids), dtype=np.int64)


def split_frames(grids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each (T, H, W) video as T grids (1, H, W), for families that separate frames with timestamps.

    Returns the split grids (num_frames, 3) and, per frame, (video index, frame index)."""
    repeats = grids[:, 0]
    split = np.repeat(grids, repeats, axis=0)
    split[:, 0] = 1
    video = np.repeat(np.arange(len(grids)), repeats)
    frame = np.arange(len(split)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    return split, np.stack([video, frame], axis=1)
