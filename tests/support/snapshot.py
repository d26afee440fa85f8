"""The whole state of a :class:`PositionTable` (host arrays, float32 tables' float state, the device
copy), to check that a refused call changed nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

try:
    import torch
except ImportError:  # numpy alone: tables have no device copy
    torch = None

from mrope import MRopeError
from mrope.serving import PositionTable


def snapshot(table: PositionTable) -> dict[str, Any]:
    held = table._state
    pool = held.pool
    state: dict[str, Any] = {
        "data": pool.data.copy(),
        "floats": None if pool.floats is None else pool.floats.copy(),
        "top": pool.top,
        "capacity": pool.capacity,
        "frozen": pool.frozen,
        "first": list(pool.first),
        "count": list(pool.count),
        "reserved": list(pool.reserved),
        "info": held.info.copy(),
        "deltas": None if held.deltas is None else held.deltas.copy(),
        "max_delta": getattr(held, "max_delta", None),  # (the bound on live deltas, see SlotState)
        "index_limit": getattr(held, "index_limit", None),
    }
    device = table._steps.device
    if device is not None:
        for name in ("data", "floats", "info", "delta", "errors"):
            tensor = getattr(device, name)
            state[f"device {name}"] = None if tensor is None else tensor.cpu().clone()
        state["device ramp"] = device.ramp.shape[0]
    return state


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Equal states; a device copy made by the call (on the first torch call) is not a change."""
    assert before.keys() <= after.keys()
    for name, value in before.items():
        if isinstance(value, np.ndarray) or (torch is not None and isinstance(value, torch.Tensor)):
            np.testing.assert_array_equal(np.asarray(value), np.asarray(after[name]), err_msg=name)
        else:
            assert value == after[name], name


def unchanged(table: PositionTable, call, match: str) -> None:
    """``call()`` raises :class:`MRopeError` matching ``match`` and leaves ``table`` as it was."""
    before = snapshot(table)
    with pytest.raises(MRopeError, match=match):
        call()
    assert_same(before, snapshot(table))
