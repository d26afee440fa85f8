"""Which position row each rotated channel takes: the layouts and their checks (pure Python).

``"chunked"``, ``"interleaved"`` and ``"ernie"`` give each frequency one of the rows (t, h, w);
``"hunyuan"`` gives each channel of a rotation pair its own row; all are described in :mod:`mrope.rotary`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Any

from .._errors import MRopeError

LAYOUTS = ("chunked", "interleaved", "ernie", "hunyuan")
#: the layouts whose two channels of a rotation pair may take different rows (as many rows as sections)
SPLIT_LAYOUTS = ("hunyuan",)


def layout_num_rows(layout: str, mrope_section: tuple[int, ...]) -> int:
    """Rows of positions ``layout`` takes: 3 (t, h, w), or one per section for a split layout."""
    return len(mrope_section) if layout in SPLIT_LAYOUTS else 3


@functools.lru_cache(maxsize=128)
def pair_rows(layout: str, mrope_section: tuple[int, ...]) -> tuple[int, ...]:
    """The position row of each of the ``2 * sum(mrope_section)`` rotated channels: the first channel of
    every pair (frequency ``j``), then the second. The one-row-per-frequency layouts repeat
    :func:`section_rows`; ``"hunyuan"`` splits ``[freqs | freqs]`` into chunks of ``2 * section[i]``,
    chunk ``i`` from row ``i`` (transformers' ``HunYuanVLRotaryEmbedding.recomposition_frequencies``).

    Raises
    ------
    MRopeError
        Unknown layout, or sections that the layout cannot realise.
    """
    if layout not in SPLIT_LAYOUTS:
        rows = section_rows(layout, mrope_section)  # type: ignore[arg-type]
        return rows + rows
    return tuple(row for row, size in enumerate(mrope_section) for _ in range(2 * size))


def is_split(rows: tuple[int, ...]) -> bool:
    """Whether the two channels of some rotation pair take different rows (``rows``: :func:`pair_rows`)."""
    half = len(rows) // 2
    return rows[:half] != rows[half:]


@functools.lru_cache(maxsize=128)
def section_rows(layout: str, mrope_section: tuple[int, int, int]) -> tuple[int, ...]:
    """The position row (0 t, 1 h, 2 w) each of the ``sum(mrope_section)`` frequencies takes.

    Parameters
    ----------
    layout : str
        ``"chunked"``, ``"interleaved"`` or ``"ernie"`` (see :mod:`mrope.rotary`); ``"hunyuan"``, whose
        pairs' channels can take different rows, has :func:`pair_rows` instead.
    mrope_section : tuple of 3 int
        ``(t, h, w)`` for chunked and interleaved, ``(h, w, t)`` for ernie.

    Returns
    -------
    tuple of int
        Length ``sum(mrope_section)``; each count of 0, 1 and 2 equals its section.

    Raises
    ------
    MRopeError
        Unknown layout, or sections that the layout cannot realise (ernie needs ``h == w``).
    """
    if layout in SPLIT_LAYOUTS:
        raise MRopeError(f"layout {layout!r} gives the two channels of a pair their own rows: see pair_rows")
    if layout not in LAYOUTS:
        raise MRopeError(f"layout {layout!r} is not one of {LAYOUTS}")
    half = sum(mrope_section)
    if layout == "chunked":
        t, h, _ = mrope_section
        rows = tuple(0 if j < t else 1 if j < t + h else 2 for j in range(half))
        sizes = {0: mrope_section[0], 1: mrope_section[1], 2: mrope_section[2]}
    elif layout == "interleaved":
        _, h, w = mrope_section
        rows = tuple(
            1 if j % 3 == 1 and j < 3 * h else 2 if j % 3 == 2 and j < 3 * w else 0 for j in range(half)
        )
        sizes = {0: mrope_section[0], 1: mrope_section[1], 2: mrope_section[2]}
    else:
        h, w, _ = mrope_section
        rows = tuple((1 if j % 2 == 0 else 2) if j < h + w else 0 for j in range(half))
        sizes = {1: mrope_section[0], 2: mrope_section[1], 0: mrope_section[2]}
    counts = {r: rows.count(r) for r in (0, 1, 2)}
    if counts != sizes:
        raise MRopeError(
            f"mrope_section {list(mrope_section)} cannot be laid out {layout!r}: the layout gives "
            f"t/h/w counts {counts[0]}/{counts[1]}/{counts[2]}, expected {sizes[0]}/{sizes[1]}/{sizes[2]}"
        )
    return rows


def check_section(mrope_section: Any, count: int | None = 3) -> tuple[int, ...]:
    """``mrope_section`` as a tuple of ``count`` (any number, at least one, for None) non-negative ints;
    :class:`MRopeError` for anything else."""
    many = "a sequence of" + (f" {count}" if count is not None else "")
    bad = MRopeError(f"mrope_section must be {many} non-negative ints, got {mrope_section!r}")
    if isinstance(mrope_section, (str, bytes, Mapping)):
        raise bad
    try:
        items = list(mrope_section)
        section = tuple(operator.index(s) for s in items if not isinstance(s, bool))
    except TypeError:
        raise bad from None
    wrong_count = len(items) != count if count is not None else not items
    if len(section) != len(items) or wrong_count or any(s < 0 for s in section):
        raise bad
    return section


__all__ = [
    "LAYOUTS",
    "SPLIT_LAYOUTS",
    "check_section",
    "is_split",
    "layout_num_rows",
    "pair_rows",
    "section_rows",
]
