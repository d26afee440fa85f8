"""PositionTable.fill and decode (the compiled and the numpy step, and the torch path on the CPU)
against the plain reference, over random sequences of engine steps."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import CONFIGS, OMNI, Live, family, reference, register
from support.strategies import Image, Video, build_prompt, prompts, text

CAPACITY = 400  # columns of the step buffer; steps are kept below it
INDEX_DTYPES = [np.int64, np.int32]  # vLLM's counts are int32 numpy arrays


class Tables:
    """Several tables fed the same requests (``register`` takes it for one table)."""

    def __init__(self, *tables: PositionTable) -> None:
        self.tables = tables

    def add(self, *args, **kwargs) -> None:
        for table in self.tables:
            table.add(*args, **kwargs)

    def add_positions(self, *args) -> None:
        for table in self.tables:
            table.add_positions(*args)

    def remove(self, row: int) -> None:
        for table in self.tables:
            table.remove(row)

    def __contains__(self, row: int) -> bool:
        return all(row in table for table in self.tables)


def _prompt(data: st.DataObject, fam) -> tuple[list[int], dict]:
    if data.draw(st.integers(0, 3), label="text only") == 0:
        ids = data.draw(st.lists(st.integers(0, 1000), min_size=1, max_size=30), label="text ids")
        return ids, {}
    if fam.model_type in OMNI:  # images, videos, audio; every video with its audio, or none
        audio_in_video = data.draw(st.booleans(), label="use_audio_in_video")
        p = data.draw(
            prompts(
                fam,
                max_images=1,
                max_videos=1,
                max_audios=1,
                max_text=4,
                max_side=3,
                max_frames=5,
                max_image_frames=2,
                max_audio_seqlen=150,
                use_audio_in_video=audio_in_video,
            ),
            label="omni prompt",
        )
        return p.input_ids, p.kwargs()
    p = data.draw(
        prompts(fam, max_images=2, max_videos=1, max_text=8, max_side=3, max_frames=3), label="prompt"
    )
    return p.input_ids, p.kwargs()


@settings(max_examples=30)
@given(data=st.data())
def test_random_engine_steps(backend: str, data: st.DataObject) -> None:
    """Every column of every step equals the request's ``family.positions()``, then ``index + delta``,
    on the table's backend and on a numpy twin, from int64 and int32 inputs; ``decode`` of the requests
    past their prompt too; the torch path writes the same; nothing past the step's columns is touched."""
    compat = data.draw(st.sampled_from(["vllm", "transformers"]), label="compat")
    names = data.draw(
        st.lists(st.sampled_from(sorted(CONFIGS) + list(OMNI)), min_size=1, max_size=4, unique=True),
        label="fams",
    )
    fams = [family(n, compat) for n in names]
    num_rows = data.draw(st.integers(1, 5), label="max_requests")
    # Qwen3-Omni needs a float32 table; the others go in either
    floats = "qwen3_omni_moe" in names or data.draw(st.integers(0, 4), label="float table") == 0
    dtype = np.float32 if floats else np.int64
    # a tiny pool forces compaction and growth
    capacity = data.draw(st.integers(1, 12), label="pool capacity")
    table = PositionTable(
        num_rows,
        device=torch.device("cpu"),
        pool_capacity=capacity,
        dtype=dtype,
        backend="numpy" if floats else backend,  # float32 tables take the numpy step
    )
    assert table.backend == ("numpy" if floats else backend)
    tables = Tables(table, PositionTable(num_rows, pool_capacity=capacity, dtype=dtype, backend="numpy"))
    live: dict[int, Live] = {}
    buffer = np.full((3, CAPACITY + 1), -7, dtype=dtype)
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        for row in range(num_rows):
            if row not in live and data.draw(st.booleans(), label=f"admit {row}"):
                fam = data.draw(st.sampled_from(fams), label="family")
                ids, kwargs = _prompt(data, fam)
                live[row] = register(
                    tables, row, fam, ids, kwargs, data.draw(st.booleans(), label="precomputed")
                )
        for row in sorted(live):
            action = data.draw(
                st.sampled_from(["run", "run", "run", "finish", "preempt"]), label=f"row {row}"
            )
            if action == "finish":
                tables.remove(row)
                del live[row]
            elif action == "preempt":  # re-add with prompt + generated tokens, recomputed from index 0
                req = live.pop(row)
                tables.remove(row)
                generated = max(0, req.computed - len(req.ids))
                ids = req.ids + data.draw(
                    st.lists(st.integers(0, 1000), min_size=generated, max_size=generated)
                )
                live[row] = register(tables, row, req.fam, ids, req.kwargs, data.draw(st.booleans()))
        order = data.draw(st.permutations(sorted(live)), label="order")
        rows = order[: data.draw(st.integers(0, len(order)), label="scheduled")]
        counts = []
        for row in rows:
            req = live[row]
            left = len(req.ids) - req.computed
            # a prefill chunk (possibly running into decode), or decode / speculative tokens
            counts.append(
                data.draw(st.integers(0, left + 3) if left > 0 else st.integers(0, 4), label="count")
            )
        expected = [
            reference(live[r].positions, live[r].delta, live[r].computed, c, dtype)
            for r, c in zip(rows, counts, strict=True)
        ]
        expected = np.concatenate([np.zeros((3, 0), dtype=dtype), *expected], axis=1)
        num = expected.shape[1]
        assert num <= CAPACITY
        rows_np, nc, ns = (
            np.array(values, dtype=data.draw(st.sampled_from(INDEX_DTYPES), label=f"{name} dtype"))
            for name, values in (
                ("rows", rows),
                ("num_computed", [live[r].computed for r in rows]),
                ("num_scheduled", counts),
            )
        )
        for each in tables.tables:  # the backend's step, then the numpy twin's
            buffer.fill(-7)
            assert each.fill(buffer[:, :CAPACITY], rows_np, nc, ns) == num
            np.testing.assert_array_equal(
                buffer[:, :num], expected, err_msg=f"{each.backend}: rows {rows}, nc {nc}, ns {ns}"
            )
            assert (buffer[:, num:] == -7).all()
        # decode: the requests past their prompt, their next index (seq_len - 1)
        past = [r for r in rows if live[r].computed >= len(live[r].ids)]
        seq_lens = np.array([live[r].computed + 1 for r in past], dtype=ns.dtype)
        decoded = [reference(live[r].positions, live[r].delta, live[r].computed, 1, dtype) for r in past]
        for each in tables.tables:
            buffer.fill(-7)
            assert each.decode(buffer, np.array(past, dtype=rows_np.dtype), seq_lens) == len(past)
            np.testing.assert_array_equal(
                buffer[:, : len(past)], np.concatenate([np.zeros((3, 0), dtype=dtype), *decoded], axis=1)
            )
            assert (buffer[:, len(past) :] == -7).all()
        # torch path: int32 inputs, a fixed capacity past the real tokens (zeros there)
        out = torch.full((3, num + 5), -7, dtype=torch.float32 if floats else torch.int64)
        extra = data.draw(st.integers(0, 3), label="padding columns")
        as32 = (torch.from_numpy(a).to(torch.int32) for a in (rows_np, nc, ns))
        assert table.fill(out, *as32, num_tokens=num + extra) == num + extra
        np.testing.assert_array_equal(out[:, :num].numpy(), expected)
        assert (out[:, num : num + extra] == 0).all() and (out[:, num + extra :] == -7).all()
        table.check()
        for r, c in zip(rows, counts, strict=True):
            live[r].computed += c


