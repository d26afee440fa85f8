"""PositionTable.fill_ragged (vLLM Model Runner V2's ``prepare_positions`` layout) against ``fill``: the
host path (numpy arrays and CPU tensors), the device path's Triton kernel (under Triton's interpreter
on CPU tensors where no GPU exists, see conftest.py; compiled on a GPU) and its torch fallback, bad
input, CUDA graph capture, and a compile of the kernel for sm_90 that needs no GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import CONFIGS, family
from support.peers import require
from support.sm90 import compile_for_sm90
from support.snapshot import unchanged
from support.strategies import Image, Video, build_prompt, prompts, text

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
INDEX_DTYPES = [np.int64, np.int32]  # vLLM's idx_mapping, query_start_loc and counts are int32
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _random_table(
    data: st.DataObject, *, device="cpu", dtype=np.int64, backend="auto", max_position=None
) -> tuple[PositionTable, dict[int, int]]:
    """A table of random requests (images, videos, text) and their prompt lengths by slot; a tiny pool,
    removals and re-admissions move the requests' entries and grow the pool."""
    max_requests = data.draw(st.integers(1, 4), label="max_requests")
    table = PositionTable(
        max_requests,
        device=device,
        pool_capacity=data.draw(st.integers(1, 12), label="pool capacity"),
        dtype=dtype,
        backend=backend,
        max_position=max_position,
    )
    lengths: dict[int, int] = {}
    for round in range(2):
        for slot in range(max_requests):
            if slot in lengths and data.draw(st.booleans(), label=f"remove {slot}"):
                table.remove(slot)
                del lengths[slot]
            admit = data.draw(st.integers(0, 3), label=f"admit {slot}") > 0
            if slot not in lengths and (admit or (round and not lengths and slot == max_requests - 1)):
                fam = family(data.draw(st.sampled_from(sorted(CONFIGS)), label="family"))
                p = data.draw(
                    prompts(fam, max_images=2, max_videos=1, max_text=6, max_side=3, max_frames=3),
                    label="prompt",
                )
                table.add(slot, fam, p.input_ids, **p.kwargs())
                lengths[slot] = len(p.input_ids)
    return table, lengths


def _random_step(
    data: st.DataObject, table: PositionTable, lengths: dict[int, int]
) -> tuple[list[int], np.ndarray, np.ndarray, int]:
    """Slots in any order, contiguous queries from a random first column (and noise past them), and a
    per-slot count of computed tokens: prefill chunks ending anywhere (inside images and frames), decode
    and speculative tokens past the prompt, empty queries. Returns the columns ``out`` needs too."""
    order = data.draw(st.permutations(sorted(lengths)), label="order")
    some = data.draw(st.integers(0, 3), label="some slots only") == 0
    slots = order[: data.draw(st.integers(0, len(order)), label="scheduled")] if some else order
    extra_slots = data.draw(st.integers(0, 2), label="slot_num_computed entries past the slots")
    noise = st.integers(-3, 999)  # entries of slots not scheduled are never read
    computed = np.array(
        data.draw(st.lists(noise, min_size=table.max_requests + extra_slots, max_size=table.max_requests + 4))
    )
    counts = []
    for slot in slots:
        computed[slot] = data.draw(st.integers(0, lengths[slot] + 3), label=f"computed {slot}")
        left = max(lengths[slot] - int(computed[slot]), 0)
        counts.append(data.draw(st.integers(0, left + 3), label=f"count {slot}"))
    first = data.draw(st.integers(0, 3), label="first column")
    starts = first + np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    trailing = data.draw(st.lists(noise, max_size=2), label="query_start_loc past the requests")
    columns = int(starts[-1]) + data.draw(st.integers(0, 3), label="columns past the queries")
    return slots, np.concatenate([starts, trailing]).astype(np.int64), computed, columns


def _expected(table: PositionTable, slots, starts, computed, columns: int) -> np.ndarray:
    """``fill`` of the same step: its columns at ``starts[0]``, -7 elsewhere."""
    out = np.full((3, columns), -7, dtype=table.dtype)
    n = len(slots)
    rows = np.array(slots, dtype=np.int64)
    num = table.fill(out[:, int(starts[0]) :], rows, computed[rows], np.diff(starts[: n + 1]))
    assert num == starts[n] - starts[0]
    return out


