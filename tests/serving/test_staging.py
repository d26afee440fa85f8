"""The staging ring (:mod:`mrope.serving.staging`) through which admissions reach the device copy."""

from __future__ import annotations

import pytest
import torch

from mrope.serving import PositionTable
from mrope.serving.staging import Staging
from support.engine import churn


def test_staging_ring_wraps_and_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admissions reach the device copy through the staging ring: with a ring smaller than one
    admission (it grows) and then a few admissions (it wraps), every device step equals the host's."""
    monkeypatch.setattr(Staging, "MIN_BYTES", 64)
    table = PositionTable(3, device=torch.device("cpu"))
    churn(table, "cpu", 40)
    table.reserve(segments=256)  # the pool at its size for what follows (its compactions copy it all)
    staging = table._steps.device._staging
    size = staging.buffer.shape[0]
    assert size > 64  # grew to hold an admission and the whole pool
    wraps = []
    copy = Staging.copy

    def copy_and_record(self: Staging, pairs: list) -> None:
        before = self.head
        copy(self, pairs)
        wraps.append(self.head <= before)  # the part was taken from the ring's start

    monkeypatch.setattr(Staging, "copy", copy_and_record)
    churn(table, "cpu", 40)  # each admission and removal stages a part: the ring wraps several times
    assert staging.buffer.shape[0] == size and sum(wraps) >= 5  # reused from its start, not grown
