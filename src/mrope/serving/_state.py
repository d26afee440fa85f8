"""The state of a :class:`mrope.serving.PositionTable`: one object that every step reads.

:class:`SlotState` holds, for the engine's request slots:

- ``info`` (3, max_slots + 2) int64, rows ``PLEN`` (prompt length; ``DEAD`` for a free slot),
  ``DELTA`` (int64 tables: the decode offset) and ``KEY`` (``first << 32``, the slot's pool base in
  the high bits); slot ``s`` is column ``s + 1``, and the free columns at both ends catch slots out of
  range (a clipped ``take`` reads ``DEAD`` there);
- ``deltas`` (max_slots + 2) float64, float32 tables only: the decode offsets (float32 values);
- ``pool`` (:class:`._pool.Pool`): every live request's segments, flat;
- the bounds every path checks: ``max_index`` (sequence indices stay below it) and ``max_position``
  (positions stay below it: the table's ``max_position``, or less, :func:`position_bound`), with
  ``index_limit``, below which an index's position needs no check (:meth:`SlotState.insert`);
- ``lock``: held by every public call of the table (the numpy step's scratch is shared too);
- ``num_dims`` and ``rows``: the rows of positions of the table's requests, and how they follow from
  the rendered rows (:class:`mrope.core.SegmentRows`; None: the rendered rows (t, h, w) as they are,
  the 3-row path).

The host steps (the numpy step of :mod:`.host_step`, the kernel of :mod:`.compiled_step` given these
arrays) and the device mirror (:mod:`.device`) read it; only
:class:`SlotState`'s methods change it (admission, removal, growth).
"""

from __future__ import annotations

import threading

import numpy as np

from ..core.place import LARGEST_POSITION
from ..core.rows import SegmentRows
from ._pool import SHIFT, Floats, Number, Pool, Segments, Span

MAX_INDEX = 1 << 32  # sequence indices must stay below 2**32 (the pool's keys are base << 32 | index)
# float32 tables: below 2**24 every index is a float32 value, so ``index + delta`` rounds once, as
# transformers' float32 ``index + delta`` does
FLOAT_MAX_INDEX = 1 << 24
#: positions a table hands out stay below this (exclusive) whatever its ``max_position``: mrope's largest
#: position + 1 (2**31: an engine may narrow positions to int32); float32 tables 2**24, below which every
#: integer is a float32 value (beyond, float32 rounds positions: refused, as indices are)
POSITION_BOUND = LARGEST_POSITION + 1
FLOAT_POSITION_BOUND = 1 << 24
DEAD = np.iinfo(np.int64).max  # prompt length of a free slot: no index is ever "past" it
#: rows of ``SlotState.info``. The compiled step (:mod:`.compiled_step`) bakes them in; its numba cache entry
#: is named after a digest of them (:mod:`mrope._numba_cache`), so a change here compiles it anew.
PLEN, DELTA, KEY = 0, 1, 2


