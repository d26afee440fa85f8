"""Which position row (t, h, w) each frequency takes: the three layouts and their checks (pure Python).

``"chunked"``, ``"interleaved"`` and ``"ernie"`` are described in :mod:`mrope.rotary`.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Any

from .._errors import MRopeError

LAYOUTS = ("chunked", "interleaved", "ernie")


@functools.lru_cache(maxsize=128)
def section_rows(layout: str, mrope_section: tuple[int, int, int]) -> tuple[int, ...]:
    """The position row (0 t, 1 h, 2 w) each of the ``sum(mrope_section)`` frequencies takes.

    Parameters
    ----------
    layout : str
        ``"chunked"``, ``"interleaved"`` or ``"ernie"`` (see :mod:`mrope.rotary`).
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


def check_section(mrope_section: Any) -> tuple[int, int, int]:
    """``mrope_section`` as a tuple of 3 non-negative ints; :class:`MRopeError` for anything else."""
    bad = MRopeError(f"mrope_section must be a sequence of 3 non-negative ints, got {mrope_section!r}")
    if isinstance(mrope_section, (str, bytes, Mapping)):
        raise bad
    try:
        items = list(mrope_section)
        section = tuple(operator.index(s) for s in items if not isinstance(s, bool))
    except TypeError:
        raise bad from None
    if len(items) != 3 or len(section) != 3 or any(s < 0 for s in section):
        raise bad
    return section  # type: ignore[return-value]


__all__ = ["LAYOUTS", "check_section", "section_rows"]
