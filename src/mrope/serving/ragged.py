"""vLLM Model Runner V2's ragged layout of a step (queries at ``query_start_loc``, counts per slot): its
checks, written once for the host and the device paths, and its host form, the counts of ``fill``."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._arrays import is_torch_tensor
from .._errors import MRopeError
from ._checks import as_index


def check_starts(num_requests: int, num_starts: int) -> None:
    """``query_start_loc`` holds an entry per request and one past the last (or more)."""
    if num_starts < num_requests + 1:
        raise MRopeError(
            f"query_start_loc must have len(slots) + 1 = {num_requests + 1} entries (or more), "
            f"got {num_starts}"
        )


def host_out(out: Any) -> np.ndarray:
    """``out`` as the numpy array the host path writes (a CPU tensor's view)."""
    if is_torch_tensor(out):
        try:
            return out.numpy()  # a view: the host path writes into the tensor
        except (RuntimeError, TypeError) as err:
            raise MRopeError(f"out cannot be written through numpy: {err}") from None
    if type(out) is not np.ndarray:
        raise MRopeError(f"out must be a numpy array or a torch tensor, got {type(out).__name__}")
    return out


def host_counts(
    slots: Any, query_start_loc: Any, slot_num_computed: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The step as ``fill`` takes it: ``(slots, num_computed, num_scheduled)`` per request, the checked
    ``query_start_loc`` and its first column (the columns of ``out`` that ``fill`` writes start there)."""
    slots = as_index(slots, "slots")
    starts = as_index(query_start_loc, "query_start_loc")
    computed = as_index(slot_num_computed, "slot_num_computed")
    n = slots.shape[0]
    check_starts(n, starts.shape[0])
    first = int(starts[0]) if n else 0
    if first < 0:
        raise MRopeError(f"query_start_loc[0] = {first}: columns are >= 0")
    try:
        nc = computed.take(slots)  # a negative slot reads an entry here, and fill refuses it
    except IndexError:
        i = int(np.argmax(slots >= computed.shape[0]))
        raise MRopeError(
            f"slots[{i}] = {slots[i]} has no entry in slot_num_computed (length {computed.shape[0]})"
        ) from None
    return slots, nc, np.subtract(starts[1 : n + 1], starts[:n]), starts, first


def refuse_decreasing(starts: np.ndarray, num_requests: int) -> None:
    """Raise where ``query_start_loc`` decreases (a step that ``fill`` refused for its negative counts:
    this names the cause)."""
    n = num_requests
    decreasing = starts[1 : n + 1] < starts[:n]  # (ns < 0 misses differences that wrap)
    if decreasing.any():
        i = int(np.argmax(decreasing))
        raise MRopeError(f"query_start_loc decreases at request {i}: {starts[i]} then {starts[i + 1]}")
