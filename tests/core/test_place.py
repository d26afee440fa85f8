"""``mrope.core.place``: bases, next bases and deltas of random blocks, against the per-token reference
``tests/support/reference.py`` under both conventions."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrope import MRopeError
from mrope.core.blocks import Blocks, empty_blocks
from mrope.core.place import (
    COMPATS,
    VIDEO_TIMES,
    ItemBlocks,
    build_segments,
    check_compat,
    check_video_time,
    place,
    time_interval,
)
from mrope.core.place import temporal_index as mrope_temporal_index
from mrope.core.segments import SegmentBuilder
from mrope.render import render_all
from support.reference import stream_positions, temporal_index
from support.strategies import INTERVALS, Stream, streams

compats = pytest.mark.parametrize("compat", COMPATS)


@compats
@given(stream=streams())
def test_bases_and_deltas_match_reference(compat, stream):
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    _, deltas, bases, next_bases = stream_positions(stream.rows(), compat)
    context = f"compat={compat}: {stream.describe()}"
    np.testing.assert_array_equal(placed.base, np.array(bases, dtype=np.int64), err_msg=f"base, {context}")
    np.testing.assert_array_equal(
        placed.next_base, np.array(next_bases, dtype=np.int64), err_msg=f"next_base, {context}"
    )
    np.testing.assert_array_equal(placed.delta, deltas, err_msg=f"delta, {context}", strict=True)


@compats
@given(stream=streams(padding=False))
def test_rows_are_independent(compat, stream):
    # each row placed alone gives the bases and delta it has in the batch
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    b = stream.blocks
    for r, (lo, n) in enumerate(zip(stream.row_starts.tolist(), stream.row_lengths.tolist(), strict=True)):
        mine = (b.start >= lo) & (b.start < lo + n)
        alone = Blocks(
            **{f: getattr(b, f)[mine] for f in b.__dataclass_fields__ if getattr(b, f) is not None}
        )
        alone = dataclasses.replace(alone, start=alone.start - lo)
        one = place(alone, np.array([0]), np.array([n]), compat)
        context = f"compat={compat}, row {r}: {stream.describe()}"
        np.testing.assert_array_equal(one.base, placed.base[mine], err_msg=context)
        assert one.delta[0] == placed.delta[r], f"delta {one.delta[0]} alone != {placed.delta[r]}: {context}"


@compats
def test_no_blocks_means_delta_zero(compat):
    placed = place(empty_blocks(), np.array([0, 5, 5]), np.array([5, 0, 3]), compat)
    np.testing.assert_array_equal(placed.delta, np.zeros(3, dtype=np.int64), err_msg=f"compat={compat}")


@compats
def test_conventions_differ_only_when_time_reaches_past_space(compat):
    # one block T=4, 1x1, interval 1: vllm resumes text at base + 4, transformers at base + 1
    stream = Stream(np.array([0]), np.array([6]), 6, _blocks([1], [4], [1], [1], [1.0]))
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    _, deltas, bases, next_bases = stream_positions(stream.rows(), compat)
    assert placed.next_base.tolist() == next_bases, f"compat={compat}: {placed.next_base} != {next_bases}"
    assert placed.delta.tolist() == deltas.tolist(), f"compat={compat}: {placed.delta} != {deltas}"
    other = place(
        stream.blocks, stream.row_starts, stream.row_lengths, "transformers" if compat == "vllm" else "vllm"
    )
    assert other.next_base.tolist() != placed.next_base.tolist(), "the conventions must differ here"


@given(frame=st.integers(0, 10_000), interval=INTERVALS)
def test_temporal_index_is_float32_truncation(frame, interval):
    got = mrope_temporal_index(np.array([frame]), np.array([interval], dtype=np.float32))
    assert got.tolist() == [temporal_index(frame, interval)], f"frame {frame} * interval {interval}"


def test_temporal_index_rounds_in_float32_not_float64():
    # 5 * float32(1.4) is 6.99999988 in float64 but rounds to 7.0 in float32, as the peers compute it
    interval = np.float32(1.4)
    assert int(5 * float(interval)) == 6
    got = mrope_temporal_index(np.array([5]), np.array([interval]))
    assert got.tolist() == [7], f"temporal_index(5, float32(1.4)) = {got}"


def test_unknown_compat_is_refused():
    with pytest.raises(MRopeError, match=r"compat must be one of .*'vllm'.*got 'sglang'"):
        check_compat("sglang")


def _blocks(start, frames, height, width, interval):
    arr = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    t, h, w = arr(frames), arr(height), arr(width)
    return Blocks(
        start=arr(start),
        frames=t,
        height=h,
        width=w,
        interval=np.asarray(interval, dtype=np.float32),
        num_tokens=t * h * w,
    )


@given(frame=st.integers(0, 10_000), interval=st.floats(0, 20))
def test_temporal_index_float64_is_vllms_arithmetic(frame, interval):
    # vLLM 0.32: (np.indices(...)[0] * t_factor).astype(np.int64), t_factor a Python float
    got = mrope_temporal_index(
        np.array([frame]), time_interval(1, np.array([interval]), VIDEO_TIMES["float64"])
    )
    expected = (np.array([frame], dtype=np.int64) * interval).astype(np.int64)
    assert got.tolist() == expected.tolist() == [int(frame * interval)], f"frame {frame} * {interval}"


def test_video_times_differ_where_the_product_is_near_an_integer():
    # fps 25, temporal patch 2: second_per_grid_ts = float32(0.08), tokens_per_second 2; at k = 25 the
    # float64 product is 3.99999991 (vLLM: 3), the float32 one rounds to 4.0 (transformers, SGLang: 4)
    seconds = np.float32(2 / 25)
    frame = np.array([25])
    assert mrope_temporal_index(frame, time_interval(2, seconds, VIDEO_TIMES["float64"])).tolist() == [3]
    assert mrope_temporal_index(frame, time_interval(2, seconds, VIDEO_TIMES["float32"])).tolist() == [4]


def test_unknown_video_time_is_refused():
    with pytest.raises(MRopeError, match=r"video_time must be one of \('float32', 'float64'\), got 'double'"):
        check_video_time("double")


def _items_of(stream: Stream, *, floats: bool, cuts: np.ndarray | None = None) -> ItemBlocks:
    """The stream's grid blocks as items that lay themselves out (as the Omni families do): one segment
    per frame at the base the scan gives, text resuming after the block's largest position."""
    b = stream.blocks
    row = stream.row_starts.searchsorted(b.start, side="right") - 1
    num = np.float32 if floats else int

    def layout(i: int, base, out: SegmentBuilder):
        frames, height, width = int(b.frames[i]), int(b.height[i]), int(b.width[i])
        t = mrope_temporal_index(np.arange(frames), b.interval[i])
        out.add(b.start[i] + np.arange(frames) * height * width, base + t, base, width, 0)
        peak = num(base + max(int(t[-1]), height - 1, width - 1))
        return peak, peak

    return ItemBlocks(b.start, b.start + b.num_tokens, row, layout, floats=floats, cuts=cuts)


