"""PackedPrompt (a prompt's segments made in one process) and PositionTable.add_packed (registered in
another by copying them): the same positions as the prompt's own, through a pickle, and refusals that
name what is wrong and change nothing."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope import MRopeError
from mrope.serving import PackedPrompt, PositionTable
from support.engine import CONFIGS, OMNI, family
from support.strategies import prompts

#: the families of int64 (t, h, w) positions: what add_packed takes
INT_FAMILIES = sorted(n for n in CONFIGS if n not in OMNI and family(n, "vllm").num_dims == 3)


def _steps(table: PositionTable, slot: int, length: int) -> np.ndarray:
    """The positions of ``length + 3`` tokens of ``slot``: the prompt, then three past it."""
    out = np.empty((3, length + 3), dtype=np.int64)
    table.fill(out, np.array([slot]), np.array([0]), np.array([length + 3]))
    return out


@pytest.mark.parametrize("name", INT_FAMILIES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_packed_prompt_registers_what_add_does(name: str, data: st.DataObject) -> None:
    """A prompt packed from its positions, pickled (as a process ships it) and registered by
    ``add_packed``: the table's steps equal those of ``add`` from the prompt, and the packed prompt
    renders the positions it was made from."""
    fam = family(name, "vllm")
    p = data.draw(prompts(fam, max_side=4, max_frames=4))
    positions, delta = fam.positions(p.input_ids, **p.kwargs())
    packed = pickle.loads(pickle.dumps(PackedPrompt.from_positions(positions, delta)))
    np.testing.assert_array_equal(packed.positions(), positions)
    through_array = PackedPrompt.from_array(packed.to_array())
    np.testing.assert_array_equal(through_array.positions(), positions)
    by_inputs, by_packed = PositionTable(4), PositionTable(4)
    by_inputs.add(2, fam, p.input_ids, **p.kwargs())
    by_packed.add_packed(2, packed)
    length = len(p.input_ids)
    np.testing.assert_array_equal(_steps(by_packed, 2, length), _steps(by_inputs, 2, length))
    assert by_packed.delta(2) == delta and by_packed.prompt_length(2) == length


@given(length=st.integers(1, 300))
def test_text_prompt_is_its_index(length: int) -> None:
    table = PositionTable(2)
    table.add_packed(1, PackedPrompt.text(length))
    np.testing.assert_array_equal(_steps(table, 1, length), np.arange(length + 3)[None].repeat(3, 0))


def test_replace_and_the_pool_bytes() -> None:
    """``replace`` swaps a live request in place; a video's packed prompt is bytes per frame."""
    fam = family("qwen2_5_vl", "vllm")
    ids = [1] * 5 + [fam.video_token_id] * (64 * 4 * 4) + [2] * 7
    positions, delta = fam.positions(ids, video_grid_thw=[[64, 8, 8]], second_per_grid_ts=[1.0])
    packed = PackedPrompt.from_positions(positions, delta)
    assert packed.nbytes <= 48 * (64 + 2) < positions.nbytes // 5  # 16-token frames: 48 bytes each
    table = PositionTable(2)
    table.add_packed(0, PackedPrompt.text(9))
    table.add_packed(0, packed, replace=True)
    np.testing.assert_array_equal(_steps(table, 0, len(ids))[:, : len(ids)], positions)


def _bad(field: str) -> PackedPrompt:
    """A packed prompt with one field wrong (as one built by hand may be): refused where it is made."""
    good = PackedPrompt.text(4)
    segments, length, delta = good.segments, good.length, good.delta
    if field == "segments":
        segments = segments.astype(np.int32)
    elif field == "start":
        segments = segments.copy()
        segments[0, 0] = 1
    elif field == "length":
        length = 0
    else:
        delta = 1.5  # type: ignore[assignment]
    return PackedPrompt(segments, length, delta)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("segments", "2-d int64 numpy array"),
        ("length", "positive int"),
        ("delta", "delta an int"),
        ("start", "must start at 0"),
    ],
)
def test_a_wrong_field_is_refused_where_it_is_made(field: str, message: str) -> None:
    with pytest.raises(MRopeError, match=message):
        _bad(field)


def test_unpickled_prompts_are_checked_and_segments_read_only() -> None:
    packed = PackedPrompt.text(4)
    assert not packed.segments.flags.writeable
    tampered = PackedPrompt.text(4)
    object.__setattr__(tampered, "length", -1)  # as a corrupted or hand-made pickle may hold
    data = pickle.dumps(tampered)
    with pytest.raises(MRopeError, match="positive int"):
        pickle.loads(data)


def test_refusals_change_nothing() -> None:
    table = PositionTable(2)
    table.add_packed(1, PackedPrompt.text(5))
    with pytest.raises(MRopeError, match="must be a mrope.serving.PackedPrompt"):
        table.add_packed(0, np.zeros((6, 1), dtype=np.int64))  # type: ignore[arg-type]
    with pytest.raises(MRopeError, match="already holds a request"):
        table.add_packed(1, PackedPrompt.text(3))
    with pytest.raises(MRopeError, match="out of range"):
        table.add_packed(2, PackedPrompt.text(3))
    assert 0 not in table and table.prompt_length(1) == 5


def test_tables_of_other_positions_refuse_it() -> None:
    with pytest.raises(MRopeError, match="float32 positions in 3 rows"):
        PositionTable(1, dtype=np.float32).add_packed(0, PackedPrompt.text(3))
    with pytest.raises(MRopeError, match="int64 positions in 4 rows"):
        PositionTable(1, num_dims=4).add_packed(0, PackedPrompt.text(3))
    with pytest.raises(MRopeError, match="positive int"):
        PackedPrompt.text(0)
    with pytest.raises(MRopeError, match="shape"):
        PackedPrompt.from_positions(np.zeros((2, 4), dtype=np.int64), 0)
    array = PackedPrompt.text(3).to_array()
    with pytest.raises(MRopeError, match=r"holds 2 \+ 6 \* S values"):
        PackedPrompt.from_array(array[:, :-1])
    with pytest.raises(MRopeError, match=r"\(1, n\) int64"):
        PackedPrompt.from_array(array[0])
    array[0, 0] = 0
    with pytest.raises(MRopeError, match="positive int"):
        PackedPrompt.from_array(array)