def _as(values, dtype, kind: str, device: str = "cpu"):
    array = np.asarray(values, dtype=dtype)
    return array if kind == "numpy" else torch.from_numpy(array).to(device)


@settings(max_examples=30)
@given(data=st.data())
def test_host_path_matches_fill(backend: str, data: st.DataObject) -> None:
    """numpy arrays and CPU tensors, int32 and int64, int64 and float32 tables: the columns of the queries
    equal ``fill``'s, and no other column is written."""
    dtype = data.draw(st.sampled_from([np.int64, np.int64, np.float32]), label="table dtype")
    table, lengths = _random_table(data, dtype=dtype, backend="numpy" if dtype == np.float32 else backend)
    for _ in range(data.draw(st.integers(1, 3), label="steps")):
        slots, starts, computed, columns = _random_step(data, table, lengths)
        expected = _expected(table, slots, starts, computed, columns)
        kind = data.draw(st.sampled_from(["numpy", "torch"]), label="array kind")
        index = data.draw(st.sampled_from(INDEX_DTYPES), label="index dtype")
        out = np.full((3, columns), -7, dtype=table.dtype)
        target = out if kind == "numpy" else torch.from_numpy(out)  # a CPU tensor: written through a view
        args = (_as(a, index, kind) for a in (slots, starts, computed))
        assert table.fill_ragged(target, *args) is None
        np.testing.assert_array_equal(out, expected, err_msg=f"slots {slots}, starts {starts}")


CASES = {
    "never added": (([1], [0, 1], [0, 0, 0, 0]), r"slots\[0\] = 1 holds no request"),
    "out of range": (([0, 4], [0, 1, 2], [0] * 6), r"slots\[1\] = 4 is out of range"),
    "negative slot": (([-1], [0, 1], [0] * 4), r"slots\[0\] = -1 is out of range"),
    "no computed entry": (([0, 2], [0, 1, 2], [0, 0]), r"slots\[1\] = 2 has no entry in slot_num_computed"),
    "decreasing": (([0, 2], [0, 3, 2], [0] * 4), "query_start_loc decreases at request 1: 3 then 2"),
    "short": (([0, 2], [0, 3], [0] * 4), r"len\(slots\) \+ 1 = 3 entries"),
    "negative first column": (([0], [-1, 2], [0] * 4), r"query_start_loc\[0\] = -1"),
    "negative computed": (([0, 2], [0, 1, 2], [-2, 0, 0, 0]), r"num_computed\[0\] = -2"),
    "beyond max_position": (([2], [0, 6], [0, 0, 995, 0]), "beyond max_position 1000"),
    "out too small": (([2], [30, 45], [0, 0, 7, 0]), "out has 10 columns, the step needs 15"),
    "float starts": (([0], [0.0, 1.0], [0] * 4), "must hold integers"),
}


@pytest.fixture
def table(backend: str) -> PositionTable:
    fam = family("qwen2_vl")
    t = PositionTable(4, max_position=1000, backend=backend)
    p = build_prompt(fam, [text(3), Image(2, 2), text(2)])
    t.add(0, fam, p.input_ids, **p.kwargs())
    t.add(2, fam, text(7))
    return t


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", INDEX_DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_host_bad_input_writes_nothing(table: PositionTable, case: str, dtype, kind: str) -> None:
    (slots, starts, computed), match = CASES[case]
    args = [np.array(a) for a in (slots, starts, computed)]
    args = [_as(a, dtype, kind) if a.dtype.kind == "i" else a for a in args]
    out = np.full((3, 48), -7, dtype=np.int64)
    target = out[:, :40] if kind == "numpy" else torch.from_numpy(out)[:, :40]
    unchanged(table, lambda: table.fill_ragged(target, *args), match)
    assert (out == -7).all()