@given(stream=streams(), floats=st.booleans(), data=st.data())
def test_item_blocks_place_as_the_reference(stream, floats, data):
    """The scan of items laid out by their family (the Omni path) against the per-token reference, in
    int64 and in float32 (integer values: every sum is exact), text cut at random indices (where a
    float32 text run restarts from its rounded base: exact values are unchanged)."""
    b = stream.blocks
    inside = np.zeros(stream.length + 1, dtype=bool)
    for s, n in zip(b.start.tolist(), b.num_tokens.tolist(), strict=True):
        inside[s : s + n] = True
    text = np.flatnonzero(~inside[:-1]).tolist()
    cuts = np.array(
        sorted(data.draw(st.sets(st.sampled_from(text)) if text else st.just(set()))), dtype=np.int64
    )
    placed = place(_items_of(stream, floats=floats, cuts=cuts), stream.row_starts, stream.row_lengths, "vllm")
    expected, deltas, bases, next_bases = stream_positions(stream.rows(), "vllm")
    context = stream.describe()
    np.testing.assert_array_equal(placed.base, np.array(bases, dtype=placed.base.dtype), err_msg=context)
    np.testing.assert_array_equal(
        placed.next_base, np.array(next_bases, dtype=placed.base.dtype), err_msg=context
    )
    np.testing.assert_array_equal(placed.delta, np.asarray(deltas, dtype=placed.delta.dtype), err_msg=context)
    positions = render_all(build_segments(placed, stream.length))
    assert positions.dtype == (np.float32 if floats else np.int64)
    np.testing.assert_array_equal(
        positions[:, stream.row_mask()], expected.astype(positions.dtype), err_msg=context
    )
