"""A family's rows of positions from the segment model's rendered rows (t, h, w): :class:`SegmentRows`.

Every family but HunYuan-VL gives the rendered rows as they are. HunYuan-VL gives ``num_dims - 3``
rows of the token's index in front, then the rendered rows reversed (width, height, image ordinal).
A family states its description once (:attr:`mrope.Family.segment_rows`); its own positions and the
serving table (:class:`mrope.PositionTable`, which writes the rendered rows into a view of ``out`` and
the index rows beside them) both apply it. Past the prompt every row is ``index + delta``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._errors import MRopeError

#: the most rows of positions a family gives and a table holds: one per ``mrope_section`` entry, each
#: at least one frequency pair of a head, so 128 covers heads of up to 256 dimensions; models have 3
#: (HunYuan-VL's checkpoints 4). A larger count is a mistake (a table would take it, then refuse every
#: ``out``), refused where it is given
MAX_NUM_DIMS = 128


def check_num_dims(num_dims: Any, what: str) -> int:
    """``num_dims`` as an int, refused (:class:`MRopeError` naming ``what``, e.g. ``"num_dims"``) unless it
    is an int (not a bool) in ``[3, MAX_NUM_DIMS]``: the three rendered rows, index rows in front."""
    is_int = isinstance(num_dims, (int, np.integer)) and not isinstance(num_dims, (bool, np.bool_))
    if is_int and 3 <= num_dims <= MAX_NUM_DIMS:
        return int(num_dims)
    raise MRopeError(
        f"{what} must be an int from 3 to {MAX_NUM_DIMS} (rows of positions: t, h, w and index rows in "
        f"front; models have 3 or 4), got {num_dims!r}"
    )


#: the names of the rendered rows, in the segment model's order
RENDERED = ("t", "h", "w")


@dataclass(frozen=True, slots=True)
class SegmentRows:
    """``lead`` rows of the token's index, then the rendered rows (t, h, w), reversed if ``reverse``."""

    lead: int = 0
    reverse: bool = False

    @property
    def num_dims(self) -> int:
        """Rows of positions: the index rows and the three rendered ones."""
        return self.lead + 3

    @property
    def plain(self) -> bool:
        """Whether the rows are the rendered rows (t, h, w) as they are (every family but HunYuan-VL)."""
        return not self.lead and not self.reverse

    @property
    def order(self) -> tuple[int, int, int]:
        """The row of the family's positions that each rendered row (t, h, w) takes."""
        lead = self.lead
        return (lead + 2, lead + 1, lead) if self.reverse else (lead, lead + 1, lead + 2)

    @property
    def names(self) -> tuple[str, ...]:
        """The rows' names, in order: ``"index"`` for each index row, then the rendered rows'."""
        return ("index",) * self.lead + (RENDERED[::-1] if self.reverse else RENDERED)

    def describe(self) -> str:
        """The rows in words, for messages: e.g. ``"(index, w, h, t)"``."""
        return f"({', '.join(self.names)})"

    def rendered(self, out: Any) -> Any:
        """The view of ``out`` (a numpy array of :attr:`num_dims` rows) that takes the rendered rows
        (t, h, w) in order: rows ``lead:``, reversed if :attr:`reverse` (a negative stride)."""
        view = out[self.lead :]
        return view[::-1] if self.reverse else view

    def apply(self, rendered: np.ndarray, index: np.ndarray) -> np.ndarray:
        """The family's rows (num_dims, L) from the rendered rows (3, L) and each token's ``index``."""
        out = np.empty((self.num_dims, rendered.shape[1]), dtype=rendered.dtype)
        self.rendered(out)[...] = rendered
        out[: self.lead] = index
        return out


#: the rows of every family but HunYuan-VL: (t, h, w) as rendered
PLAIN_ROWS = SegmentRows()
