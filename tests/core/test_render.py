"""``mrope.core.render``: positions of every token (``render_all`` of the segment table) and of
arbitrary indices (``render``), against the per-token reference ``tests/_reference.py``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _reference import stream_positions
from mrope.core.blocks import Blocks
from mrope.core.place import COMPATS, place
from mrope.core.render import build_segments, render, render_all
from strategies import Stream, streams

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
