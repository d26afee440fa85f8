"""The one-row fast path (``render_one_row``, ``segments_one_row``) against the vectorized pipeline
(``place``, ``build_segments``, ``render_all``) on the same random one-row streams, and its dispatch."""

import dataclasses
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrope import from_config
from mrope.core import (
    FEW_BLOCKS,
    block_rows,
    blocks_from_rows,
    build_segments,
    place,
    render_one_row,
    segments_one_row,
)
from mrope.core.place import COMPATS
from mrope.core.workspace import arrays
from mrope.render import render_all
from support import peers
from support.peers import require
from support.reference import QWEN2_5_VL_DICT as QWEN2_5_VL
from support.reference import stream_positions
from support.strategies import streams

compats = pytest.mark.parametrize("compat", COMPATS)
one_rows = streams(max_rows=1, max_blocks=FEW_BLOCKS, padding=False)


def _vectorized(stream, compat):
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    return render_all(build_segments(placed, stream.length)), int(placed.delta[0])


@compats
@given(stream=one_rows, float64=st.booleans())
def test_one_row_equals_vectorized(compat, stream, float64):
    if float64:  # vLLM's time arithmetic: both paths compute in the interval's dtype
        stream = dataclasses.replace(
            stream,
            blocks=dataclasses.replace(stream.blocks, interval=stream.blocks.interval.astype(np.float64)),
        )
    expected, expected_delta = _vectorized(stream, compat)
    context = f"compat={compat}, float64={float64}: {stream.describe()}"
    positions, delta = render_one_row(block_rows(stream.blocks), stream.length, compat)
    np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
    assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"
    table, delta = segments_one_row(block_rows(stream.blocks), stream.length, compat)
    np.testing.assert_array_equal(render_all(table), expected, err_msg=f"segments, {context}", strict=True)
    assert delta == expected_delta, f"segments delta {delta} != {expected_delta}: {context}"
    starts = np.append(table.data[0], stream.length)
    assert table.compact == bool((np.diff(starts) > 0).all()), f"compact flag wrong: {context}"
    assert table.compact or stream.length == 0, f"one-row tables have no empty segment: {context}"


@compats
@given(stream=one_rows)
def test_one_row_matches_reference(compat, stream):
    positions, delta = render_one_row(block_rows(stream.blocks), stream.length, compat)
    expected, deltas, _, _ = stream_positions(stream.rows(), compat)
    context = f"compat={compat}: {stream.describe()}"
    np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
    assert delta == deltas[0], f"delta {delta} != {deltas[0]}: {context}"


@given(stream=streams(max_rows=1, max_blocks=12, padding=False))
def test_blocks_round_trip_through_rows(stream):
    back = blocks_from_rows(block_rows(stream.blocks))
    for name in ("start", "frames", "height", "width", "interval", "num_tokens"):
        np.testing.assert_array_equal(
            getattr(back, name), getattr(stream.blocks, name), err_msg=name, strict=True
        )


def test_single_prompts_take_the_one_row_path(monkeypatch):
    # guards the equivalence test above: family.positions and segments really run the one-row pass
    import mrope.families._base as base

    require("transformers")
    calls = []
    for name in ("render_one_row", "segments_one_row"):
        original = getattr(base, name)
        monkeypatch.setattr(base, name, lambda *a, f=original, n=name: calls.append(n) or f(*a))
    family = from_config(peers.transformers_config("qwen2_vl"))
    family.positions([1, family.image_token_id, 2], image_grid_thw=[[1, 2, 2]])
    family.segments(
        [1, family.image_token_id, 2], image_grid_thw=[[1, 2, 2]], image_offsets=[1], video_offsets=[]
    )
    assert calls == ["render_one_row", "segments_one_row"]


