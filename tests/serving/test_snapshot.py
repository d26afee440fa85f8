"""A PositionTable through pickle, copy.copy and copy.deepcopy (mrope.serving._snapshot): the copy serves
the same positions as the table, shares nothing with it (each one's admissions and removals leave the
other as it was), keeps its bounds, rows, frozen pool and reserved device columns, and loads in another
process."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import family
from support.strategies import Image, build_prompt, prompts, text

#: the three ways a table is copied
COPIES = {
    "pickle": lambda table: pickle.loads(pickle.dumps(table)),
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
}
copies = pytest.mark.parametrize("how", COPIES)
#: a HunYuan-VL family of four rows (index, w, h, t), from a dict config
HUNYUAN = {
    "model_type": "hunyuan_vl",
    "image_token_id": 120120,
    "vision_config": {"spatial_merge_size": 2},
    "text_config": {"rope_parameters": {"mrope_section": [16, 16, 16, 16]}},
}


def served(table: PositionTable, extra: int = 3) -> dict[int, np.ndarray]:
    """Every live slot's positions, its prompt and ``extra`` indices past it, as one step each."""
    result = {}
    for slot in range(table.max_requests):
        if slot in table:
            count = table.prompt_length(slot) + extra
            out = np.zeros((table.num_dims, count), dtype=table.dtype)
            table.fill(out, np.array([slot]), np.array([0]), np.array([count]))
            result[slot] = out
    return result


def assert_same(got: dict[int, np.ndarray], expected: dict[int, np.ndarray], context: str) -> None:
    assert got.keys() == expected.keys(), f"live slots {sorted(got)} != {sorted(expected)}: {context}"
    for slot, positions in expected.items():
        np.testing.assert_array_equal(got[slot], positions, err_msg=f"slot {slot}: {context}", strict=True)


@copies
@settings(max_examples=25)
@given(data=st.data())
def test_a_copy_serves_the_same_and_shares_nothing(backend: str, how: str, data: st.DataObject) -> None:
    fam = family("qwen2_5_vl")
    dtype = data.draw(st.sampled_from([np.int64, np.float32]), label="dtype")
    table = PositionTable(
        6, dtype=dtype, backend=backend if dtype == np.int64 else "numpy", pool_capacity=8, max_position=10**6
    )
    prompt = prompts(fam, max_images=2, max_videos=1, max_text=6, max_side=3, max_frames=3)
    for _ in range(data.draw(st.integers(1, 10), label="operations")):  # adds (growing the pool), removals
        slot = data.draw(st.integers(0, 5), label="slot")
        if slot in table and data.draw(st.booleans(), label="remove"):
            table.remove(slot)
        else:
            p = data.draw(prompt, label="prompt")
            table.add(slot, fam, p.input_ids, **p.kwargs(), replace=True)
    before = served(table)
    copied = COPIES[how](table)
    context = f"{how}, {np.dtype(dtype).name}, {backend}"
    assert type(copied) is PositionTable and copied is not table
    for name in ("max_requests", "max_position", "dtype", "num_dims", "backend", "pool_capacity", "frozen"):
        assert getattr(copied, name) == getattr(table, name), f"{name}: {context}"
    assert_same(served(copied), before, context)
    for slot in before:
        assert copied.delta(slot) == table.delta(slot) and copied.state_nbytes(slot) == table.state_nbytes(
            slot
        )
    # each one's changes leave the other as it was
    p = data.draw(prompt, label="another prompt")
    for slot in range(6):
        copied.add(slot, fam, p.input_ids, **p.kwargs(), replace=True)
    assert_same(served(table), before, f"the table after the copy's admissions: {context}")
    after = served(copied)
    for slot in list(before):
        table.remove(slot)
    assert_same(served(copied), after, f"the copy after the table's removals: {context}")


@copies
def test_rows_bounds_and_refusals_are_carried(how: str) -> None:
    hunyuan = mrope.from_config(HUNYUAN)
    table = PositionTable(2, num_dims=4, max_position=500)
    p = build_prompt(hunyuan, [text(3), Image(2, 3), text(2)])
    table.add(0, hunyuan, p.input_ids, **p.kwargs())
    copied = COPIES[how](table)
    assert_same(served(copied), served(table), how)
    with pytest.raises(MRopeError, match="this table holds 4"):  # rows fixed by the first request
        copied.add(1, family("qwen2_vl"), [1, 2, 3])
    with pytest.raises(MRopeError, match="beyond max_position 500"):
        copied.add(1, hunyuan, list(range(600)))
    with pytest.raises(MRopeError, match="already holds a request"):
        copied.add(0, hunyuan, p.input_ids, **p.kwargs())
    assert_same(served(copied), served(table), f"{how}: refused calls changed nothing")


@copies
def test_a_frozen_table_keeps_its_reserved_device_columns(how: str) -> None:
    torch = pytest.importorskip("torch")
    fam = family("qwen2_vl")
    table = PositionTable(2)
    table.add(1, fam, [1, 2, 3, 4])
    table.reserve(tokens=64)
    table.freeze()
    copied = COPIES[how](table)
    assert copied.frozen
    out = torch.zeros((3, 64), dtype=torch.int64)
    index = torch.tensor([1]), torch.tensor([0]), torch.tensor([6])
    assert copied.fill(out, *index, num_tokens=64) == 64  # the 64 columns reserved before freezing
    assert out[:, :6].tolist() == [list(range(6))] * 3 and not out[:, 6:].any()
    with pytest.raises(MRopeError, match="frozen"):
        copied.fill(torch.zeros((3, 65), dtype=torch.int64), *index, num_tokens=65)


def test_a_pickled_table_loads_in_another_process(tmp_path) -> None:
    """As a data loader's worker: the table pickled here, loaded and filled in a child process."""
    fam = family("qwen2_5_vl")
    table = PositionTable(3)
    p = build_prompt(fam, [text(2), Image(2, 2), text(3)])
    table.add(2, fam, p.input_ids, **p.kwargs())
    (tmp_path / "table.pickle").write_bytes(pickle.dumps(table))
    child = (
        "import pickle, sys, numpy as np\n"
        "table = pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "out = np.zeros((3, table.prompt_length(2) + 3), dtype=np.int64)\n"
        "table.fill(out, np.array([2]), np.array([0]), np.array([out.shape[1]]))\n"
        "np.save(sys.argv[2], out)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run(
        [sys.executable, "-c", child, tmp_path / "table.pickle", tmp_path / "out.npy"], check=True, env=env
    )
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), served(table)[2], strict=True)


def test_a_snapshot_of_another_layout_is_refused() -> None:
    values = PositionTable(1).__getstate__()
    table = PositionTable.__new__(PositionTable)
    with pytest.raises(MRopeError, match=r"pickled in another layout \(1, this mrope reads 2\)"):
        table.__setstate__({**values, "format": 1})
