"""The segment pool of :class:`mrope.serving.PositionTable`: every live request's segments, flat.

Request ``row`` owns the slots ``base[row] ... base[row] + slots[row] - 1``; the last one is its decode
tail. Per slot:

- ``keys``: ``base << 32 | start``, the search key (free slots hold ``slot << 32``, so the keys are
  sorted over the whole pool and one ``searchsorted`` finds the segment of every token of a step);
- ``fields`` (5, capacity) int64: ``base << 32 | origin`` (a token's offset is its key minus this),
  ``t0``, ``hw0``, ``width``, ``is_text`` (:mod:`mrope.core.render`);
- ``floats`` (2, capacity) float64, float32 tables only: ``t0`` and ``hw0`` (float32 values; the
  int64 rows are then unused).
"""

from __future__ import annotations

import numpy as np

from ._segments import IS_TEXT, ORIGIN, START, T0

SHIFT = 32  # key = base << 32 | index
OKEY, FT0, FHW0, FWIDTH, FIS_TEXT = range(5)  # rows of ``fields``


class Pool:
    """Slots of segments, with compaction (see the module docstring)."""

    def __init__(self, capacity: int, max_requests: int, floats: bool) -> None:
        self.keys = np.arange(capacity, dtype=np.int64) << SHIFT
        self.fields = np.zeros((5, capacity), dtype=np.int64)
        self.fields[FWIDTH] = 1
        self.floats = np.zeros((2, capacity), dtype=np.float64) if floats else None
        self.top = 0  # first never-used slot
        self.base = np.zeros(max_requests, dtype=np.int64)
        self.slots = np.zeros(max_requests, dtype=np.int64)  # 0: free row

    @property
    def capacity(self) -> int:
        return self.keys.shape[0]

    def put(self, row: int, ints: np.ndarray, floats: np.ndarray | None, length: int, delta: float) -> bool:
        """Store ``row``'s segments (from :mod:`._segments`) and its decode tail, a text segment from
        ``length`` whose offsets count from index 0 with base ``delta``: positions ``index + delta``
        rounded once (float32 tables), as transformers' float32 ``index + delta``. Returns whether the
        pool was compacted (every slot may have moved)."""
        need = ints.shape[1] + 1
        moved = self.top + need > self.capacity
        if moved:
            self.compact(need)
        lo, hi = self.top, self.top + need
        key = lo << SHIFT
        self.keys[lo : hi - 1] = ints[START] + key
        self.keys[hi - 1] = length + key
        fields = self.fields
        fields[OKEY, lo : hi - 1] = ints[ORIGIN] + key
        fields[FT0 : FIS_TEXT + 1, lo : hi - 1] = ints[T0 : IS_TEXT + 1]
        base = 0 if self.floats is not None else delta
        fields[:, hi - 1] = (key, base, base, 1, 1)
        if self.floats is not None:
            self.floats[:, lo : hi - 1] = floats
            self.floats[:, hi - 1] = delta
        self.top = hi
        self.base[row], self.slots[row] = lo, need
        return moved

    def free(self, row: int) -> tuple[int, int]:
        """Release ``row``'s slots (their keys become free keys); returns the slot range."""
        lo, hi = int(self.base[row]), int(self.base[row] + self.slots[row])
        self.keys[lo:hi] = np.arange(lo, hi, dtype=np.int64) << SHIFT
        self.slots[row] = 0
        return lo, hi

    def compact(self, need: int) -> None:
        """Move the live requests' slots to the front (growing the pool if ``need`` still does not fit)."""
        live = np.flatnonzero(self.slots)
        live = live[np.argsort(self.base[live])]
        count = self.slots[live]
        used = int(count.sum())
        capacity = self.capacity
        if used + need > capacity:
            capacity = max(2 * capacity, used + need)
        new_base = np.cumsum(count) - count
        shift = np.repeat(self.base[live] - new_base, count)
        src = shift + np.arange(used)
        keys = np.arange(capacity, dtype=np.int64) << SHIFT
        keys[:used] = self.keys[src] - (shift << SHIFT)
        fields = np.zeros((5, capacity), dtype=np.int64)
        fields[FWIDTH] = 1
        fields[:, :used] = self.fields[:, src]
        fields[OKEY, :used] -= shift << SHIFT
        if self.floats is not None:
            floats = np.zeros((2, capacity), dtype=np.float64)
            floats[:, :used] = self.floats[:, src]
            self.floats = floats
        self.keys, self.fields = keys, fields
        self.base[live] = new_base
        self.top = used

    def nbytes(self, row: int) -> int:
        """Bytes of ``row``'s slots."""
        per_slot = 8 * (6 + (0 if self.floats is None else 2))
        return int(self.slots[row]) * per_slot
