"""``mrope.render.numpy``: the numpy segment lookup, render at segments and decode tail against a
per-token Python reference on arbitrary tables (with and without ``ORIGIN``, int64 and float)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope.core.segments import HW0, IS_TEXT, ORIGIN, START, T0, WIDTH
from mrope.render.numpy import find_segments, render_at, render_tail
from support.strategies import segment_data


@st.composite
def tables(draw, max_segments: int = 8):
    """(data (6, S) int64 sorted by start, the first at 0, origin <= start; length; indices (N,))."""
    data = draw(segment_data(max_segments))
    length = int(data[START, -1]) + draw(st.integers(1, 6))
    index = np.array(draw(st.lists(st.integers(0, length - 1), max_size=30)), dtype=np.int64)
    return data, length, index


def reference(data: np.ndarray, index: np.ndarray, origin_row: int) -> np.ndarray:
    """Per token: the last segment starting at or before it, then the formula of mrope.core.segments."""
    out = np.empty((3, index.size), dtype=np.float64 if data.dtype.kind == "f" else np.int64)
    for j, i in enumerate(index.tolist()):
        s = max(k for k in range(data.shape[1]) if data[START, k] <= i)
        o = i - data[origin_row, s]
        q, r = divmod(o, data[WIDTH, s])
        text = o * data[IS_TEXT, s]
        out[:, j] = data[T0, s] + text, data[HW0, s] + q, data[HW0, s] + r + text
    return out


@settings(max_examples=300)
@given(table=tables(), with_origin=st.booleans())
def test_find_and_render_match_reference(table, with_origin):
    data, _, index = table
    origin_row = ORIGIN if with_origin else START
    if not with_origin:
        data = data[:ORIGIN]
    segment = find_segments(data[START], index)
    expected = [max(k for k in range(data.shape[1]) if data[START, k] <= i) for i in index.tolist()]
    np.testing.assert_array_equal(segment, np.array(expected, dtype=np.intp).reshape(-1))
    out = render_at(data, segment, index.copy(), np.empty((3, index.size), np.int64), origin_row=origin_row)
    np.testing.assert_array_equal(out, reference(data, index, origin_row))


@given(table=tables(), shift=st.sampled_from([0.25, 0.5, 1.75]))
def test_float_render_rounds_once(table, shift):
    data, _, index = table
    data = data.astype(np.float64)
    data[T0] += shift
    data[HW0] += shift
    segment = find_segments(data[START], index)
    out = render_at(data, segment, index.copy(), np.empty((3, index.size), np.float32))
    np.testing.assert_array_equal(out, reference(data, index, ORIGIN).astype(np.float32))


@given(table=tables())
def test_render_with_separate_float_rows(table):
    """A float32 pool keeps T0 and HW0 apart (float64 rows): the same positions as a float64 table."""
    data, _, index = table
    floats = data[[T0, HW0]].astype(np.float64) + 0.5
    segment = find_segments(data[START], index)
    out = render_at(data, segment, index.copy(), np.empty((3, index.size), np.float32), floats=floats)
    merged = data.astype(np.float64)
    merged[[T0, HW0]] = floats
    np.testing.assert_array_equal(out, reference(merged, index, ORIGIN).astype(np.float32))


def test_render_negative_control():
    """The reference tells the origin row apart: counting from START where ORIGIN differs changes w."""
    data = np.array([[0], [0], [10], [4], [0], [-2]], dtype=np.int64)  # one frame from origin -2
    index = np.arange(5, dtype=np.int64)
    out = render_at(data, np.zeros(5, np.intp), index.copy(), np.empty((3, 5), np.int64), origin_row=START)
    assert not np.array_equal(out, reference(data, index, ORIGIN))
    np.testing.assert_array_equal(out, reference(data, index, START))


@given(index=st.lists(st.integers(0, 2**31), max_size=20), delta=st.integers(-100, 100))
def test_render_tail(index, delta):
    index = np.array(index, dtype=np.int64)
    expected = np.broadcast_to(index + delta, (3, index.size))
    np.testing.assert_array_equal(
        render_tail(np.empty((3, index.size), np.int64), index.copy(), delta), expected
    )
    np.testing.assert_array_equal(render_tail(np.empty((3, index.size), np.int64), index + delta), expected)
    floats = render_tail(np.empty((3, index.size), np.float32), index.copy(), np.float64(delta) + 0.5)
    np.testing.assert_array_equal(
        floats, np.broadcast_to((index + delta + 0.5).astype(np.float32), floats.shape)
    )