def test_decode_numpy_and_torch(backend: str) -> None:
    """``decode(out, rows, seq_lens)``: ``seq_lens - 1 + delta`` on all rows, numpy and torch alike."""
    fam = family("qwen2_5_vl")
    p = build_prompt(fam, [text(3), Video(4, 2, 2), text(2), Image(2, 3)], [2.5])
    table = PositionTable(4, backend=backend)
    table.add(2, fam, p.input_ids, **p.kwargs())
    table.add(0, fam, text(5))
    positions, delta = fam.positions(p.input_ids, **p.kwargs())
    seq_lens = np.array([len(p.input_ids) + 1, 9])
    expected = np.array([len(p.input_ids) + delta, 8])
    out = np.zeros((3, 2), dtype=np.int64)
    assert table.decode(out, np.array([2, 0]), seq_lens) == 2
    np.testing.assert_array_equal(out, np.broadcast_to(expected, (3, 2)))
    out_t = torch.zeros((3, 3), dtype=torch.int64)
    assert table.decode(out_t, torch.tensor([2, 0]), torch.from_numpy(seq_lens)) == 2
    np.testing.assert_array_equal(out_t[:, :2].numpy(), out)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("compat", ["vllm", "transformers"])
@settings(max_examples=10)
@given(data=st.data())
def test_add_positions_keeps_only_segments(name: str, compat: str, data: st.DataObject) -> None:
    """Precomputed positions are stored as segments (at most twice as many as ``add`` finds from the
    prompt: a token where a frame meets text may start its own segment), and render the same."""
    fam = family(name, compat)
    p = data.draw(prompts(fam, max_side=4, max_frames=4))
    positions, delta = fam.positions(p.input_ids, **p.kwargs())
    a, b = PositionTable(1), PositionTable(1)
    a.add(0, fam, p.input_ids, **p.kwargs())
    b.add_positions(0, positions, delta)
    length = len(p.input_ids)
    out_a, out_b = np.empty((3, length + 3), dtype=np.int64), np.empty((3, length + 3), dtype=np.int64)
    for t, out in ((a, out_a), (b, out_b)):
        t.fill(out, np.array([0]), np.array([0]), np.array([length + 3]))
    np.testing.assert_array_equal(out_a, out_b)
    np.testing.assert_array_equal(out_a[:, :length], positions)
    assert b.state_nbytes(0) <= 2 * a.state_nbytes(0)


