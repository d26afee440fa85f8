"""The pinned staging ring through which admissions reach a :class:`mrope.PositionTable`'s device copy."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch

_TORCH_DTYPES = {np.int64: torch.int64, np.float64: torch.float64}  # what the state holds


class Staging:
    """Host memory that host-to-device copies read from, as a ring: on CUDA pinned, the copies
    asynchronous (``non_blocking``), and a part of the ring reused only once the copies that read it
    have run (an event per admission). An admission thus never waits for the device (a copy from
    pageable memory would wait for all the work queued before it), and the host state may change as
    soon as it returns: the copies read a snapshot. On other devices the copies are synchronous and the
    ring is only reused."""

    MIN_BYTES = 1 << 20

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.buffer = self._allocate(self.MIN_BYTES)
        self.head = 0  # where the next part starts
        self.in_flight: deque[tuple[int, int, Any]] = deque()  # (start, end, event) of parts being read

    def copy(self, pairs: list[tuple[torch.Tensor, np.ndarray]]) -> None:
        """Copy each host array into its device tensor (same shape; int64 or float64) through one part
        of the ring."""
        sizes = [host.size * 8 for _, host in pairs]
        part = self._take(sum(sizes))
        offset = 0
        for (device, host), size in zip(pairs, sizes, strict=True):
            staged = part[offset : offset + size].view(_TORCH_DTYPES[host.dtype.type]).view(host.shape)
            staged.numpy()[...] = host
            device.copy_(staged, non_blocking=self.cuda)
            offset += size
        if self.cuda and offset:
            event = torch.cuda.Event()
            event.record()
            self.in_flight.append((self.head - offset, self.head, event))

    def _take(self, nbytes: int) -> torch.Tensor:
        """``nbytes`` of the ring that no copy still reads (waiting for the oldest ones if needed)."""
        if nbytes > self.buffer.shape[0]:  # a part larger than the ring: a larger ring, once read
            self._drain()
            self.buffer = self._allocate(max(nbytes, 2 * self.buffer.shape[0]))
            self.head = 0
        if self.head + nbytes > self.buffer.shape[0]:
            self.head = 0  # wrap around
        start, end = self.head, self.head + nbytes
        while self.in_flight and self.in_flight[0][0] < end and start < self.in_flight[0][1]:
            self.in_flight.popleft()[2].synchronize()  # the oldest part overlaps: its copies must be done
        self.head = end
        return self.buffer[start:end]

    def _drain(self) -> None:
        while self.in_flight:
            self.in_flight.popleft()[2].synchronize()

    def _allocate(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.cuda)
