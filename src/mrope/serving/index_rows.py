"""The host step of a table whose requests give other rows than (t, h, w) (HunYuan-VL): the family's
:class:`mrope.core.SegmentRows` applied to ``out``.

The table runs its one step (numpy, compiled or float32) into the view of ``out`` that takes the rendered
rows (``SegmentRows.rendered``: rows ``lead:``, reversed by a negative stride where the family reverses
them), then :func:`write_index_rows` writes the index rows: each token's index inside its prompt, and past
it the rendered rows' ``index + delta`` (equal on every row), so that no delta arithmetic is repeated.
"""

from __future__ import annotations

import numpy as np

from .._arrays import overlapping
from .._errors import MRopeError


def check_rows_out(out: np.ndarray, num_dims: int, dtype: np.dtype) -> None:
    """``out`` is a (num_dims, n) array of the table's ``dtype`` whose elements share no memory (the
    step checks the rest: columns, writability)."""
    if out.dtype != dtype or out.ndim != 2 or out.shape[0] != num_dims:
        raise MRopeError(
            f"out must be a ({num_dims}, n) {dtype} array (the table's num_dims and dtype), got shape "
            f"{out.shape} dtype {out.dtype}"
        )
    if overlapping(out.shape, out.strides, out.itemsize):
        raise MRopeError(
            f"out has elements sharing memory (strides {out.strides} bytes, e.g. a broadcast or "
            "as_strided view): pass an array that can hold one position per element"
        )


def write_index_rows(
    out: np.ndarray,
    lead: int,
    rendered: np.ndarray,
    prompt_lengths: np.ndarray,
    nc: np.ndarray,
    ns: np.ndarray,
    num: int,
) -> None:
    """Rows ``out[:lead, :num]`` of a step the table wrote into ``rendered`` (the view of the rendered
    rows): token ``j`` of a request gets ``j`` below its prompt length, else the rendered ``j + delta``.
    ``prompt_lengths``, ``nc``, ``ns``: per request (the step checked them)."""
    if not lead or not num:
        return
    index_rows = out[:lead, :num]
    index_rows[...] = rendered[0, :num]
    first_column = np.cumsum(ns, dtype=np.int64)
    first_column -= ns
    index = np.subtract(nc, first_column, dtype=np.int64).repeat(ns)
    index += np.arange(num, dtype=np.int64)
    np.copyto(index_rows, index, where=index < prompt_lengths.repeat(ns))
