"""The numba backend of the render: the segment of an index (:func:`find_segment`), a run of tokens of
one segment (:func:`render_run`) and the decode tail (:func:`render_tail`), over scalars; composed here
into the one-pass render of a whole table (:func:`render_table`) and of a prompt of one-frame images
(:func:`image_positions`, with its scan :func:`item_starts`), and by the compiled serving step
(:mod:`mrope.serving.compiled_step`).

numpy renders a long stream in about twenty passes over memory; these kernels write each token once,
walking the segments in order and keeping the quotient and remainder of the offset by counting. The
formula is :func:`mrope.core.segments.render_formula`, compiled over scalars and inlined.

numba is optional: :func:`mrope.render.choose.compiled_kernel` loads this module, or returns ``None``
where numba is missing or ``MROPE_NUMBA=0``. numba's on-disk cache entries are named after a digest of
what they compile (:func:`mrope._numba_cache.cached_njit`), so a change to the formula or the field
rows compiles anew.
"""

from __future__ import annotations

import numba
import numpy as np

from .._numba_cache import cached_njit
from ..core.blocks import NO_FIT
from ..core.place import place_block, row_delta
from ..core.segments import HW0, IS_TEXT, START, T0, WIDTH, render_formula

_formula = numba.njit(inline="always")(render_formula)  # over scalars: returns (t, h, w)
_place_block = numba.njit(inline="always")(place_block)
_row_delta = numba.njit(inline="always")(row_delta)


@numba.njit(inline="always")
def render_run(out, col, count, o, width, t0, hw0, is_text):  # noqa: ANN001, ANN201
    """Positions of ``count`` consecutive tokens of one segment into ``out[:, col:col + count]``, the first
    at offset ``o`` from the segment's origin; returns the column after them. The quotient and
    remainder of ``o / width`` are divided once, then counted."""
    q = o // width
    r = o - q * width
    for _ in range(count):
        t, h, w = _formula(o, q, r, t0, hw0, is_text)
        out[0, col] = t
        out[1, col] = h
        out[2, col] = w
        col += 1
        o += 1
        r += 1
        if r == width:
            r = 0
            q += 1
    return col


@numba.njit(inline="always")
def render_tail(out, col, count, index, delta):  # noqa: ANN001, ANN201
    """The decode tail: ``index + delta`` on all three rows of ``count`` tokens from ``index`` into ``out``
    from column ``col`` (a text run with base ``delta``, offsets from index 0); returns the column after."""
    return render_run(out, col, count, index, 1, delta, delta, 1)


@numba.njit(inline="always")
def find_segment(starts, index):  # noqa: ANN001, ANN201
    """The segment of the token at ``index``: the last column whose start is ``<= index`` (a binary
    search; ``starts`` sorted, ``starts[0] <= index``)."""
    lo, hi = 0, starts.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if starts[mid] <= index:
            lo = mid
        else:
            hi = mid
    return lo


@cached_njit(nogil=True, boundscheck=False)
def render_table(out, data, origin_row, length):  # noqa: ANN001, ANN201
    """Positions (3, ``length``) of every token of an int64 segment table (``data``: the rows of
    :mod:`mrope.core.segments`, sorted by start, the first starting at 0) into ``out``. A segment runs
    to the next one's start (an empty one is skipped) and the last to ``length``."""
    n = data.shape[1]
    for s in range(n):
        start = data[START, s]
        end = min(data[START, s + 1], length) if s + 1 < n else length
        if end > start:
            render_run(
                out,
                start,
                end - start,
                start - data[origin_row, s],
                data[WIDTH, s],
                data[T0, s],
                data[HW0, s],
                data[IS_TEXT, s],
            )
    return out


@cached_njit(nogil=True, boundscheck=False)
def item_starts(ids, token_id, stop_id, counts):  # noqa: ANN001, ANN201
    """One pass over ``ids`` (1-D) for items of ``counts[i]`` placeholders (``token_id``) each, in order:
    True when each item's placeholders are consecutive and none are left over, ``counts`` then
    overwritten with each item's first index; False otherwise, or at the first ``stop_id`` (a token that
    rules out the caller's path). The compiled form of :func:`mrope.core.blocks.locate_few`'s rule."""
    num = counts.shape[0]
    k = 0  # the item the next placeholder belongs to
    taken = 0  # its placeholders seen so far
    first = previous = -1
    for i in range(ids.shape[0]):
        token = ids[i]
        if token == stop_id:
            return False
        if token == token_id:
            if k == num or (taken and i != previous + 1):
                return False  # a placeholder left over, or an item's placeholders not consecutive
            if not taken:
                first = i
            taken += 1
            previous = i
            if taken == counts[k]:
                counts[k] = first
                k += 1
                taken = 0
    return k == num


@cached_njit(nogil=True, boundscheck=False)
def image_positions(ids, token_id, stop_id, grids, merge, out):  # noqa: ANN001, ANN201
    """Positions (3, ``len(ids)``) into ``out`` of one prompt of one-frame images (``grids`` (n, 3), T = 1,
    before the spatial ``merge``) found in ``ids`` by :func:`item_starts`' scan, and the delta; ``NO_FIT``
    where they do not fit their placeholders (or at ``stop_id``). One pass: the place of
    :func:`mrope.core.place.place_rows` (:func:`~mrope.core.place.place_block`, :func:`~mrope.core.place
    .row_delta`) and the render of :func:`render_run`, for an engine's prompt in a cold cache."""
    num = grids.shape[0]
    starts = np.empty(num, dtype=np.int64)
    for k in range(num):
        starts[k] = (grids[k, 1] // merge) * (grids[k, 2] // merge)
    if not item_starts(ids, token_id, stop_id, starts):
        return NO_FIT
    shift, reach, col = 0, -1, 0
    for k in range(num):
        start, height, width = starts[k], grids[k, 1] // merge, grids[k, 2] // merge
        if start > col:  # the text before it
            render_run(out, col, start - col, 0, 1, col + shift, col + shift, 1)
        # one frame: text resumes max(H', W') after the base in both conventions (text_advance)
        extent = height if height > width else width
        base, shift, reach = _place_block(start, height * width, extent, extent, shift, reach)
        col = render_run(out, start, height * width, 0, width, base, base, 0)
    length = ids.shape[0]
    if length > col:
        render_run(out, col, length - col, 0, 1, col + shift, col + shift, 1)
    return _row_delta(length, shift, reach)


_INT64_ROW = numba.types.Array(numba.types.int64, 1, "A")

#: :func:`item_starts` compiled for int64 ids of any strides (a torch ``LongTensor``'s ``numpy()``), called
#: without numba's dispatcher, whose type resolution costs microseconds in a cold cache (an engine's
#: prompt); ids of another dtype raise ``TypeError`` (the dispatcher then serves them)
item_starts_int64 = item_starts.compile((_INT64_ROW, numba.types.int64, numba.types.int64, _INT64_ROW))
#: :func:`image_positions` compiled for int64 ids of any strides and C-contiguous grids and ``out``, called
#: without the dispatcher (ids of another dtype raise ``TypeError``)
image_positions_int64 = image_positions.compile(
    (
        _INT64_ROW,
        numba.types.int64,
        numba.types.int64,
        numba.types.Array(numba.types.int64, 2, "C"),
        numba.types.int64,
        numba.types.Array(numba.types.int64, 2, "C"),
    )
)
