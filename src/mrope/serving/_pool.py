"""The segment pool of :class:`mrope.serving.PositionTable`: every live request's segments, flat.

The request in engine slot ``s`` owns the pool entries ``first[s] ... first[s] + count[s] - 1``; the
last one is its decode tail. ``data`` (6, capacity) int64 holds an entry per column, in the segment
rows of :mod:`mrope.core.segments` (``START, T0, HW0, WIDTH, IS_TEXT, ORIGIN``), with the request's
``base`` (its first entry) in the high 32 bits of the two index rows:

- ``keys`` (row ``START``, a view of it): ``base << 32 | start``, the search key (free entries hold
  ``entry << 32``, so the keys are sorted over the whole pool and one ``searchsorted`` finds the
  segment of every token of a step; the entries from ``top`` on, never written since the pool was
  made or compacted, are also a text segment from origin 0, all a decode tail needs but its start and
  base);
- rows ``T0 ... IS_TEXT`` as in :mod:`mrope.core.segments`, and ``ORIGIN``: ``(base << 32) + origin``
  (a token's offset is its key minus this; an origin before index 0, of positions whose h and w start
  on different bases, :func:`.intake.from_positions`, is negative);
- ``floats`` (2, capacity) float64, float32 tables only: rows ``FLOAT_T0`` and ``FLOAT_HW0``, the
  segments' ``t0`` and ``hw0`` (float32 values; the int64 rows are then 0).

Indices (``start``, the prompt length) lie in
``[0, 2**32)``, an origin in ``(-2**32, 2**32)``: :meth:`Pool.put` copies a request's segments as they
are and adds ``base << 32`` to the two index rows.

Each slot keeps a *reservation*: the entries ``first[s] ... first[s] + reserved[s] - 1``, its
request's and, past them, free ones (free keys between live entries keep the keys sorted). A slot's
next request (after :meth:`Pool.free`, or replacing the live one) takes the reservation where it fits;
one that does not gets a new reservation at ``top``, its entries rounded up to a power of two (or what
is left at ``top``, where that is less but enough), and the old one becomes free. A reservation is never
shrunk: compaction keeps it (a free slot's is dropped only where the pool would otherwise grow, or a
frozen pool refuse). An engine's steady removal and admission (vLLM reuses a finished request's slot)
then stops moving ``top`` and compacting once each slot has held its largest request, whatever the
order of sizes (a small request between two large ones keeps the large one's room), and the rounding
bounds the moves of a slot whose requests keep growing to about ``log2`` of its largest.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np

from .._errors import MRopeError
from ..core.one_row import OneRowLayout
from ..core.segments import HW0, IS_TEXT, ORIGIN, START, T0, WIDTH

#: a request's segments as the pool takes them: an int64 (fields, segments) array (from
#: :mod:`.intake`), or a one-row layout written straight into the entries; their float fields
Segments: TypeAlias = "np.ndarray | OneRowLayout"
Floats: TypeAlias = "np.ndarray | None"
Number: TypeAlias = "int | float"
#: the range of entries a put wrote or freed (lo, hi), and whether the pool was compacted
Span: TypeAlias = "tuple[int, int, bool]"

SHIFT = 32  # key = base << 32 | index
NUM_FIELDS = ORIGIN + 1  # an entry's fields (the rows of ``data``)
#: the most entries a pool holds: a key keeps its entry's index (``base``) in the 31 bits above
#: ``SHIFT`` (int64 keys stay positive), and :meth:`Pool.put` writes it as an int32
MAX_CAPACITY = 1 << 31
FLOAT_T0, FLOAT_HW0 = 0, 1  # rows of ``floats``
#: a growing pool holds this many times its live entries (48 bytes each): compaction, which copies the
#: pool, then runs once per three times the live entries added
HEADROOM = 4
_INDEX_ROWS = slice(START, ORIGIN + 1, ORIGIN - START)  # the rows that hold base << 32 | index


class Pool:
    """Entries of segments, with per-slot reservations, compaction and growth (see the module
    docstring).

    An add that fits neither its slot's reservation nor the room at ``top`` compacts the pool (the
    reservations to the front); the pool grows (doubling at least) when, after compaction, less than
    ``1 - 1 / HEADROOM`` of it would be free. Compaction then runs only while reservations grow (at most
    ``1 + log2(largest request's entries)`` times per slot over the pool's life, each time after at
    least three times the reserved entries were added at ``top``), never in steady admission. Once ``frozen``
    (:meth:`PositionTable.freeze`), the arrays keep their size: an add that needs growth raises
    :class:`MRopeError` and changes nothing, and the headroom rule no longer grows the pool.
    """

    def __init__(self, capacity: int, max_slots: int, floats: bool) -> None:
        self.use(_fresh(capacity, 0), np.zeros((2, capacity), dtype=np.float64) if floats else None)
        self.top = 0  # first never-used entry
        self.frozen = False
        # per engine slot, Python ints (an admission reads and writes one of each; compaction all)
        self.first = [0] * max_slots
        self.count = [0] * max_slots  # 0: a free slot
        # per engine slot, its reservation's entries from ``first`` (>= count; 0: none yet)
        self.reserved = [0] * max_slots
        self.compactions = 0  # compactions (growth included) over the pool's life

    def use(self, data: np.ndarray, floats: np.ndarray | None) -> None:
        """Take ``data`` (and ``floats``) as the pool's arrays, with their views."""
        self.data, self.floats, self.capacity = data, floats, data.shape[1]
        self.keys = data[START]
        # item access (a memoryview's costs less than numpy's for one value at a time)
        self._data_items = memoryview(data)
        self._float_items = None if floats is None else memoryview(floats)

    def put(self, slot: int, ints: Segments, floats: Floats, length: int, delta: Number) -> Span:
        """Store ``slot``'s segments (from :mod:`.intake`, or a one-row layout written straight into
        the entries, int64 tables only) and its decode tail, a text segment from ``length`` whose offsets
        count from index 0 with base ``delta``: positions ``index + delta`` rounded once (float32
        tables), as transformers' float32 ``index + delta``; a live request of ``slot`` is replaced. The
        entries are the slot's reservation's where they fit (see the module docstring), else a new
        reservation's at ``top``. Returns the range of entries written (the slot's, and those of a replaced
        request that became free) and whether the pool was compacted (every entry may have moved)."""
        layout = type(ints) is OneRowLayout
        need = (ints.num if layout else ints.shape[1]) + 1
        lo, span_lo, span_hi, moved = self._claim(slot, need)
        hi = lo + need
        last = hi - 1
        items = self._data_items
        if layout:  # every entry written with its key's base bits (base << 32 |)
            self._write_layout(ints, lo)
            key = lo << SHIFT
            items[START, last] = key | length
            items[ORIGIN, last] = key
        else:
            self.data[:, lo:last] = ints
            items[START, last] = length
            items[ORIGIN, last] = 0
        # the decode tail, a text segment: start (above), t0 and hw0 (int64 tables; float32 tables: 0
        # there, the values in ``floats``), width = is_text = 1, origin 0; one value at a time
        if floats is None:
            items[T0, last] = items[HW0, last] = delta
        else:
            items[T0, last] = items[HW0, last] = 0
            self.floats[:, lo:last] = floats
            self._float_items[FLOAT_T0, last] = self._float_items[FLOAT_HW0, last] = delta
        items[WIDTH, last] = items[IS_TEXT, last] = 1
        if not layout:  # after the tail's start and origin (an origin may lie before index 0: added)
            self.data[_INDEX_ROWS, lo:hi] += lo << SHIFT
        self.first[slot] = lo
        self.count[slot] = need
        return span_lo, span_hi, moved

    def _claim(self, slot: int, need: int) -> tuple[int, int, int, bool]:
        """The first of ``need`` entries for ``slot`` (its reservation's, or a new reservation's at
        ``top``, compacting where it does not fit), the range of entries the put writes or frees, and
        whether the pool was compacted. Entries of the slot's former request past the new ones become
        free; a reservation left for a new one is free as a whole."""
        first, count, reserved = self.first[slot], self.count[slot], self.reserved[slot]
        if need <= reserved:  # in the reservation; the former request's entries past the new ones free
            if need < count:
                self.keys[first + need : first + count] = _free_keys(first + need, first + count)
            return first, first, first + max(need, count), False
        lo = self.top
        # a power of two, or what is left at top (no compaction for rounding); a frozen pool: ``need``
        # (it holds what reserve() sized)
        size = need if self.frozen else max(need, min(_reservation(need), self.capacity - lo))
        if lo + size > self.capacity:  # (the slot's reservation is not kept)
            self.compact(size, dropping=slot)
            self.reserved[slot] = size
            lo = self.top
            self.top = lo + size
            return lo, lo, lo + need, True
        self.top = lo + size
        self.reserved[slot] = size
        if count:  # the former request's entries become free
            self.keys[first : first + count] = _free_keys(first, first + count)
            return lo, min(lo, first), max(lo + need, first + count), False
        return lo, lo, lo + need, False

    def _write_layout(self, layout: OneRowLayout, lo: int) -> None:
        """A one-row layout's segments into entries ``lo ...``, the keys' base bits included (``lo <<
        32`` added to ``start`` and ``origin``: indices lie below 2**32)."""
        key = lo << SHIFT
        items, flat = self._data_items, layout.flat
        for i, column in enumerate(layout.singles):  # one value at a time (cheaper than numpy's indexing)
            entry, f = lo + column, i * NUM_FIELDS
            items[START, entry] = key | flat[f]
            items[T0, entry] = flat[f + T0]
            items[HW0, entry] = flat[f + HW0]
            items[WIDTH, entry] = flat[f + WIDTH]
            items[IS_TEXT, entry] = flat[f + IS_TEXT]
            items[ORIGIN, entry] = key + flat[f + ORIGIN]
        for column, (start, t0, hw0, width, is_text, origin), block in layout.frame_runs:
            translation = np.array((key | start, t0, hw0, width, is_text, key + origin), dtype=np.int64)
            entry = lo + column
            np.add(block, translation[:, None], out=self.data[:, entry : entry + block.shape[1]])

    def free(self, slot: int) -> tuple[int, int]:
        """Release ``slot``'s entries (their keys become free keys); returns their range."""
        lo = self.first[slot]
        hi = lo + self.count[slot]
        self.keys[lo:hi] = _free_keys(lo, hi)
        self.count[slot] = 0  # (the reservation stays the slot's)
        return lo, hi

    def compact(self, need: int, capacity: int = 0, dropping: int | None = None) -> None:
        """Move the slots' reservations (their requests and free entries) to the front, with room for
        ``need`` more entries and at least ``capacity`` in all (growing the pool: see the class
        docstring); the reservation of slot ``dropping`` (which is getting a larger one) is not kept.
        Raises, changing nothing, where they do not fit."""
        held, base = self.held(dropping)
        order = np.argsort(base)
        held, base = held[order], base[order]
        count = np.array(self.reserved)[held]
        used = int(count.sum())
        capacity = max(capacity, self.capacity)
        if (self.frozen and used + need > capacity) or (need and HEADROOM * (used + need) > capacity):
            live = np.array(self.count)[held] > 0  # free slots' reservations go before the pool grows
            held, base, count = held[live], base[live], count[live]
            used = int(count.sum())
        if self.frozen:
            if used + need > capacity:
                raise MRopeError(
                    f"the table is frozen (freeze()) and its segment pool is full: {used} entries live, "
                    f"{need} more needed, capacity {self.capacity}; reserve() more before freezing"
                )
        elif need and HEADROOM * (used + need) > capacity:  # an add, less than 3/4 free: grow
            capacity = min(max(2 * capacity, HEADROOM * (used + need)), MAX_CAPACITY)
        if used + need > capacity:  # beyond MAX_CAPACITY: keys cannot index more entries
            raise MRopeError(
                f"the segment pool cannot hold {used} live entries and {need} more: at most "
                f"{MAX_CAPACITY} (2**31) entries are indexed"
            )
        new_base = np.cumsum(count) - count
        shift = np.repeat(base - new_base, count)
        src = shift + np.arange(used)
        try:  # nothing is changed before both arrays exist
            data = _fresh(capacity, used)
            floats = None if self.floats is None else np.zeros((2, capacity), dtype=np.float64)
        except MemoryError:
            per_entry = 8 * (ORIGIN + 1 + (0 if self.floats is None else 2))  # bytes
            raise MRopeError(
                f"the segment pool cannot grow to {capacity} entries ({capacity * per_entry / 2**30:.1f} "
                "GiB): out of memory"
            ) from None
        data[:, :used] = self.data[:, src]
        data[_INDEX_ROWS, :used] -= shift << SHIFT
        if floats is not None:
            floats[:, :used] = self.floats[:, src]
        self.use(data, floats)
        firsts = np.array(self.first, dtype=np.int64)
        firsts[held] = new_base
        self.first = firsts.tolist()
        reserved = np.zeros(len(self.reserved), dtype=np.int64)
        reserved[held] = count
        self.reserved = reserved.tolist()
        if dropping is not None:  # its former request's entries were not kept
            self.count[dropping] = 0
        self.top = used
        self.compactions += 1

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """The live slots and their first entries (int64 arrays)."""
        live = np.flatnonzero(self.count)
        return live, np.array(self.first, dtype=np.int64)[live]

    def held(self, dropping: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The slots that hold a reservation (but ``dropping``) and their first entries (int64 arrays)."""
        held = np.flatnonzero(self.reserved)
        if dropping is not None:
            held = held[held != dropping]
        return held, np.array(self.first, dtype=np.int64)[held]

    def num_live(self) -> int:
        return len(self.count) - self.count.count(0)

    def nbytes(self, slot: int) -> int:
        """Bytes of ``slot``'s entries."""
        per_entry = self.data.itemsize * self.data.shape[0]
        if self.floats is not None:
            per_entry += self.floats.itemsize * self.floats.shape[0]
        return self.count[slot] * per_entry


def _reservation(need: int) -> int:
    """A new reservation's entries for a request of ``need``: ``need`` rounded up to a power of two (a
    slot's reservation then grows at most ``log2`` of its largest request times), at most
    :data:`MAX_CAPACITY`."""
    return max(need, min(1 << (need - 1).bit_length(), MAX_CAPACITY))


def _free_keys(lo: int, hi: int) -> np.ndarray:
    """The keys of free entries ``lo ... hi - 1``: ``entry << 32`` (sorted with every live key)."""
    return np.arange(lo << SHIFT, hi << SHIFT, 1 << SHIFT, dtype=np.int64)


def _fresh(capacity: int, used: int) -> np.ndarray:
    """A (6, capacity) entry array whose entries from ``used`` on are free: key ``entry << 32``, and a
    text segment from origin 0 with t0 = hw0 = 0 (what :meth:`Pool.put` leaves of a decode tail)."""
    data = np.zeros((ORIGIN + 1, capacity), dtype=np.int64)
    data[START, used:] = np.arange(used, capacity, dtype=np.int64) << SHIFT
    data[WIDTH : IS_TEXT + 1, used:] = 1
    return data
