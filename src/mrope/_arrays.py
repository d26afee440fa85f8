"""Conversion between the array types mrope accepts (lists, numpy, torch) without importing torch.

torch is imported only when a caller already passed a torch tensor (it is then in ``sys.modules``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from ._errors import MRopeError

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def overlapping(shape: Any, strides: Any, itemsize: int = 1) -> bool:
    """Whether two elements of an array of this shape and strides share memory (strides and
    ``itemsize`` in bytes for numpy; in elements, ``itemsize`` 1, for torch). Exact for the layouts
    of slices, transposes and expands; a layout whose dimensions interleave counts as overlapping."""
    if 0 in shape:
        return False
    reach = 0  # how far past an element's start the dimensions of smaller strides reach
    for stride, size in sorted((abs(st), sz) for st, sz in zip(strides, shape, strict=True) if sz > 1):
        if stride < reach + itemsize:
            return True
        reach += stride * (size - 1)
    return False


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


def dtype_name(x: Any, arr: np.ndarray) -> str:
    """The dtype ``x`` was given in, for messages: a torch tensor's own (``bfloat16``, which
    :func:`to_numpy` reads as float32), else that of ``arr``, its numpy form."""
    return str(x.dtype).removeprefix("torch.") if is_torch_tensor(x) else str(arr.dtype)


def _torch_values(x: Any, name: str) -> np.ndarray:
    """The values of a tensor that ``numpy()`` cannot view: on a device, with grad, or of a dtype numpy
    lacks (bfloat16, float8: converted to float32, which holds each of their values exactly)."""
    if x.is_nested or x.layout is not sys.modules["torch"].strided:
        kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        raise MRopeError(f"{name} is a {kind} tensor: pass a dense (strided) tensor, an array or a list")
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
    """An int64 numpy array of the given rank; bool and float inputs are refused with a clear message,
    and so are integers beyond int64 (named with their value, never wrapped)."""
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
        refuse_non_integers(arr, x, name)
    check_int64_range(arr, name)
    return arr.astype(np.int64, copy=False)


def int_list(x: Any, *, name: str) -> list[int]:
    """The values of a 1-D integer list, array or tensor as Python ints (a few values: an item's grid).
    A CPU tensor of an integer dtype is read with ``tolist()`` (no numpy view); anything else goes
    through :func:`to_int_array`, which refuses what is not integers."""
    torch = sys.modules.get("torch")
    is_tensor = torch is not None and type(x) is torch.Tensor
    if is_tensor and x.ndim == 1 and x.is_cpu and x.dtype in _torch_int_dtypes(torch):
        return x.tolist()
    return to_int_array(x, name=name, ndim=1).tolist()


@functools.cache
def _torch_int_dtypes(torch: Any) -> frozenset:
    """torch's signed integer dtypes and uint8, whose values are all int64 values."""
    return frozenset((torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8))


def refuse_non_integers(arr: np.ndarray, x: Any, name: str) -> None:
    """Raise for ``arr`` (``x`` read by numpy) holding other than integers. Python integers beyond
    int64 make numpy choose float64 or object: those are named with their value, not the dtype."""
    if arr.dtype.kind in "fO" and not isinstance(x, np.ndarray) and not is_torch_tensor(x):
        try:
            items = np.asarray(x, dtype=object)
        except (TypeError, ValueError):
            items = None
        values = items.reshape(-1).tolist() if items is not None and items.shape == arr.shape else []
        if values and all(type(v) is int or isinstance(v, np.integer) for v in values):
            beyond = next((i for i, v in enumerate(values) if not _INT64_MIN <= v <= _INT64_MAX), None)
            if beyond is not None:
                where = list(map(int, np.unravel_index(beyond, arr.shape)))
                raise MRopeError(
                    f"{name}{where} = {values[beyond]} does not fit in int64 (the integers mrope reads)"
                )
    raise MRopeError(f"{name} must hold integers, got dtype {dtype_name(x, arr)}")


def check_int64_range(arr: np.ndarray, name: str) -> None:
    """Raise for a uint64 value beyond int64 (``astype`` would wrap it to a negative one)."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > _INT64_MAX:
        beyond = int(np.argmax(arr > _INT64_MAX))
        where = list(map(int, np.unravel_index(beyond, arr.shape)))
        raise MRopeError(
            f"{name}{where} = {arr.reshape(-1)[beyond]} does not fit in int64 (the integers mrope reads)"
        )


_INT64 = np.dtype(np.int64)
_NO_GRIDS = np.zeros((0, 3), dtype=np.int64)
_NO_GRIDS.flags.writeable = False


def to_grid_array(x: Any, *, name: str) -> np.ndarray:
    """Grids as an int64 (n, 3) array; ``None`` is an empty grid list."""
    if x is None:
        return _NO_GRIDS
    if type(x) is np.ndarray and x.dtype is _INT64 and x.ndim == 2 and x.shape[1] == 3:
        return x  # the common case (an engine's grids), checked first
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