class SlotState:
    """Per-slot info, float32 deltas and the segment pool of a table (see the module docstring)."""

    def __init__(
        self, max_slots: int, *, floats: bool, capacity: int, max_position: int | None, num_dims: int = 3
    ) -> None:
        self.max_slots = max_slots
        self.num_dims = num_dims
        #: the rows of the table's requests, fixed by its first one (:meth:`fix_rows`), and how the steps
        #: write them (None: the rendered (t, h, w) as they are; until fixed, the index rows lead)
        self.family_rows: SegmentRows | None = None
        self.rows: SegmentRows | None = None if num_dims == 3 else SegmentRows(num_dims - 3)
        self.floats = floats
        self.max_index = FLOAT_MAX_INDEX if floats else MAX_INDEX
        #: positions stay below it (exclusive), on every path; ``bound_text`` names it in messages
        self.max_position, self.bound_text = position_bound(max_position, floats)
        #: the largest delta a live request may have (never lowered: a bound, not the maximum), and the
        #: index below which ``index + delta`` stays below ``max_position`` for every live request past
        #: its prompt (the int64 numpy step checks positions only from it on)
        self.max_delta: int | float | None = None
        self.index_limit = self.max_index
        self.info = np.zeros((3, max_slots + 2), dtype=np.int64)
        self.info[PLEN] = DEAD
        self._info_items = memoryview(self.info)  # one value at a time: cheaper than numpy's indexing
        # float32 tables: the deltas (float32 values), per info column; info[DELTA] is then 0
        self.deltas = np.zeros(max_slots + 2, dtype=np.float64) if floats else None
        self.pool = Pool(capacity, max_slots, floats)
        self.lock = threading.Lock()

    def fix_rows(self, rows: SegmentRows) -> None:
        """The rows of every request from now on (the first request's, or a loaded table's)."""
        self.family_rows = rows
        self.rows = None if rows.plain else rows

    def is_live(self, slot: int) -> bool:
        """``slot`` (an int in range) holds a request."""
        return self.pool.count[slot] > 0

    def prompt_length(self, slot: int) -> int:
        return int(self.info[PLEN, slot + 1])

    def prompt_lengths(self, slots: np.ndarray) -> np.ndarray:
        """The prompt lengths of ``slots`` (live, in range: a step checked them)."""
        return self.info[PLEN].take(slots + 1)

    def delta(self, slot: int) -> int | float:
        column = slot + 1
        return int(self.info[DELTA, column]) if self.deltas is None else float(self.deltas[column])

    def nbytes(self, slot: int) -> int:
        """Bytes of state ``slot`` holds: its segments and its info (and delta)."""
        return self.pool.nbytes(slot) + 3 * 8 + (0 if self.deltas is None else 8)

    def insert(self, slot: int, ints: Segments, floats: Floats, length: int, delta: Number) -> Span:
        """Store ``slot``'s segments (checked by the caller; a live slot's request is replaced) and its
        info. Returns the range of pool entries written (``lo``, ``hi``: the slot's, and a replaced
        request's that became free) and whether the pool was compacted (every entry may have moved)."""
        lo, hi, moved = self.pool.put(slot, ints, floats, length, delta)
        if self.max_delta is None or delta > self.max_delta:
            self.max_delta = delta
            self.index_limit = min(self.max_index, int(self.max_position - delta))
        if moved:
            self.rekey()
        info, column = self._info_items, slot + 1
        info[PLEN, column] = length
        info[KEY, column] = self.pool.first[slot] << SHIFT
        if self.deltas is None:
            info[DELTA, column] = delta
        else:  # a float32 table's info delta stays 0
            self.deltas[column] = delta
        return lo, hi, moved

    def release(self, slot: int) -> tuple[int, int]:
        """Free a live ``slot``; returns its former pool entries' range."""
        lo, hi = self.pool.free(slot)
        info, column = self._info_items, slot + 1
        info[PLEN, column], info[DELTA, column], info[KEY, column] = DEAD, 0, 0
        if self.deltas is not None:
            self.deltas[slot + 1] = 0
        return lo, hi

    def grow(self, capacity: int) -> None:
        """Compact the pool into at least ``capacity`` entries (:meth:`Pool.compact`)."""
        self.pool.compact(0, capacity)
        self.rekey()

    def rekey(self) -> None:
        """After compaction: the live slots' keys moved with their entries."""
        live, first = self.pool.live()
        self.info[KEY, live + 1] = first << SHIFT


def state_bytes(max_slots: int, capacity: int, floats: bool) -> int:
    """What a :class:`SlotState` allocates: per slot its info (3 int64, a float64 delta in float32 tables)
    and two Python list entries; per pool entry 6 int64 (2 float64 more in float32 tables)."""
    per_slot = 8 * (3 + floats) + 16
    return max_slots * per_slot + capacity * 8 * (6 + 2 * floats)


def position_bound(max_position: int | None, floats: bool) -> tuple[int, str]:
    """The exclusive bound on the positions of a table of ``max_position`` (None: not given) and dtype
    (``floats``: float32), and how messages name it: ``max_position`` where it is the lower one, else
    :data:`POSITION_BOUND` (:data:`FLOAT_POSITION_BOUND` for float32 tables)."""
    bound = FLOAT_POSITION_BOUND if floats else POSITION_BOUND
    if max_position is not None and max_position <= bound:
        return max_position, f"max_position {max_position}"
    if floats:
        return bound, "what a float32 table holds exactly (positions below 2**24)"
    return bound, f"the largest position mrope hands out, {LARGEST_POSITION} (2**31 - 1)"