@st.composite
def any_positions(draw: st.DrawFn) -> np.ndarray:
    """Integer positions (3, L) of any shape: frames whose h and w start on different bases, a prompt cut
    inside a frame row, and tokens with no rule at all."""
    parts = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["frame", "text", "tokens"]))
        if kind == "frame":
            height, width = draw(st.integers(1, 4)), draw(st.integers(1, 5))
            t0, h0, w0 = (draw(st.integers(0, 40)) for _ in range(3))
            row, column = np.divmod(np.arange(height * width), width)
            parts.append(np.stack([np.full(height * width, t0), h0 + row, w0 + column]))
        elif kind == "text":
            first = draw(st.integers(0, 40))
            parts.append(np.arange(first, first + draw(st.integers(1, 6)))[None].repeat(3, 0))
        else:
            parts.append(
                np.array(draw(st.lists(st.tuples(*[st.integers(0, 40)] * 3), min_size=1, max_size=4))).T
            )
    positions = np.concatenate(parts, axis=1)
    return positions[:, draw(st.integers(0, positions.shape[1] - 1)) :]


@pytest.mark.parametrize("path", ["numpy", "numba", "torch"])
@settings(max_examples=60, deadline=None)
@given(positions=any_positions(), gap=st.integers(0, 3), chunk=st.integers(1, 7))
def test_add_positions_holds_any_integer_positions(path: str, positions, gap: int, chunk: int) -> None:
    """Integer positions the rule does not make (an engine's own, for a model mrope has no family for)
    are held as segments too: chunked steps give them back, then ``index + delta``."""
    length = positions.shape[1]
    delta = int(positions.max()) + 1 - length + gap
    table = PositionTable(4, backend="numpy" if path == "numpy" else "auto")
    table.add(0, family("qwen2_vl"), text(5))
    table.add_positions(2, positions, delta)
    total = length + 3
    got = np.zeros((3, total), dtype=np.int64)
    for start in range(0, total, chunk):
        count = min(chunk, total - start)
        out = np.zeros((3, count + 2), dtype=np.int64)
        slots, computed, scheduled = np.array([0, 2]), np.array([1, start]), np.array([2, count])
        if path == "torch":
            as_tensor = torch.from_numpy
            target = as_tensor(out)
            table.fill(target, as_tensor(slots), as_tensor(computed), as_tensor(scheduled), count + 2)
        else:
            table.fill(out, slots, computed, scheduled)
        got[:, start : start + count] = out[:, 2:]
    np.testing.assert_array_equal(got[:, :length], positions)
    np.testing.assert_array_equal(got[:, length:], np.arange(length, total) + delta + np.zeros((3, 1), int))


def test_the_triton_step_gives_any_integer_positions() -> None:
    """fill_ragged's Triton kernel (compiled on a CUDA GPU, interpreted without one) on positions held by
    origins before index 0: h above w at the prompt's first token, a frame with w above h, a lone token."""
    pytest.importorskip("triton")
    on = "cuda" if torch.cuda.is_available() else "cpu"
    rows, columns = np.divmod(np.arange(6), 3)
    positions = np.concatenate(
        [
            np.array([[3, 3], [9, 10], [2, 2]]),  # h above w from index 0
            np.stack([np.full(6, 5), 4 + rows, 8 + columns]),  # w above h: one segment per row
            np.array([[1], [7], [2]]),
            np.arange(12, 15)[None].repeat(3, 0),
        ],
        axis=1,
    )
    length, delta = positions.shape[1], 3
    table = PositionTable(4, device=on)
    table.add_positions(1, positions, delta)
    out = torch.full((3, length + 4), -1, dtype=torch.int64, device=on)
    slots, starts = torch.tensor([1], device=on), torch.tensor([1, length + 3], device=on)
    computed = torch.tensor([0, 0], dtype=torch.int64, device=on)
    table._steps.mirror(out.device).fill_ragged(out, slots, starts, computed, backend="triton")
    table.check()
    got = out.cpu().numpy()
    np.testing.assert_array_equal(got[:, 1 : length + 1], positions)
    np.testing.assert_array_equal(
        got[:, length + 1 : length + 3], np.arange(length, length + 2) + delta + np.zeros((3, 1), int)
    )


