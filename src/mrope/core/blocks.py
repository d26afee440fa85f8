"""Vision blocks of a token stream, and the shared helper that finds them from placeholder tokens."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import MRopeError


@dataclass(slots=True)
class Blocks:
    """The vision blocks of a token stream, sorted by ``start``; all arrays have shape (num_blocks,).

    A block holds ``frames * height * width`` consecutive tokens (grid after merging), t-major then h
    then w. Frame ``k`` of a block has temporal index ``trunc(k * interval)``, computed in the
    interval's dtype and rounded as ``rounding`` says (:func:`mrope.core.place.temporal_index`).
    """

    start: np.ndarray  # int64, stream index of the block's first token
    frames: np.ndarray  # int64, T' (merged temporal size)
    height: np.ndarray  # int64, H'
    width: np.ndarray  # int64, W'
    interval: np.ndarray  # float32 or float64 (the video time arithmetic), temporal index step between frames
    num_tokens: np.ndarray  # int64, frames * height * width
    #: int8 codes (:data:`mrope.core.place.FLOAT16`, ``BFLOAT16``): the videos whose time transformers
    #: computes in float16 or bfloat16 (their intervals held in float32); None: no block is rounded
    rounding: np.ndarray | None = None

    @staticmethod
    def concat(parts: list[Blocks]) -> Blocks:
        """Blocks of several modalities merged into stream order."""
        parts = [p for p in parts if p.start.size]
        if not parts:
            return empty_blocks()
        if len(parts) == 1:
            return parts[0]
        start = np.concatenate([p.start for p in parts])
        order = np.argsort(start, kind="stable")
        rounding = None
        if any(p.rounding is not None for p in parts):
            rounding = np.concatenate([_rounding_of(p) for p in parts])[order]
        return Blocks(
            start=start[order],
            frames=np.concatenate([p.frames for p in parts])[order],
            height=np.concatenate([p.height for p in parts])[order],
            width=np.concatenate([p.width for p in parts])[order],
            interval=np.concatenate([p.interval for p in parts])[order],
            num_tokens=np.concatenate([p.num_tokens for p in parts])[order],
            rounding=rounding,
        )


def _rounding_of(blocks: Blocks) -> np.ndarray:
    """The rounding code of every block (0 where ``rounding`` is None)."""
    if blocks.rounding is None:
        return np.zeros(blocks.start.size, dtype=np.int8)
    return blocks.rounding


#: a vision block of the one-row path: (start index, T', H', W', interval, rounding), the grid after
#: merging, the temporal index step a numpy float32 or float64 scalar and the rounding code an int (0:
#: none; :func:`mrope.core.place.temporal_index`)
BlockRow = tuple[int, int, int, int, Any, int]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


_NONE = _read_only(np.zeros(0, dtype=np.int64))
_EMPTY = Blocks(_NONE, _NONE, _NONE, _NONE, _read_only(np.zeros(0, dtype=np.float32)), _NONE)


def empty_blocks() -> Blocks:
    """No blocks (shared, read-only)."""
    return _EMPTY


def locate_items(
    placeholder_index: np.ndarray,
    tokens_per_item: np.ndarray,
    row_starts: np.ndarray,
    row_lengths: np.ndarray,
    *,
    what: str,
    grid_name: str,
    describe: Callable[[int], str],
) -> np.ndarray:
    """Stream index of each item's first placeholder token, items taken in order.

    ``placeholder_index`` holds the (sorted) stream indices of every placeholder token of one
    modality; item ``i`` owns the next ``tokens_per_item[i]`` of them, which must be consecutive in
    the stream and lie in one row (rows: ``[row_starts[r], row_starts[r] + row_lengths[r])``).
    Raises :class:`MRopeError` naming the item (``describe(i)``) otherwise.
    """
    found = int(placeholder_index.size)
    if row_starts.size == 1 and 0 < tokens_per_item.size <= FEW_ITEMS:  # one prompt: Python ints
        start = locate_few(placeholder_index, tokens_per_item.tolist())
        if start is not None:
            return np.array(start, dtype=np.int64)
    last = tokens_per_item.cumsum()
    needed = int(last[-1]) if last.size else 0
    first = last - tokens_per_item
    if found == needed:
        fits = tokens_per_item.size
        start, end = placeholder_index[first], placeholder_index[last - 1]
        broken = end - start + 1 != tokens_per_item
    else:
        fits = int(last.searchsorted(found, side="right"))  # items 0..fits-1 have all their tokens
        start, end = placeholder_index[first[:fits]], placeholder_index[last[:fits] - 1]
        broken = end - start + 1 != tokens_per_item[:fits]
    row = row_starts.searchsorted(start, side="right") - 1 if row_starts.size > 1 else None
    if row is not None:  # items of several rows: none may cross a row's end
        broken |= end >= row_starts[row] + row_lengths[row]
    if broken.any():
        i = int(np.flatnonzero(broken)[0])
        s = int(start[i])
        r = 0 if row is None else int(row[i])
        run = placeholder_index[first[i] : last[i]]
        gap = np.flatnonzero(np.diff(run) != 1)
        run_len = min(int(gap[0]) + 1 if gap.size else run.size, int(row_starts[r] + row_lengths[r]) - s)
        raise MRopeError(
            f"{describe(i)} needs {int(tokens_per_item[i])} "
            f"consecutive placeholder tokens in one row from index {s - int(row_starts[r])} of row "
            f"{r}, found a run of {run_len}"
        )
    if fits == tokens_per_item.size and found == needed:
        return start
    runs = 0 if found == 0 else 1 + int(np.count_nonzero(np.diff(placeholder_index) != 1))
    in_all = f"{found} {what} placeholder tokens in {runs} runs, {grid_name} needs {needed}"
    if fits < tokens_per_item.size:  # too few placeholders: the first item left short
        i = fits
        raise MRopeError(
            f"{describe(i)} needs {int(tokens_per_item[i])} placeholder tokens, found "
            f"{found - int(first[i])} ({in_all})"
        )
    if found > needed:  # placeholders that no grid describes
        extra = int(placeholder_index[needed])
        r = int(row_starts.searchsorted(extra, side="right")) - 1
        raise MRopeError(
            f"{found - needed} {what} placeholder tokens from index {extra - int(row_starts[r])} "
            f"of row {r} have no grid in {grid_name} ({in_all})"
        )
    return start


FEW_ITEMS = 8  # up to this many items, a Python loop costs less than numpy's per-call overhead
#: what a compiled scan (:mod:`mrope.render.numba`) returns in place of a delta where the items do not fit
#: their placeholders (no delta is this small)
NO_FIT = -(1 << 62)


def locate_few(placeholder_index: np.ndarray, tokens: list[int]) -> list[int] | None:
    """Stream index of each item's first placeholder token (:func:`locate_items` on Python ints, for a
    few items of one row) when every item's placeholders are consecutive and none are left over; None
    otherwise (:func:`locate_items` then names the first bad item)."""
    if sum(tokens) != placeholder_index.size:
        return None
    if not tokens:
        return []
    return starts_if_consecutive(placeholder_index[item_bounds(tokens)].tolist(), tokens)


def item_bounds(tokens: list[int]) -> list[int]:
    """The ranks (among one modality's placeholders) of each item's first and last placeholder, items
    of ``tokens`` placeholders each taken in order: ``[first_0, last_0, first_1, last_1, ...]``."""
    bounds: list[int] = []
    first = 0
    for n in tokens:
        bounds += (first, first + n - 1)
        first += n
    return bounds


def starts_if_consecutive(bound_index: list[int], tokens: list[int]) -> list[int] | None:
    """Each item's first stream index when each item's placeholders are consecutive (its last one
    ``tokens[i] - 1`` after its first); None otherwise. ``bound_index``: the stream indices of the
    placeholders at :func:`item_bounds`' ranks, however they were found."""
    starts = bound_index[0::2]
    for i, n in enumerate(tokens):  # (a plain loop: a generator costs more in a cold cache)
        if bound_index[2 * i + 1] - bound_index[2 * i] + 1 != n:
            return None
    return starts
