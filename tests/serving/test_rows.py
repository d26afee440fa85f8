"""A table of the family's rows (HunYuan-VL: ``num_dims`` rows, index rows in front of the rendered rows
reversed): every step path against transformers 5.24 itself (its ``get_rope_index`` for the prompt, its
decode rule ``index + rope_deltas`` on every row past it), a negative control, and the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import mrope
from mrope import MRopeError
from mrope.core import SegmentRows
from mrope.families import HunYuanVL
from mrope.serving import PositionTable
from support.engine import family as engine_family
from support.peers import as_numpy, as_torch_ids, peer_setup, transformers_rope_index
from support.strategies import Image, build_prompt, prompts, text

HUNYUAN = pytest.mark.parametrize("peer", ["hunyuan_vl", "hunyuan_vl-3rows"], indirect=True)
PATHS = ("host", "torch", "ragged")


def expected_positions(peer, prompt, total: int) -> np.ndarray:
    """transformers' rows for indices ``0 .. total - 1``: its ``get_rope_index`` of the prompt, then its
    decode rule (``text_positions + rope_deltas`` on every row) past it."""
    import torch

    family = peer.family("vllm")
    grids = {"image_grid_thw": torch.tensor(prompt.image_grid_thw)} if prompt.image_grid_thw else {}
    rows, deltas = transformers_rope_index(family, peer.config, as_torch_ids([prompt.input_ids]), **grids)
    rows, delta = as_numpy(rows)[:, 0], int(as_numpy(deltas).reshape(-1)[0])
    length = rows.shape[1]
    tail = np.arange(length, total, dtype=np.int64) + delta
    return np.concatenate([rows, np.broadcast_to(tail, (rows.shape[0], tail.size))], axis=1)


def run_steps(table: PositionTable, path: str, slot: int, chunks: list[int]) -> np.ndarray:
    """The positions ``table`` writes for ``slot`` over steps of ``chunks`` tokens (a chunked prefill,
    then decodes), each step on ``path``, with a text request in slot 0 scheduled beside it."""
    num_dims, done, written = table.num_dims, 0, []
    for size in chunks:
        slots = np.array([0, slot])
        nc = np.array([3, done])
        ns = np.array([1, size])
        num = int(ns.sum())
        if path == "host":
            out = np.full((num_dims, num + 2), -1, dtype=np.int64)
            assert table.fill(out, slots, nc, ns) == num
        elif path == "torch":
            import torch

            tensor = torch.full((num_dims, num + 2), -1, dtype=torch.int64)
            table.fill(tensor, torch.from_numpy(slots), torch.from_numpy(nc), torch.from_numpy(ns), num + 2)
            table.check()
            out = tensor.numpy()
            assert (out[:, num:] == 0).all()  # the device path writes 0 past the real tokens
        else:  # fill_ragged's host path, columns from 1 on, nc per slot
            out = np.full((num_dims, num + 2), -1, dtype=np.int64)
            computed = np.zeros(slot + 1, dtype=np.int64)
            computed[0], computed[slot] = 3, done
            table.fill_ragged(out, slots, np.array([1, 2, 2 + size]), computed)
            assert (out[:, 0] == -1).all() and (out[:, num + 1 :] == -1).all()
            out = out[:, 1:]
        assert (out[:, 0] == 3).all()  # the text request: index 3 on every row
        written.append(out[:, 1:num])
        done += size
    return np.concatenate(written, axis=1)


@HUNYUAN
@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_steps_give_transformers_rows(peer, backend: str, path: str, data: st.DataObject) -> None:
    if path == "torch" and backend == "numba":
        pytest.skip("the torch path does not use the host backend")
    family = peer.family("vllm")
    prompt = data.draw(prompts(family, max_images=3, max_side=4), label="prompt")
    length = len(prompt.input_ids)
    sizes = st.integers(1, max(1, length))
    chunks: list[int] = []
    while sum(chunks) < length:
        chunks.append(min(data.draw(sizes, label="chunk"), length - sum(chunks)))
    chunks += [1] * data.draw(st.integers(1, 3), label="decodes")
    table = PositionTable(4, num_dims=family.num_dims, backend=backend, max_position=1 << 20)
    table.add(0, family, text(4))
    table.add(2, family, prompt.input_ids, **prompt.kwargs())
    expected = expected_positions(peer, prompt, sum(chunks))
    np.testing.assert_array_equal(run_steps(table, path, 2, chunks), expected, strict=True)
    assert table.delta(2) == expected[0, -1] - (sum(chunks) - 1)
    # decode() of the next index
    last = np.array([sum(chunks) + 1])  # seq_lens: the next index, sum(chunks)
    out = np.zeros((family.num_dims, 1), dtype=np.int64)
    assert table.decode(out, np.array([2]), last) == 1
    np.testing.assert_array_equal(out[:, 0], expected[:, -1] + 1)


def wide_prompt(family: HunYuanVL):
    """A prompt with an image of merged grid 1 x 3 (4 columns with the newline): width and height differ."""
    return build_prompt(family, [text(3), Image(2, 6), text(2)])


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
@pytest.mark.parametrize("path", PATHS)
def test_a_table_ignoring_the_reversal_fails_the_comparison(peer, path: str) -> None:
    """Negative control: the family's rows read without the reversal (or without the index rows
    before them) differ from transformers', so the comparison above can fail."""
    family = peer.family("vllm")
    prompt = wide_prompt(family)
    length = len(prompt.input_ids)
    expected = expected_positions(peer, prompt, length + 2)

    @dataclasses.dataclass(eq=False, repr=False, kw_only=True)
    class Unreversed(HunYuanVL):
        @property
        def segment_rows(self) -> SegmentRows:
            return SegmentRows(self.num_dims - 3)

    wrong = Unreversed(**{f.name: getattr(family, f.name) for f in dataclasses.fields(family)})
    for fam, same in ((family, True), (wrong, False)):
        table = PositionTable(4, num_dims=4)
        table.add(0, fam, text(4))
        table.add(2, fam, prompt.input_ids, **prompt.kwargs())
        got = run_steps(table, path, 2, [length, 1, 1])
        assert np.array_equal(got, expected) is same


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
def test_the_triton_step_gives_the_rows(peer) -> None:
    """fill_ragged's Triton kernel on a tiny case: compiled on a CUDA GPU (scripts/gpu_check.sh runs this
    module), under Triton's interpreter without one."""
    pytest.importorskip("triton")
    import torch

    on = "cuda" if torch.cuda.is_available() else "cpu"
    family = peer.family("vllm")
    prompt = wide_prompt(family)
    length = len(prompt.input_ids)
    table = PositionTable(4, num_dims=4, device=on)
    table.add(2, family, prompt.input_ids, **prompt.kwargs())
    table.add(3, family, prompt.input_ids, **prompt.kwargs())
    out = torch.full((4, length + 4), -1, dtype=torch.int64, device=on)
    device = table._steps.mirror(out.device)
    # slot 2: its whole prompt from column 1; slot 3: two tokens past its prompt
    slots, starts = torch.tensor([2, 3], device=on), torch.tensor([1, length + 1, length + 3], device=on)
    computed = torch.tensor([0, 0, 0, length], dtype=torch.int64, device=on)
    device.fill_ragged(out, slots, starts, computed, backend="triton")
    table.check()
    expected = expected_positions(peer, prompt, length + 2)
    got = out.cpu().numpy()
    assert (got[:, 0] == -1).all() and (got[:, -1] == -1).all()
    np.testing.assert_array_equal(got[:, 1 : length + 1], expected[:, :length])
    np.testing.assert_array_equal(got[:, length + 1 : length + 3], expected[:, length:])


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
def test_add_positions_takes_the_family_rows(peer) -> None:
    family = peer.family("vllm")
    prompt = wide_prompt(family)
    positions, delta = family.positions(prompt.input_ids, **prompt.kwargs())
    table = PositionTable(4, num_dims=4)
    with pytest.raises(MRopeError, match="its first add\\(\\) fixes: add\\(\\) a request first"):
        table.add_positions(1, positions, delta)
    table.add(0, family, prompt.input_ids, **prompt.kwargs())
    table.add_positions(1, positions, delta)
    length = positions.shape[1]
    outs = []
    for slot in (0, 1):
        out = np.zeros((4, length + 1), dtype=np.int64)
        table.fill(out, np.array([slot]), np.array([0]), np.array([length + 1]))
        outs.append(out)
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[0][:, :length], positions)
    shifted = positions.copy()
    shifted[0, 1:3] = shifted[0, 2:0:-1]  # two index entries swapped
    with pytest.raises(MRopeError, match="the index rows must hold each token's index"):
        table.add_positions(2, shifted, delta)
    with pytest.raises(MRopeError, match="positions must have shape \\(4, L\\)"):
        table.add_positions(2, positions[1:], delta)


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
def test_rows_that_are_not_the_table_s_are_refused(peer) -> None:
    import torch

    hunyuan = peer.family("vllm")
    qwen = engine_family("qwen2_vl")
    prompt = wide_prompt(hunyuan)
    four = PositionTable(2, num_dims=4)
    with pytest.raises(
        MRopeError, match=r"qwen2_vl gives 3 rows of positions \(t, h, w\), this table holds 4"
    ):
        four.add(0, qwen, text(5))
    three = PositionTable(2)
    with pytest.raises(
        MRopeError,
        match=r"hunyuan_vl gives 4 rows of positions \(index, w, h, t\), this table holds 3: create it "
        r"with PositionTable\(\.\.\., num_dims=4\)",
    ):
        three.add(0, hunyuan, prompt.input_ids, **prompt.kwargs())
    # a 3-row HunYuan-VL reverses the rendered rows: not in a table of (t, h, w) requests
    three_rows = peer_setup("hunyuan_vl-3rows").family("vllm")
    three.add(0, qwen, text(5))
    with pytest.raises(MRopeError, match=r"the rows \(w, h, t\), this table's requests the rows \(t, h, w\)"):
        three.add(1, three_rows, prompt.input_ids, **prompt.kwargs())
    four.add(0, hunyuan, prompt.input_ids, **prompt.kwargs())
    slots, nc, ns = np.array([0]), np.array([0]), np.array([3])
    with pytest.raises(MRopeError, match=r"out must be a \(4, n\) int64 array .*got shape \(3, 5\)"):
        four.fill(np.zeros((3, 5), dtype=np.int64), slots, nc, ns)
    with pytest.raises(MRopeError, match=r"out must be a \(3, n\) int64 array .*got shape \(4, 5\)"):
        three.fill(np.zeros((4, 5), dtype=np.int64), slots, nc, ns)
    with pytest.raises(MRopeError, match=r"out must be a \(4, n\) torch.int64 tensor .*got \(3, 5\)"):
        four.fill(torch.zeros((3, 5), dtype=torch.int64), *map(torch.from_numpy, (slots, nc, ns)), 3)
    with pytest.raises(MRopeError, match="out has elements sharing memory"):
        four.fill(as_strided(np.zeros(20, dtype=np.int64), (4, 5), (8, 8)), slots, nc, ns)


def test_the_engines_refuse_hunyuan_vl_by_its_rows() -> None:
    from mrope.integrations.vllm.features import unsupported_reason

    config = {
        "model_type": "hunyuan_vl",
        "image_token_id": 120120,
        "vision_config": {"spatial_merge_size": 2},
        "text_config": {"rope_parameters": {"mrope_section": [16, 16, 16, 16]}},
    }
    reason = unsupported_reason(mrope.from_config(config))
    assert "mrope's vLLM integration takes only the 3 rows (t, h, w)" in reason
    assert "PositionTable(..., num_dims=4)" in reason