def test_state_does_not_grow_with_prompt_length() -> None:
    """A long text prompt and a long image hold a handful of segments, not one entry per token."""
    fam = family("qwen2_vl")
    table = PositionTable(3)
    table.add(0, fam, text(10))
    table.add(1, fam, text(100_000))
    big = build_prompt(fam, [text(50), Image(64, 64), text(50)])
    table.add(2, fam, big.input_ids, **big.kwargs())
    assert table.state_nbytes(0) == table.state_nbytes(1)
    assert table.state_nbytes(2) < 300 < 3 * 8 * len(big.input_ids)


def test_pool_compaction_keeps_requests(backend: str) -> None:
    """Filling a small pool with adds and removes compacts it; positions stay right."""
    fam = family("qwen3_vl")
    p = build_prompt(fam, [text(2), Video(3, 2, 2, ((1,), (2, 3), ())), text(4)])
    positions, delta = fam.positions(p.input_ids, **p.kwargs())
    table = PositionTable(3, pool_capacity=4, backend=backend)
    for i in range(21):
        table.add(i % 3, fam, p.input_ids, **p.kwargs())
        if i % 3 == 2:
            for r in range(3):
                table.remove(r)
    table.add(0, fam, p.input_ids, **p.kwargs())
    out = np.empty((3, positions.shape[1] + 1), dtype=np.int64)
    table.fill(out, np.array([0]), np.array([0]), np.array([out.shape[1]]))
    np.testing.assert_array_equal(out[:, :-1], positions)
    assert out[0, -1] == positions.shape[1] + delta


def test_backends(numba_env) -> None:
    """``backend="auto"`` takes numba where it imports, unless ``MROPE_NUMBA=0``; float32 tables take
    numpy; a bad or impossible choice raises."""
    numba = importlib.util.find_spec("numba") is not None
    numba_env(None)
    assert PositionTable(1).backend == ("numba" if numba else "numpy")
    assert PositionTable(1, backend="numpy").backend == "numpy"
    assert PositionTable(1, dtype=np.float32).backend == "numpy"
    numba_env("0")
    assert PositionTable(1).backend == "numpy"
    for bad, match in (("cuda", "backend must be one of"), (None, "backend must be one of")):
        with pytest.raises(MRopeError, match=match):
            PositionTable(1, backend=bad)
    with pytest.raises(MRopeError, match="int64 tables"):
        PositionTable(1, dtype=np.float32, backend="numba")


def test_without_numba() -> None:
    """Where numba does not import, ``"auto"`` is numpy and ``"numba"`` raises."""
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "import numpy as np, mrope\n"
        "assert mrope.PositionTable(1).backend == 'numpy'\n"
        "try:\n"
        "    mrope.PositionTable(1, backend='numba')\n"
        "except mrope.MRopeError as err:\n"
        "    assert 'needs numba' in str(err), err\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("dtype", INDEX_DTYPES)
