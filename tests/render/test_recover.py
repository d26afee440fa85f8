"""Segments recovered from explicit positions (:func:`mrope.render.segments_of`): any integer positions
render back exactly, and the rule's positions keep about the segments the rule places."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope.render import render_all, segments_of
from support.engine import CONFIGS, family
from support.strategies import prompts

SMALL = st.integers(0, 60)


@st.composite
def any_positions(draw: st.DrawFn) -> np.ndarray:
    """(3, L) integer positions: frames on any bases (h above w, w above h), text runs, lone tokens,
    cut anywhere."""
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["frame", "text", "tokens"]))
        if kind == "frame":
            height, width = draw(st.integers(1, 4)), draw(st.integers(1, 5))
            t0, h0, w0 = draw(SMALL), draw(SMALL), draw(SMALL)
            row, column = np.divmod(np.arange(height * width), width)
            parts.append(np.stack([np.full(height * width, t0), h0 + row, w0 + column]))
        elif kind == "text":
            first = draw(SMALL)
            parts.append(np.arange(first, first + draw(st.integers(1, 6)))[None].repeat(3, 0))
        else:
            tokens = draw(st.lists(st.tuples(SMALL, SMALL, SMALL), min_size=1, max_size=4))
            parts.append(np.array(tokens).T)
    positions = np.concatenate(parts, axis=1)
    return positions[:, draw(st.integers(0, positions.shape[1] - 1)) :]


@settings(max_examples=300)
@given(positions=any_positions())
def test_any_integer_positions_render_back(positions: np.ndarray) -> None:
    table = segments_of(positions)
    assert table is not None
    np.testing.assert_array_equal(render_all(table), positions)
    assert table.num_segments <= positions.shape[1]


def test_a_frame_on_two_bases_is_one_segment_or_one_per_row() -> None:
    """h above w: one segment whose origin lies before index 0; w above h: a segment per row."""
    rows, columns = np.divmod(np.arange(6), 3)
    h_above = np.stack([np.full(6, 2), 9 + rows, 4 + columns])
    assert segments_of(h_above).num_segments == 1
    w_above = np.stack([np.full(6, 2), 4 + rows, 9 + columns])
    assert segments_of(w_above).num_segments == 2


def test_fractional_positions_off_the_rule_have_none() -> None:
    assert segments_of(np.array([[0, 1.5], [0, 5], [0, 1]], dtype=np.float32)) is None


@settings(max_examples=30)
@given(data=st.data())
def test_the_rules_positions_keep_few_segments(data: st.DataObject) -> None:
    """A family's positions give at most twice the segments its own placement builds (a token where a
    frame meets text may start its own)."""
    fam = family(data.draw(st.sampled_from(sorted(CONFIGS))))
    prompt = data.draw(prompts(fam, max_side=4, max_frames=4))
    positions, _ = fam.positions(prompt.input_ids, **prompt.kwargs())
    placed, _ = fam.segments(prompt.input_ids, **prompt.kwargs())
    recovered = segments_of(positions)
    np.testing.assert_array_equal(render_all(recovered), positions)
    assert recovered.num_segments <= 2 * placed.num_segments
