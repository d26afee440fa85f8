"""The few-blocks fast paths (``_place_one_row``, ``render_blocks``) against the vectorized ones
(``place`` over several rows, ``render_all`` of ``build_segments``) on the same random streams."""

import importlib

import numpy as np
import pytest
from hypothesis import given

from mrope.core.blocks import Blocks
from mrope.core.place import COMPATS, FEW_BLOCKS, place
from mrope.core.render import build_segments, render_all, render_blocks
from strategies import streams

place_module = importlib.import_module("mrope.core.place")
compats = pytest.mark.parametrize("compat", COMPATS)


@compats
@given(stream=streams(max_rows=1, max_blocks=FEW_BLOCKS))
def test_one_row_place_equals_vectorized(compat, stream):
    few = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    # the vectorized scan, reached by adding an empty row after the stream
    starts = np.append(stream.row_starts, stream.length)
    lengths = np.append(stream.row_lengths, 0)
    many = place(stream.blocks, starts, lengths, compat)
    context = f"compat={compat}: {stream.describe()}"
    assert stream.blocks.start.size <= FEW_BLOCKS
    np.testing.assert_array_equal(few.base, many.base, err_msg=context, strict=True)
    np.testing.assert_array_equal(few.next_base, many.next_base, err_msg=context, strict=True)
    np.testing.assert_array_equal(few.delta, many.delta[:1], err_msg=context, strict=True)


@compats
@given(stream=streams())
def test_render_blocks_equals_table(compat, stream):
    placed = place(stream.blocks, stream.row_starts, stream.row_lengths, compat)
    inside = stream.row_mask()
    by_blocks = render_blocks(placed, stream.length)[:, inside]
    by_table = render_all(build_segments(placed, stream.length))[:, inside]
    np.testing.assert_array_equal(by_blocks, by_table, err_msg=f"compat={compat}: {stream.describe()}")


def test_one_row_path_is_taken():
    # guards the equivalence test above: it compares two different code paths
    blocks = Blocks(*(np.array([v]) for v in (0, 1, 1, 1)), np.array([1.0], dtype=np.float32), np.array([1]))
    calls = []
    original = place_module._place_one_row
    place_module._place_one_row = lambda *args: calls.append(args) or original(*args)
    try:
        place(blocks, np.array([0]), np.array([1]), "vllm")
    finally:
        place_module._place_one_row = original
    assert len(calls) == 1
