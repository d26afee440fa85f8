"""Per-thread scratch arrays reused across calls by the render and the one-prompt paths."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: the longest scratch row a thread keeps between calls (int64 entries, 2 MiB): a longer one (a prompt
#: of more tokens) is allocated for its call and given back after it, so that whatever prompts a thread
#: has served it keeps an arange of at most _KEEP and six rows of at most 2**16 entries (the render's
#: chunk; 5 MiB)
_KEEP = 1 << 18


class Workspace(threading.local):
    """Per-thread scratch rows reused across calls: large temporaries allocated per call make the
    allocator map and unmap memory, and the page faults cost more than the arithmetic. Rows longer
    than ``_KEEP`` are not kept (see there)."""

    def __init__(self) -> None:
        self.rows = np.empty((6, 0), dtype=np.int64)
        self.arange = np.arange(0, dtype=np.int64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Six scratch rows of ``n`` entries and ``arange(n)``."""
        rows = self.rows
        if rows.shape[1] < n:
            rows = np.empty((6, n), dtype=np.int64)
            if n <= _KEEP:
                self.rows = rows
        return rows[:, :n], self.range(n)

    def range(self, n: int) -> np.ndarray:
        """``arange(n)``, int64, read from a cached array."""
        arange = self.arange
        if arange.size < n:
            arange = np.arange(n, dtype=np.int64)
            if n <= _KEEP:
                self.arange = arange
        return arange[:n]


#: this thread's scratch (see :class:`Workspace`)
workspace = Workspace()


class ArrayCache:
    """Small read-only arrays that repeat across requests (a frame's positions at base 0, a video's frame
    times and frame segments), by key, within a budget of bytes: the oldest is dropped first, and an
    array larger than a quarter of the budget is built for its call only. A hit takes no lock (a dict
    read is atomic)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.kept = 0  # bytes held
        self._items: dict[Any, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, build: Callable[..., np.ndarray]) -> np.ndarray:
        """The array of ``key``, built on a miss by ``build(*key[1:])`` (and kept, read-only): the key is
        a name followed by the builder's arguments."""
        array = self._items.get(key)
        if array is not None:
            return array
        array = build(*key[1:])
        array.flags.writeable = False
        if array.nbytes <= self.budget // 4:
            with self._lock:
                if key not in self._items:
                    self._items[key] = array
                    self.kept += array.nbytes
                    while self.kept > self.budget:
                        self.kept -= self._items.pop(next(iter(self._items))).nbytes
        return array


#: the arrays that the one-prompt paths reuse across requests (see :class:`ArrayCache`), 4 MiB
arrays = ArrayCache(4 << 20)
