"""``mrope.core.segments``: the render formula on Python ints, numpy (in place, into ``out``), torch and
numba, against a per-token loop over the two cases it covers (text runs and frames)."""

import numba
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from mrope.core.segments import FIELDS, HW0, IS_TEXT, ORIGIN, START, T0, WIDTH, render_formula, render_offsets

positions_ = st.integers(-(2**40), 2**40)
# one segment: (t0, hw0, width, is_text, tokens rendered); a text run has width 1
segment_ = st.tuples(positions_, positions_, st.integers(1, 50), st.booleans(), st.integers(1, 60)).map(
    lambda s: (s[0], s[1], 1 if s[3] else s[2], *s[3:])
)
segments_ = st.lists(segment_, min_size=1, max_size=8)


def reference(t0, hw0, width: int, is_text: bool, offset: int) -> tuple:
    """A token's positions from the definition: text is ``base + o``; a frame is ``(t0, hw0 + row, hw0 +
    column)``."""
    if is_text:
        return t0 + offset, hw0 + offset, hw0 + offset
    return t0, hw0 + offset // width, hw0 + offset % width


def tokens(segments) -> tuple[np.ndarray, ...]:
    """Per token: offset, t0, hw0, width, is_text (int64 arrays)."""
    columns = [
        (o, t0, hw0, width, int(is_text)) for t0, hw0, width, is_text, count in segments for o in range(count)
    ]
    return tuple(np.array(c, dtype=np.int64) for c in zip(*columns, strict=True))


def expected(segments) -> np.ndarray:
    rows = [
        reference(t0, hw0, width, is_text, o)
        for t0, hw0, width, is_text, count in segments
        for o in range(count)
    ]
    return np.array(rows, dtype=np.int64).T


def test_fields_are_the_row_order():
    assert list(range(6)) == [START, T0, HW0, WIDTH, IS_TEXT, ORIGIN]
    assert FIELDS[START] == "start" and FIELDS[ORIGIN] == "origin" and FIELDS[WIDTH] == "width"


@given(segments=segments_)
def test_python_ints(segments):
    offset, t0, hw0, width, is_text = (a.tolist() for a in tokens(segments))
    got = [render_offsets(*args) for args in zip(offset, t0, hw0, width, is_text, strict=True)]
    np.testing.assert_array_equal(np.array(got, dtype=np.int64).T, expected(segments), strict=True)


@given(segments=segments_)
def test_numpy_in_place_into_out(segments):
    """The numpy call of the hot paths: divmod into out's rows, t0 taken into out's first row."""
    offset, t0, hw0, width, is_text = tokens(segments)
    out = np.full((3, offset.size), -7, dtype=np.int64)
    rows = tuple(out)
    rows[0][...] = t0
    np.divmod(offset, width, out=rows[1:])
    result = render_formula(offset.copy(), rows[1], rows[2], rows[0], hw0, is_text)
    assert all(got is row for got, row in zip(result, rows, strict=True))  # written in place
    np.testing.assert_array_equal(out, expected(segments), strict=True)


@given(segments=segments_)
def test_numpy_float_fields(segments):
    """float64 fields holding float32 values (Qwen3-Omni): float64 buffers, rounded once to float32."""
    offset, t0, hw0, width, is_text = tokens(segments)
    t0f = (t0 / 3).astype(np.float32).astype(np.float64)
    hw0f = (hw0 / 7).astype(np.float32).astype(np.float64)
    q, r = (x.astype(np.float64) for x in np.divmod(offset, width))
    got = np.array(render_formula(offset.copy(), q, r, t0f.copy(), hw0f, is_text)).astype(np.float32)
    columns = zip(t0f.tolist(), hw0f.tolist(), width.tolist(), is_text.tolist(), offset.tolist(), strict=True)
    rows = [reference(*column) for column in columns]
    np.testing.assert_array_equal(got, np.array(rows, dtype=np.float64).T.astype(np.float32), strict=True)


@given(segments=segments_)
def test_torch(segments):
    offset, t0, hw0, width, is_text = (torch.from_numpy(a) for a in tokens(segments))
    got = torch.stack(render_offsets(offset, t0, hw0, width, is_text))
    np.testing.assert_array_equal(got.numpy(), expected(segments), strict=True)


_render = numba.njit(inline="always")(render_formula)


@numba.njit
def _walk(out, offset, t0, hw0, width, is_text):  # noqa: ANN001, ANN202
    """The compiled step's way: the quotient and remainder kept by counting along each segment."""
    q, r = 0, 0
    for col in range(offset.shape[0]):
        if offset[col] == 0:
            q, r = 0, 0
        t, h, w = _render(offset[col], q, r, t0[col], hw0[col], is_text[col])
        out[0, col], out[1, col], out[2, col] = t, h, w
        r += 1
        if r == width[col]:
            r = 0
            q += 1
    return out


@given(segments=segments_)
def test_numba(segments):
    offset, t0, hw0, width, is_text = tokens(segments)
    out = _walk(np.empty((3, offset.size), dtype=np.int64), offset, t0, hw0, width, is_text)
    np.testing.assert_array_equal(out, expected(segments), strict=True)
    assert numba.njit(render_formula)(5, 1, 2, 10, 20, 1) == (15, 21, 27)
