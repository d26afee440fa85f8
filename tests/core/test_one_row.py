"""The one-row fast path (``render_one_row``) against the vectorized pipeline (``place``,
``build_segments``, ``render_all``) on the same random one-row streams, and its dispatch."""

import numpy as np
import pytest
from hypothesis import given

from _reference import stream_positions
from mrope import from_config, peers
from mrope.core import FEW_BLOCKS, build_segments, place, render_all, render_one_row
from mrope.core.place import COMPATS
from strategies import streams

compats = pytest.mark.parametrize("compat", COMPATS)


@compats
@given(stream=streams(max_rows=1, max_blocks=FEW_BLOCKS, padding=False))
def test_one_row_equals_vectorized(compat, stream):
    positions, delta = render_one_row(stream.blocks, stream.length, compat)
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    context = f"compat={compat}: {stream.describe()}"
    np.testing.assert_array_equal(
        positions, render_all(build_segments(placed, stream.length)), err_msg=context
    )
    assert delta == placed.delta[0], f"delta {delta} != {placed.delta[0]}: {context}"


@compats
@given(stream=streams(max_rows=1, max_blocks=FEW_BLOCKS, padding=False))
def test_one_row_matches_reference(compat, stream):
    positions, delta = render_one_row(stream.blocks, stream.length, compat)
    expected, deltas, _, _ = stream_positions(stream.rows(), compat)
    context = f"compat={compat}: {stream.describe()}"
    np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
    assert delta == deltas[0], f"delta {delta} != {deltas[0]}: {context}"


def test_single_prompts_take_the_one_row_path(monkeypatch):
    # guards the equivalence test above: family.positions really runs render_one_row
    import mrope.families._base as base

    calls = []
    original = base.render_one_row
    monkeypatch.setattr(base, "render_one_row", lambda *a: calls.append(a) or original(*a))
    family = from_config(peers.transformers_config("qwen2_vl"))
    family.positions([1, family.image_token_id, 2], image_grid_thw=[[1, 2, 2]])
    assert len(calls) == 1
