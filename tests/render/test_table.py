"""``mrope.render.table``: positions of every token (``render_all`` of the segment table) and of
arbitrary indices (``render``), against the per-token reference ``tests/support/reference.py``; the compiled
render (:mod:`mrope.render.numba`) against the numpy one on arbitrary tables."""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope.core.blocks import Blocks
from mrope.core.place import COMPATS, build_segments, place
from mrope.core.segments import FIELDS, NUM_BASE_FIELDS, SegmentTable
from mrope.render.table import COMPILED_FROM, render, render_all
from support.peers import require
from support.reference import stream_positions
from support.strategies import Stream, streams

# the module (``mrope.render`` also names its function ``render``)
render_module = importlib.import_module("mrope.render.table")
compats = pytest.mark.parametrize("compat", COMPATS)
# the core is pure numpy and fast: explore more than the peer tests do
many = settings(max_examples=settings.default.max_examples * 5)


def table_of(stream: Stream, compat: str):
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    return build_segments(placed, stream.length)


@compats
@many
@given(stream=streams())
def test_render_all_matches_reference(compat, stream):
    positions = render_all(table_of(stream, compat))
    expected, _, _, _ = stream_positions(stream.rows(), compat)
    assert positions.shape == (3, stream.length) and positions.dtype == np.int64, positions.dtype
    # padding between rows gets positions the caller masks; every token inside a row is exact
    np.testing.assert_array_equal(
        positions[:, stream.row_mask()],
        expected,
        err_msg=f"compat={compat}: {stream.describe()}",
        strict=True,
    )


@compats
@many
@given(stream=streams())
def test_compiled_render_matches_reference(compat, stream):
    require("numba")
    positions = render_all(table_of(stream, compat), use_compiled=True)
    expected, _, _, _ = stream_positions(stream.rows(), compat)
    np.testing.assert_array_equal(
        positions[:, stream.row_mask()], expected, err_msg=f"compat={compat}: {stream.describe()}"
    )


@st.composite
def segment_tables(draw) -> SegmentTable:
    """Any int64 table the builders may give: sorted starts from 0 (repeats make empty segments), with
    or without the ``ORIGIN`` row (an origin before the start: a piece that continues a frame or a run),
    frames and text of any width, and a length at or past the last start."""
    count = draw(st.integers(1, 12))
    length = draw(st.integers(0, 300))
    starts = sorted(draw(st.lists(st.integers(0, length), min_size=count - 1, max_size=count - 1)))
    data = np.zeros((len(FIELDS), count), dtype=np.int64)
    data[0] = [0, *starts]
    for row, values in ((1, st.integers(0, 10**6)), (2, st.integers(0, 10**6)), (3, st.integers(1, 9))):
        data[row] = draw(st.lists(values, min_size=count, max_size=count))
    data[4] = draw(st.lists(st.integers(0, 1), min_size=count, max_size=count))
    data[5] = data[0] - np.array(draw(st.lists(st.integers(0, 40), min_size=count, max_size=count)))
    rows = len(FIELDS) if draw(st.booleans()) else NUM_BASE_FIELDS
    return SegmentTable(data[:rows].copy(), length)


@many
@given(table=segment_tables())
def test_compiled_render_matches_numpy_on_any_table(table):
    """The compiled walk (quotient and remainder counted) and the numpy passes (``divmod`` of every
    offset) write the same positions, and ``render`` of every index agrees."""
    require("numba")
    numpy_positions = render_all(table, use_compiled=False)
    out = np.full((3, table.length), -7, dtype=np.int64)
    assert render_all(table, out, use_compiled=True) is out
    np.testing.assert_array_equal(out, numpy_positions, err_msg=str(table.data.tolist()))
    np.testing.assert_array_equal(render(table, np.arange(table.length)), numpy_positions)


def test_render_all_takes_the_compiled_render_for_long_tables(monkeypatch, numba_env):
    """``use_compiled=None``: the compiled render from ``COMPILED_FROM`` tokens where numba imports,
    numpy below it and under ``MROPE_NUMBA=0``."""
    require("numba")
    calls = []
    kernel = render_module.compiled_render()
    assert kernel is not None

    def spy(*args):
        calls.append(args[3])
        return kernel(*args)

    monkeypatch.setattr(render_module, "compiled_render", lambda: spy)
    stream = Stream(
        np.array([0]), np.array([COMPILED_FROM]), COMPILED_FROM, _blocks([5], [2], [3], [4], [1.0])
    )
    table = table_of(stream, "vllm")
    np.testing.assert_array_equal(render_all(table), render_all(table, use_compiled=False))
    assert calls == [COMPILED_FROM]
    short = table_of(Stream(np.array([0]), np.array([40]), 40, _blocks([5], [2], [3], [4], [1.0])), "vllm")
    render_all(short)
    assert calls == [COMPILED_FROM], "a short table takes the numpy passes"
    monkeypatch.undo()
    numba_env("0")
    assert render_module.compiled_render() is None


@compats
@many
@given(data=st.data())
def test_render_at_any_indices_matches_render_all(compat, data):
    stream = data.draw(streams(), label="stream")
    table = table_of(stream, compat)
    expected = render_all(table)
    # any order, repeats, and the first and last index of the stream
    index = np.array(
        data.draw(
            st.lists(st.integers(0, max(stream.length - 1, 0)), max_size=40 if stream.length else 0),
            label="index",
        )
        + ([0, stream.length - 1] if stream.length else []),
        dtype=np.int64,
    )
    out = np.full((3, index.size), -7, dtype=np.int64)
    render(table, index, out)
    np.testing.assert_array_equal(
        out, expected[:, index], err_msg=f"compat={compat}, index {index.tolist()}: {stream.describe()}"
    )


@compats
def test_render_all_writes_into_out(compat):
    stream = Stream(np.array([0]), np.array([9]), 9, _blocks([2], [2], [1], [2], [1.5]))
    table = table_of(stream, compat)
    out = np.full((3, 9), -1, dtype=np.int64)
    returned = render_all(table, out=out)
    expected, _, _, _ = stream_positions(stream.rows(), compat)
    assert returned is out, "render_all(out=...) must return out"
    np.testing.assert_array_equal(out, expected, err_msg=f"compat={compat}")


@compats
def test_text_only_rows_count_from_zero(compat):
    stream = Stream(np.array([0, 4]), np.array([4, 3]), 7, _blocks([], [], [], [], []))
    positions = render_all(table_of(stream, compat))
    expected = np.array([[0, 1, 2, 3, 0, 1, 2]] * 3, dtype=np.int64)
    np.testing.assert_array_equal(positions, expected, err_msg=f"compat={compat}")


def _blocks(start, frames, height, width, interval):
    t, h, w = (np.asarray(v, dtype=np.int64) for v in (frames, height, width))
    return Blocks(
        start=np.asarray(start, dtype=np.int64),
        frames=t,
        height=h,
        width=w,
        interval=np.asarray(interval, dtype=np.float32),
        num_tokens=t * h * w,
    )