# -- memory kept between calls -----------------------------------------------------------------------
def _kept_after(call) -> int:
    """Bytes still allocated after ``call()`` (its result dropped), as tracemalloc counts numpy's."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        call()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_long_prompt_leaves_bounded_scratch_memory():
    # one prompt of 4M tokens (an image in it): the per-thread workspace kept its 32 MB arange
    length = 4_000_000
    rows = [(1000, 1, 4, 4, np.float32(1), 0)]

    def call():
        positions, delta = render_one_row(rows, length, "vllm")
        assert positions[0, -1] == length - 1 + delta and positions[:, 1016].tolist() == [1004] * 3
        assert (positions[:, :1000] == np.arange(1000)).all()

    kept = _kept_after(call)
    assert kept < 8 << 20, f"{kept} bytes kept after the call"


def test_the_plane_cache_is_bounded_in_bytes():
    # 300 distinct image sizes of 5-20k tokens: an lru_cache of 256 planes kept about 80 MB
    def call():
        for k in range(300):
            height, width = 64 + k // 2, 80 + k
            positions, delta = render_one_row(
                [(2, 1, height, width, np.float32(1), 0)], height * width + 4, "vllm"
            )
            assert positions[1, 2 + width * (height - 1)] == 2 + height - 1  # first token of the last line
            assert positions[2, 2 + width - 1] == 2 + width - 1 and delta == max(height, width) + 4 - (
                height * width + 4
            )

    kept = _kept_after(call)
    assert kept <= arrays.budget + (4 << 20), f"{kept} bytes kept after the calls"


# -- memory and time bounded by tokens, never by the largest position ----------------------------------
# A video of a large second_per_grid_ts puts positions near 2**31 at a few tokens; a render that sized
# anything by the largest position (an arange of length + delta) took 15 GiB for 18 tokens.
#: the intervals (time steps per frame) of those videos: every multi-frame block reaches past 2**18
HUGE_INTERVALS = st.floats(2.0**18, 2.0**22, width=32)


def _peak_of(call):
    """``call()``'s result and the most bytes it held at once beyond what was allocated before it (as
    tracemalloc counts numpy's)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = call()
        return result, tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def _token_bound(tokens: int) -> int:
    """Bytes a render of ``tokens`` tokens may hold at once: a few rows of int64 per token (the output,
    one arange, a run's temporary, the cached planes and frame times) and a constant for Python's own."""
    return 256 * (tokens + 1) + (64 << 10)


@compats
@given(stream=one_rows, data=st.data())
def test_huge_video_times_cost_tokens_not_positions(compat, stream, data):
    from hypothesis import assume

    assume((stream.blocks.frames > 1).any())  # a block whose frames reach far: delta past 2**18
    intervals = [data.draw(HUGE_INTERVALS, label="interval") for _ in range(stream.blocks.start.size)]
    blocks = dataclasses.replace(stream.blocks, interval=np.array(intervals, dtype=np.float32))
    stream = dataclasses.replace(stream, blocks=blocks)
    context = f"compat={compat}: {stream.describe()}"
    expected, expected_delta = _vectorized(stream, compat)
    (positions, delta), peak = _peak_of(lambda: render_one_row(block_rows(blocks), stream.length, compat))
    np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
    assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"
    assert peak <= _token_bound(stream.length), f"{peak} bytes for {stream.length} tokens: {context}"


@pytest.mark.parametrize("compat", ["vllm", "transformers"])
def test_positions_near_2_31_through_every_one_prompt_call(compat):
    # 16 tokens, the video's last frame at ~1.9e9: positions, items, get_rope_index of one row, a table
    import mrope
    from mrope.families import PromptItem

    family = from_config(QWEN2_5_VL, compat=compat)
    seconds = 1.75 * 2**29  # (exact in float32) frame 1 at time index 2 * seconds = 1.75 * 2**30
    start, video, image = 151652, family.video_token_id, family.image_token_id
    ids = [1, 2, 3, start, *[video] * 4, 4, 5, 6, 7, start, image, 8, 9]
    inputs = {"video_grid_thw": [[2, 2, 4]], "image_grid_thw": [[1, 2, 2]], "second_per_grid_ts": [seconds]}
    items = [PromptItem("video", 4, (2, 2, 4), seconds), PromptItem("image", 13, (1, 2, 2))]
    (positions, delta), peak = _peak_of(lambda: family.positions(ids, **inputs))
    assert positions.max() + 1 - len(ids) == delta and delta > 2**30, (positions, delta)
    table, _ = family.segments(ids, **inputs)
    np.testing.assert_array_equal(render_all(table), positions, strict=True)
    calls = {
        "items": lambda: family.positions(ids, items=items),
        "get_rope_index": lambda: mrope.get_rope_index(family, np.array([ids]), **inputs),
    }
    for name, call in calls.items():
        (got, got_delta), got_peak = _peak_of(call)
        np.testing.assert_array_equal(np.asarray(got).reshape(3, -1), positions, err_msg=name, strict=True)
        assert int(np.asarray(got_delta).reshape(-1)[0]) == delta, name
        peak = max(peak, got_peak)
    serving = mrope.PositionTable(max_requests=2)
    serving.add(0, family, ids, **inputs)
    out = np.zeros((3, len(ids) + 3), dtype=np.int64)
    serving.fill(out, np.array([0]), np.array([0]), np.array([len(ids) + 3]))
    np.testing.assert_array_equal(out[:, : len(ids)], positions, strict=True)
    assert (out[:, len(ids) :] == np.arange(len(ids), len(ids) + 3) + delta).all()
    assert peak <= _token_bound(len(ids)) + (1 << 20), f"{peak} bytes held for {len(ids)} tokens"
