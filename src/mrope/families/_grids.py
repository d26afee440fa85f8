"""The rules on a prompt's grids, over the spatial and temporal merge sizes they are checked against: every
value > 0, T divisible by the temporal merge (1 for images), H and W by the spatial one, and the
placeholder tokens the grids need, in all, within the prompt. The array inputs and the rule on items
(:meth:`mrope.families.Qwen2VL.item_rows`) check grids here, so both refuse the same grid with the
same message."""

from __future__ import annotations

import functools
import math

import numpy as np

from .._arrays import to_grid_array
from .._errors import MRopeError

_NO_GRIDS = np.zeros((0, 3), dtype=np.int64)  # no items (read-only)
_NO_GRIDS.flags.writeable = False
_FEW_GRIDS = 16  # up to this many grids, a Python pass costs less than numpy calls on tiny arrays


@functools.lru_cache(maxsize=32)
def merge_divisor(merge: int, temporal: int = 1) -> np.ndarray:
    """(temporal, merge, merge), read-only: a grid's (T, H, W) divided by it gives its merged grid."""
    divisor = np.array([temporal, merge, merge], dtype=np.int64)
    divisor.flags.writeable = False
    return divisor


def check_grids(grid_thw: object, name: str, merge: int, temporal: int) -> tuple[np.ndarray, int | float]:
    """Grids as an int64 (n, 3) array, every value > 0, T divisible by ``temporal`` (1 for images, the
    video temporal merge for videos) and H, W by ``merge``, and their placeholder tokens in all
    (``T/temporal * H/merge * W/merge`` each): a Python int for a few grids, else a float64 sum, exact
    up to 2**53 and, rounding being monotone, past any smaller count as soon as the exact sum is."""
    if grid_thw is None:
        return _NO_GRIDS, 0
    grids = to_grid_array(grid_thw, name=name)
    if grids.size == 0:
        return grids, 0
    if len(grids) <= _FEW_GRIDS:
        return grids, grid_tokens(grids.tolist(), name, merge, temporal)
    divisor = merge_divisor(merge, temporal)
    if grids.min() <= 0 or (grids % divisor).any():
        bad = int(((grids <= 0).any(axis=1) | (grids % divisor != 0).any(axis=1)).argmax())
        raise grid_error(name, bad, tuple(int(g) for g in grids[bad]), merge, temporal)
    tokens = float((grids // divisor).astype(np.float64).prod(axis=1).sum())
    return grids, tokens


def grid_tokens(grids: list[list[int]], name: str, merge: int, temporal: int) -> int:
    """The placeholder tokens in all of a few grids given as Python ints, each checked as
    :func:`check_grids` checks them (one Python step per grid: numpy costs more on a few)."""
    tokens = 0
    for i, (t, h, w) in enumerate(grids):
        if t <= 0 or h <= 0 or w <= 0 or h % merge or w % merge or t % temporal:
            raise grid_error(name, i, (t, h, w), merge, temporal)
        tokens += t // temporal * (h // merge) * (w // merge)
    return tokens


def grid_error(name: str, i: int, grid: tuple[int, int, int], merge: int, temporal: int) -> MRopeError:
    """The error for ``{name}[i] = grid``, which breaks a rule of :func:`check_grids`."""
    t, h, w = grid
    if min(t, h, w) <= 0:
        return MRopeError(f"{name}[{i}] = {grid}: every grid value must be > 0")
    if t % temporal:
        return MRopeError(f"{name}[{i}] = {grid}: T={t} is not divisible by temporal_merge_size {temporal}")
    axis, value = ("H", h) if h % merge else ("W", w)
    return MRopeError(f"{name}[{i}] = {grid}: {axis}={value} is not divisible by spatial_merge_size {merge}")


def raise_too_many_tokens(
    images: np.ndarray, videos: np.ndarray, length: int, merge: int, video_temporal: int
) -> None:
    """Raise for the first item (images first) whose placeholder tokens take the running count past
    the ``length`` tokens of the stream (the grids' total does)."""
    divisors = merge_divisor(merge), merge_divisor(merge, video_temporal)
    counts = [
        (g // d).astype(np.float64).prod(axis=1) for g, d in zip((images, videos), divisors, strict=True)
    ]
    total = np.concatenate(counts).cumsum()
    first = int((total > length).argmax())
    name, grids, divisor, i = (
        ("image_grid_thw", images, divisors[0], first)
        if first < len(images)
        else ("video_grid_thw", videos, divisors[1], first - len(images))
    )
    grid = tuple(int(g) for g in grids[i])
    tokens = math.prod(g // d for g, d in zip(grid, divisor.tolist(), strict=True))
    before = f", {total[first]:.0f} with the items before it" if first else ""
    raise MRopeError(
        f"{name}[{i}] = {grid} needs {tokens} placeholder tokens{before}: more than the {length} "
        "tokens of input_ids"
    )


def newline_tokens(grids: np.ndarray, merge: int) -> np.ndarray:
    """Placeholder tokens of each item whose merged rows each end with a newline token (HY-V4-VL,
    HunYuan-VL): ``T * H' * (W' + 1)`` of a grid (T, H, W) before merging."""
    merged = grids // merge_divisor(merge)
    return merged[:, 0] * merged[:, 1] * (merged[:, 2] + 1)


def check_newline_tokens(images: np.ndarray, videos: np.ndarray, merge: int, length: int) -> None:
    """Refuse grids whose :func:`newline_tokens` in all (images first) pass the ``length`` tokens of the
    stream, naming the first item that does (the shared count, without the newlines, bounds every value
    by ``length``)."""
    tokens = np.concatenate([newline_tokens(images, merge), newline_tokens(videos, merge)])
    total = tokens.cumsum()
    if total.size and total[-1] > length:
        first = int((total > length).argmax())
        name, grids, i = (
            ("image_grid_thw", images, first)
            if first < len(images)
            else ("video_grid_thw", videos, first - len(images))
        )
        before = f", {total[first]} with the items before it" if first else ""
        raise MRopeError(
            f"{name}[{i}] = {tuple(grids[i].tolist())} needs {tokens[first]} placeholder tokens "
            f"(T * H' * (W' + 1): a newline token ends each merged row){before}: more than the "
            f"{length} tokens of input_ids"
        )