def test_index_arrays_are_read_as_they_are(backend: str, dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """int64 and int32 numpy rows and counts (vLLM's) are read without conversion, strided ``out`` too."""
    from mrope.serving import host_step, steps

    fam = family("qwen2_vl")
    p = build_prompt(fam, [text(3), Image(4, 6), text(2)])
    positions, delta = fam.positions(p.input_ids, **p.kwargs())
    table = PositionTable(4, backend=backend)
    table.add(3, fam, p.input_ids, **p.kwargs())
    table.add(1, fam, text(5))

    def refuse(x, name):
        raise AssertionError(f"{name} was converted")

    for module in (steps, host_step):  # the step's choice and the host step
        monkeypatch.setattr(module, "as_index", refuse)
    buffer = np.full((3, 64), -7, dtype=np.int64)
    rows, nc, ns = (np.array(v, dtype=dtype) for v in ([3, 1], [4, 5], [len(p.input_ids), 2]))
    num = len(p.input_ids) + 2
    assert table.fill(buffer[:, :40], rows, nc, ns) == num
    short = fam.positions(text(5))
    expected = np.concatenate(
        [reference(positions, delta, 4, len(p.input_ids)), reference(*short, 5, 2)], axis=1
    )
    np.testing.assert_array_equal(buffer[:, :num], expected)
    assert (buffer[:, num:] == -7).all()
    assert table.decode(buffer[:, :40], rows, nc + ns) == 2
    np.testing.assert_array_equal(buffer[:, 0], expected[:, -3])


def _video_prompt():
    fam = family("qwen3_vl")
    return fam, build_prompt(fam, [text(3), Video(6, 2, 2), text(2)])


def _check_all(table: PositionTable, live: dict[int, tuple[np.ndarray, int]]) -> None:
    """Every live request's positions (prompt and 2 past it), numpy and torch paths."""
    for slot, (positions, delta) in live.items():
        length = positions.shape[1]
        expected = reference(positions, delta, 0, length + 2)
        out = np.empty((3, length + 2), dtype=np.int64)
        table.fill(out, np.array([slot]), np.array([0]), np.array([length + 2]))
        np.testing.assert_array_equal(out, expected)
        out_t = torch.empty((3, length + 2), dtype=torch.int64)
        table.fill(
            out_t, torch.tensor([slot]), torch.tensor([0]), torch.tensor([length + 2]), num_tokens=length + 2
        )
        np.testing.assert_array_equal(out_t.numpy(), expected)
    table.check()


def _counting_compactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from mrope.serving import _pool

    compactions: list[int] = []
    compact = _pool.Pool.compact

    def counted(self: _pool.Pool, *args: Any, **kwargs: Any) -> None:
        compactions.append(1)
        compact(self, *args, **kwargs)

    monkeypatch.setattr(_pool.Pool, "compact", counted)
    return compactions


@pytest.mark.parametrize("replace", [True, False], ids=["replace", "remove-add"])
def test_steady_admission_stops_compacting(
    backend: str, replace: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admissions of mixed sizes in any order (vLLM V2 replaces a slot's request, SGLang removes it
    first): each slot keeps the room of its largest request, so the pool moves ``top`` and compacts
    only while some slot meets a larger request than before (at most ``1 + log2(entries)`` times per
    slot), never once every slot has held the largest: no admission pays a stall in steady state, and
    the pool stays within a constant factor of the slots' largest requests. (Before reservations, a
    large request after a small one in the same slot went to ``top`` every time: a compaction of the
    whole pool every few admissions.)"""
    from mrope.serving import _pool

    fam = family("qwen3_vl")
    prompts = [build_prompt(fam, [text(3), Video(frames, 2, 2), text(2)]) for frames in (1, 3, 6, 11)]
    positions = [fam.positions(p.input_ids, **p.kwargs()) for p in prompts]
    probe = PositionTable(1)
    probe.add(0, fam, prompts[-1].input_ids, **prompts[-1].kwargs())
    largest = probe.state_nbytes(0) // (6 * 8)  # entries of the largest request
    live_count = 24
    table = PositionTable(
        live_count, pool_capacity=2 * live_count, backend=backend, device=torch.device("cpu")
    )
    pool = table._state.pool
    compactions = _counting_compactions(monkeypatch)
    rng = np.random.default_rng(0)
    live: dict[int, tuple[np.ndarray, int]] = {}
    warm = 0  # admissions until every slot has held the largest request
    held_largest: set[int] = set()
    for admission in range(1500):
        slot = int(rng.integers(live_count))
        which = int(rng.integers(len(prompts)))
        if replace:
            table.add(slot, fam, prompts[which].input_ids, replace=True, **prompts[which].kwargs())
        else:
            if slot in table:
                table.remove(slot)
            table.add(slot, fam, prompts[which].input_ids, **prompts[which].kwargs())
        live[slot] = positions[which]
        if which == len(prompts) - 1:
            held_largest.add(slot)
        if len(held_largest) == live_count and not warm:
            warm = admission + 1
            top, compacted = pool.top, len(compactions)
    assert 0 < warm < 1000, warm
    assert (pool.top, len(compactions)) == (top, compacted), "steady admissions moved top or compacted"
    # each slot's reservation doubled at most log2(largest) + 1 times; each compaction follows 3x the
    # reserved entries added at top
    assert compacted <= live_count * (1 + int(np.log2(largest))), compacted
    assert table.pool_capacity <= _pool.HEADROOM * 2 * (2 * live_count * largest), table.pool_capacity
    _check_all(table, live)


def test_readmission_reuses_the_slot_entries(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot's next request that fits the slot's reservation takes it: steady remove + add of
    same-sized or smaller requests neither moves the pool's top nor compacts, and every step stays
    exact (the decode tail rewritten in full over the old request's entries); a request the size of
    the slot's largest fits again after a smaller one; a larger one goes to the top."""
    fam = family("qwen3_vl")
    large, small = (build_prompt(fam, [text(3), Video(frames, 2, 2), text(2)]) for frames in (6, 3))
    positions = {id(p): fam.positions(p.input_ids, **p.kwargs()) for p in (large, small)}
    live_count = 4
    table = PositionTable(live_count, backend=backend, device=torch.device("cpu"))
    for slot in range(live_count):
        table.add(slot, fam, large.input_ids, **large.kwargs())
    pool = table._state.pool
    top = pool.top
    compactions = _counting_compactions(monkeypatch)
    live = dict.fromkeys(range(live_count), positions[id(large)])
    for cycle in range(24):  # large over large, then small over large in the last pass
        slot, prompt = cycle % live_count, large if cycle < 20 else small
        table.remove(slot)
        table.add(slot, fam, prompt.input_ids, **prompt.kwargs())
        live[slot] = positions[id(prompt)]
        _check_all(table, live)
    assert (pool.top, compactions) == (top, [])
    table.remove(0)  # the small request's now, in the large one's reservation: a large one fits it
    table.add(0, fam, large.input_ids, **large.kwargs())
    live[0] = positions[id(large)]
    assert (pool.top, compactions) == (top, [])
    larger = build_prompt(fam, [text(3), Video(16, 2, 2), text(2)])  # beyond the reservation: at top
    table.add(0, fam, larger.input_ids, replace=True, **larger.kwargs())
    live[0] = fam.positions(larger.input_ids, **larger.kwargs())
    assert pool.top > top or compactions
    _check_all(table, live)
    table.check()


def test_reserve_and_freeze(backend: str) -> None:
    """``reserve`` sizes the pool and the device scratch now; after ``freeze`` the device tensors keep
    their addresses (compaction runs in place), and what would grow them raises, changing nothing."""
    from support.snapshot import unchanged

    fam, p = _video_prompt()
    expected = fam.positions(p.input_ids, **p.kwargs())
    probe = PositionTable(1)
    probe.add(0, fam, p.input_ids, **p.kwargs())
    need = probe.state_nbytes(0) // (6 * 8)  # entries per request
    table = PositionTable(4, pool_capacity=need, backend=backend, device=torch.device("cpu"))
    table.add(0, fam, p.input_ids, **p.kwargs())  # fits: no growth
    for bad in ({"segments": -1}, {"segments": 2.5}, {"tokens": True}, {"tokens": "8"}):
        unchanged(table, lambda bad=bad: table.reserve(**bad), "must be an int")
    table.reserve(segments=3 * need, tokens=64)
    assert table.pool_capacity >= 3 * need and not table.frozen
    table.freeze()
    assert table.frozen
    device = table._steps.device
    addresses = (device.data.data_ptr(), device.ramp.data_ptr())
    live = {0: expected}
    for cycle in range(30):  # two live requests at most: compaction in place
        slot = 1 + cycle % 2
        if slot in table:
            table.remove(slot)
            del live[slot]
        table.add(slot, fam, p.input_ids, **p.kwargs())
        live[slot] = expected
        _check_all(table, live)
    out = torch.zeros((3, 64), dtype=torch.int64)
    table.fill(out, torch.tensor([0]), torch.tensor([0]), torch.tensor([3]), num_tokens=64)
    assert (device.data.data_ptr(), device.ramp.data_ptr()) == addresses
    assert len(live) == 3  # the pool's 3 * need slots are all live: a fourth request needs growth
    unchanged(table, lambda: table.add(3, fam, p.input_ids, **p.kwargs()), "frozen")
    unchanged(table, lambda: table.reserve(segments=100 * need), "frozen")
    unchanged(table, lambda: table.reserve(tokens=65), "frozen")
    unchanged(
        table,
        lambda: table.fill(
            torch.zeros((3, 65), dtype=torch.int64),
            torch.tensor([0]),
            torch.tensor([0]),
            torch.tensor([3]),
            num_tokens=65,
        ),
        "frozen",
    )
    assert (device.data.data_ptr(), device.ramp.data_ptr()) == addresses