def test_host_bad_out(table: PositionTable) -> None:
    step = np.array([2]), np.array([0, 3]), np.array([0, 0, 4, 0])
    unchanged(table, lambda: table.fill_ragged(np.zeros((3, 8), dtype=np.float32), *step), "out must be")
    unchanged(table, lambda: table.fill_ragged(np.zeros(8, dtype=np.int64), *step), "out must be")
    unchanged(table, lambda: table.fill_ragged([[0] * 8] * 3, *step), "out must be a numpy array")


# -- the device path: the Triton kernel, and the torch fallback -------------------------------------


def _device_fill(table: PositionTable, out: torch.Tensor, *args, backend: str) -> None:
    """The device path's step: on a GPU through the public method too (which takes the kernel there)."""
    if backend == "triton":
        require("triton")
    if out.is_cuda and backend == "triton":
        table.fill_ragged(out, *args)
    else:  # CPU tensors take the host path in fill_ragged: call the device mirror's step
        table._steps.mirror(out.device).fill_ragged(out, *args, backend=backend)


@settings(max_examples=12)
@given(data=st.data())
def test_triton_kernel_matches_fill(data: st.DataObject) -> None:
    """The kernel (interpreted on CPU tensors without a GPU) writes ``fill``'s positions in the queries'
    columns, touches no other column, and counts no error; int32 and int64 inputs."""
    max_position = data.draw(st.sampled_from([None, 10**6]), label="max_position")
    table, lengths = _random_table(data, device=torch.device(DEVICE), max_position=max_position)
    for _ in range(data.draw(st.integers(1, 2), label="steps")):
        slots, starts, computed, columns = _random_step(data, table, lengths)
        expected = _expected(table, slots, starts, computed, columns)
        index = data.draw(st.sampled_from(INDEX_DTYPES), label="index dtype")
        out = torch.full((3, columns), -7, dtype=torch.int64, device=DEVICE)
        args = [_as(a, index, "torch", DEVICE) for a in (slots, starts, computed)]
        _device_fill(table, out, *args, backend="triton")
        np.testing.assert_array_equal(out.cpu().numpy(), expected, err_msg=f"slots {slots}, starts {starts}")
        table.check()


@settings(max_examples=20)
@given(data=st.data())
def test_torch_fallback_matches_fill(data: st.DataObject) -> None:
    """The fallback (float32 tables, or no Triton): ``fill``'s positions in the queries' columns, 0 in
    every other column of ``out``; no host synchronization."""
    dtype = data.draw(st.sampled_from([np.int64, np.float32]), label="table dtype")
    table, lengths = _random_table(data, device=torch.device("cpu"), dtype=dtype, max_position=10**6)
    slots, starts, computed, columns = _random_step(data, table, lengths)
    expected = _expected(table, slots, starts, computed, columns)
    n = len(slots)
    outside = np.ones(columns, dtype=bool)
    outside[starts[0] : starts[n]] = False
    expected[:, outside] = 0
    index = data.draw(st.sampled_from(INDEX_DTYPES), label="index dtype")
    out = torch.full((3, columns), -7, dtype=torch.float32 if dtype == np.float32 else torch.int64)
    args = [_as(a, index, "torch") for a in (slots, starts, computed)]
    device = table._steps.mirror()
    device.fill_ragged(out, *args, backend="torch")  # warm-up: the step scratch grows outside the mode
    out.fill_(-7)
    with _NoSync():
        device.fill_ragged(out, *args, backend="torch")
    np.testing.assert_array_equal(out.numpy(), expected)
    table.check()


