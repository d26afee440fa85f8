"""Conversion between the array types mrope accepts (lists, numpy, torch) without importing torch.

torch is imported only when a caller already passed a torch tensor (it is then in ``sys.modules``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from ._errors import MRopeError

#: the environment variable that turns off mrope's compiled (numba) paths: ``MROPE_NUMBA=0``
NUMBA_ENV = "MROPE_NUMBA"


def numba_allowed() -> bool:
    """Whether mrope may use its compiled paths where numba imports (unless ``MROPE_NUMBA=0``)."""
    return os.environ.get(NUMBA_ENV, "").strip() != "0"


def is_torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor``; never imports torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def to_numpy(x: Any, *, name: str, dtype: Any = None) -> np.ndarray:
    """A numpy view (no copy where possible) of a list, numpy array or torch tensor."""
    if is_torch_tensor(x):
        try:
            x = x.numpy()  # the common case: a CPU tensor without grad, viewed without a copy
        except (RuntimeError, TypeError, NotImplementedError):
            x = _torch_values(x, name)
    try:
        arr = np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise MRopeError(f"{name} could not be read as an array: {err}") from None
    return arr


def _torch_values(x: Any, name: str) -> np.ndarray:
    """The values of a tensor that ``numpy()`` cannot view: on a device, with grad, or of a dtype numpy
    lacks (bfloat16, float8: converted to float32, which holds each of their values exactly)."""
    if x.device.type == "meta":
        raise MRopeError(f"{name} is a tensor on the meta device, which holds no values")
    x = x.detach().cpu()
    try:
        return x.numpy()
    except TypeError:
        if not x.is_floating_point():
            raise MRopeError(f"{name} has dtype {x.dtype}, which mrope cannot read") from None
        return x.float().numpy()


def to_int_array(x: Any, *, name: str, ndim: int | tuple[int, ...]) -> np.ndarray:
    """An int64 numpy array of the given rank; bool and float inputs are refused with a clear message."""
    arr = x if type(x) is np.ndarray else to_numpy(x, name=name)
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if arr.dtype == np.int64 and arr.ndim in ndims:  # the common case, checked first: no copy
        return arr
    if arr.ndim not in ndims:
        expected = " or ".join(f"{n}-D" for n in ndims)
        raise MRopeError(f"{name} must be {expected}, got shape {tuple(arr.shape)}")
    if arr.size == 0 and arr.dtype == np.float64:
        return arr.astype(np.int64)  # np.asarray([]) is float64: an empty list is still a valid id list
    if arr.dtype.kind not in "iu":
        raise MRopeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


_NO_GRIDS = np.zeros((0, 3), dtype=np.int64)
_NO_GRIDS.flags.writeable = False


def to_grid_array(x: Any, *, name: str) -> np.ndarray:
    """Grids as an int64 (n, 3) array; ``None`` is an empty grid list."""
    if x is None:
        return _NO_GRIDS
    arr = to_int_array(x, name=name, ndim=(1, 2))
    if arr.ndim == 1 and arr.size == 0:
        return arr.reshape(0, 3)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise MRopeError(f"{name} must have shape (num_items, 3) as (T, H, W) rows, got {tuple(arr.shape)}")
    return arr


def like_input(arr: np.ndarray, template: Any) -> Any:
    """Return ``arr`` as the template's type: a torch tensor on the template's device, or numpy."""
    if is_torch_tensor(template):
        tensor = sys.modules["torch"].from_numpy(np.ascontiguousarray(arr))
        return tensor if template.is_cpu else tensor.to(template.device)
    return arr