class _NoSync(TorchDispatchMode):
    """Fails on the ops that read device values on the host (see test_device.py for the full check)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        assert func not in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default), func
        return func(*args, **(kwargs or {}))


def _bad_table(max_position: int | None = 200) -> PositionTable:
    q25 = family("qwen2_5_vl")
    p = build_prompt(q25, [text(3), Video(3, 2, 2), text(2), Image(1, 3), text(1)], [1.3])
    table = PositionTable(4, device=torch.device(DEVICE), max_position=max_position)
    table.add(1, q25, p.input_ids, **p.kwargs())
    table.add(0, q25, text(6))
    return table


# request 0 (slot 1, a prefill chunk) and the last one (slot 0, decode) are good; between them, one bad
# request of 3 tokens: (its slot, the slot's computed count; None: slot_num_computed ends before it)
BAD = {
    "free slot": (2, 0),
    # with an entry of slot_num_computed, in a table without max_position: only the clamp of the info
    # column (to a free one) makes it bad
    "slot out of range": (6, 0),
    "negative slot": (-1, 0),
    "no computed entry": (3, None),
    "negative computed": (3, -4),
    "beyond max_position": (3, 198),
}


@pytest.mark.parametrize("backend", ["triton", "torch"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_device_bad_request_writes_zeros_and_is_counted(case: str, backend: str) -> None:
    """The bad request's columns get 0, the others ``fill``'s positions; one error is counted, and
    ``check()`` raises it once."""
    if backend == "torch" and DEVICE == "cuda":
        pytest.skip("the torch fallback is checked on the CPU")
    table = _bad_table(None if case == "slot out of range" else 200)
    table.add(3, family("qwen2_5_vl"), text(4))
    bad_slot, bad_computed = BAD[case]
    computed = np.array([7, 2, 0, 0, 0, 0, 0, 0])  # slot 0 decodes (prompt of 6), slot 1 from index 2
    if bad_computed is None:
        computed = computed[:bad_slot]
    elif 0 <= bad_slot < computed.shape[0]:
        computed[bad_slot] = bad_computed
    starts = np.array([1, 9, 12, 13])
    expected = _expected(table, [1], starts[:2], computed, 14)
    expected[:, 12:13] = _expected(table, [0], starts[2:], computed, 14)[:, 12:13]
    expected[:, 9:12] = 0
    if backend == "torch":
        expected[:, [0, 13]] = 0  # the fallback writes every column of out
    out = torch.full((3, 14), -7, dtype=torch.int64, device=DEVICE)
    args = [torch.tensor(a, device=DEVICE) for a in ([1, bad_slot, 0], starts, computed)]
    _device_fill(table, out, *args, backend=backend)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    with pytest.raises(MRopeError, match="^1 request"):
        table.check()
    table.check()  # counted once


def test_triton_kernel_columns_outside_out() -> None:
    """A decreasing ``query_start_loc`` and queries running past ``out`` are counted, and nothing is
    written outside ``out``'s columns."""
    table = _bad_table()
    computed = torch.tensor([7, 0, 0, 0], device=DEVICE)
    storage = torch.full((3, 12), -7, dtype=torch.int64, device=DEVICE)
    out = storage[:, :8]
    # slot 1's query is columns 2 ... 9, past out's 8; slot 0's query ends before it starts
    _device_fill(
        table,
        out,
        torch.tensor([1, 0], device=DEVICE),
        torch.tensor([2, 10, 9], device=DEVICE),
        computed,
        backend="triton",
    )
    got = storage.cpu().numpy()
    assert (got[:, :2] == -7).all() and (got[:, 2:8] == 0).all() and (got[:, 8:] == -7).all()
    with pytest.raises(MRopeError, match="^2 request"):
        table.check()


def test_device_path_shape_errors_raise() -> None:
    table = _bad_table()
    device = table._steps.mirror()
    out = torch.zeros((3, 8), dtype=torch.int64, device=DEVICE)
    slots, starts, computed = (torch.tensor(a, device=DEVICE) for a in ([1], [0, 2], [0, 0]))
    for backend in ("triton", "torch"):
        with pytest.raises(MRopeError, match="entries"):
            device.fill_ragged(out, slots, starts[:1], computed, backend=backend)
        with pytest.raises(MRopeError, match="out must be"):
            device.fill_ragged(out.float(), slots, starts, computed, backend=backend)
        with pytest.raises(MRopeError, match="integer"):
            device.fill_ragged(out, slots.float(), starts, computed, backend=backend)
        with pytest.raises(MRopeError, match="2-D|1-D"):
            device.fill_ragged(out, slots[None], starts, computed, backend=backend)
    with pytest.raises(MRopeError, match="backend"):
        device.fill_ragged(out, slots, starts, computed, backend="cuda")
    table.check()


# -- a GPU ------------------------------------------------------------------------------------------


class _Ops(TorchDispatchMode):
    """Records every torch op: the Triton path makes none (one kernel launch)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


@cuda
def test_cuda_kernel_no_sync_and_graph_replay() -> None:
    """The compiled kernel equals ``fill``; it runs no torch op and no synchronization; captured in a CUDA
    graph, a replay follows new values written in place into the same input tensors."""
    require("triton")
    table = _bad_table()
    glm = family("glm4v")
    p = build_prompt(glm, [text(2), Video(2, 2, 1), text(3)])
    table.add(3, glm, p.input_ids, **p.kwargs())
    table.reserve(tokens=64)
    table.freeze()
    columns = 64
    steps = [
        ([1, 3, 0], [1, 31, 40, 43, 0], [7, 0, 0, 0]),  # a prefill chunk, a whole prompt, decode
        ([0, 3, 1], [0, 4, 9, 40, 7], [6, 6, 0, 5]),  # speculative tokens, a chunk into a frame, a chunk
    ]
    slots, starts, computed = (torch.tensor(a, dtype=torch.int32, device="cuda") for a in steps[0])
    out = torch.full((3, columns), -7, dtype=torch.int64, device="cuda")
    table.fill_ragged(out, slots, starts, computed)  # compiles
    torch.cuda.synchronize()
    expected = _expected(table, *(np.array(a) for a in steps[0]), columns)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    recorder = _Ops()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with recorder:
            table.fill_ragged(out, slots, starts, computed)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert recorder.ops == []
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        table.fill_ragged(out, slots, starts, computed)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table.fill_ragged(out, slots, starts, computed)
    for step in steps:
        for tensor, values in zip((slots, starts, computed), step, strict=True):
            tensor.copy_(torch.tensor(values, dtype=torch.int32))
        out.fill_(-7)
        graph.replay()
        torch.cuda.synchronize()
        expected = _expected(table, *(np.array(a) for a in step), columns)
        np.testing.assert_array_equal(out.cpu().numpy(), expected, err_msg=str(step))
    table.check()


# -- compiling the kernel for sm_90 without a GPU ---------------------------------------------------

_COMPILE = """
from mrope.serving import triton_step

kernel = triton_step._fill_ragged_kernel
for index in ("i32", "i64"):
    signature = {name: "i32" for name in kernel.arg_names}
    signature.update(out_ptr="*i64", info_ptr="*i64", data_ptr="*i64")
    signature.update(errors_ptr="*i64", max_index="i64", HAS_MAX_POSITION="constexpr", BLOCK="constexpr")
    signature.update(slots_ptr="*" + index, query_start_ptr="*" + index, computed_ptr="*" + index)
    signature.update(T_ROW="constexpr", H_ROW="constexpr", W_ROW="constexpr", LEAD="constexpr")
    # the rows of a (t, h, w) table, and of HunYuan-VL's four (an index row, then w, h, t)
    for rows in ((0, 1, 2, 0), (3, 2, 1, 1)):
        for has_max in (True, False):
            constants = {"HAS_MAX_POSITION": has_max, "BLOCK": triton_step.BLOCK}
            constants.update(zip(("T_ROW", "H_ROW", "W_ROW", "LEAD"), rows))
            source = ASTSource(kernel, signature, constants)
            options = {"num_warps": triton_step.NUM_WARPS}
            compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
            assert compiled.asm["cubin"], "no cubin"
            print("compiled", index, rows, has_max, len(compiled.asm["cubin"]))
"""


def test_kernel_compiles_for_sm90(tmp_path) -> None:
    """Triton's compiler down to a cubin for an H100/H200 target (its bundled ptxas): catches what the
    interpreter does not (types, loop-carried values, unsupported constructs). Skipped where Triton's
    NVIDIA compile machinery is missing."""
    require("triton")
    output = compile_for_sm90(_COMPILE, tmp_path)
    assert output.count("compiled") == 8, output
