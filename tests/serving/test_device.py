"""The device path: no host synchronization (checked on the CPU under a dispatch mode), and, where a GPU
is lent, under ``torch.cuda.set_sync_debug_mode("error")`` and in a CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mrope.serving import PositionTable
from mrope.serving.device import DeviceTable
from support.engine import churn, family
from support.strategies import Image, Video, build_prompt, text

aten = torch.ops.aten
SYNCING = {
    aten._local_scalar_dense.default,
    aten.item.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.nonzero_static.default,
}


class NoSync(TorchDispatchMode):
    """Fails on every op that reads device values on the host or has a data-dependent shape."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SYNCING:
            raise AssertionError(f"host synchronization: {func}")
        if func.overloadpacket in (aten.index, aten.index_put, aten.index_put_) and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or []) if i is not None
        ):
            raise AssertionError(f"boolean-mask indexing: {func}")
        if func.overloadpacket is aten._to_copy and "device" in kwargs:
            raise AssertionError(f"copy across devices: {func} {kwargs}")
        if func.overloadpacket is aten.copy_ and args[0].device != args[1].device:
            raise AssertionError(f"copy across devices: {func}")
        return func(*args, **kwargs)


def _no_host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``numpy()`` and ``tolist()`` bypass the dispatcher: forbid them during the step."""
    for name in ("numpy", "tolist"):
        monkeypatch.setattr(
            torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"Tensor.{_n}() on the step")
        )


def _table(device: str | torch.device) -> tuple[PositionTable, list[np.ndarray], list[int]]:
    q25 = family("qwen2_5_vl")
    glm = family("glm4v")
    prompts = [
        build_prompt(q25, [text(3), Video(3, 2, 2), text(2), Image(1, 3), text(1)], [1.3]),
        build_prompt(glm, [text(2), Video(2, 2, 1), Image(2, 2), text(3)]),
    ]
    table = PositionTable(4, device=device)
    table.add(1, q25, prompts[0].input_ids, **prompts[0].kwargs())
    table.add(3, glm, prompts[1].input_ids, **prompts[1].kwargs())
    table.add(0, q25, text(6))
    return table, prompts


STEP = ([1, 3, 0], [2, 0, 6], [30, 8, 3])  # a chunk past the prompt, a chunk, speculative tokens


def _expected(table: PositionTable, num: int) -> np.ndarray:
    out = np.zeros((3, num), dtype=np.int64)
    n = table.fill(out, *(np.array(a) for a in STEP))
    return out[:, :n]


def test_dispatch_mode_catches_syncs() -> None:
    """The mode used below does fail on the operations it forbids (so the tests below can fail)."""
    x = torch.arange(4)
    for bad in (
        lambda: x.sum().item(),
        lambda: x.nonzero(),
        lambda: x[x > 1],
        lambda: int(x[0]),
        lambda: x.to("meta"),
    ):
        with NoSync(), pytest.raises(AssertionError):
            bad()


def test_device_fill_and_decode_do_not_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    table, _ = _table(torch.device("cpu"))
    num = sum(STEP[2])
    expected = _expected(table, num)
    rows, nc, ns = (torch.tensor(a) for a in STEP)
    out = torch.full((3, num + 4), -7, dtype=torch.int64)
    seq = torch.tensor([60, 50, 12])  # every last index past its prompt
    decoded = torch.zeros((3, 3), dtype=torch.int64)
    table.fill(out, rows, nc, ns, num_tokens=num)  # warm-up: scratch allocated outside the mode
    _no_host_reads(monkeypatch)
    with NoSync():
        assert table.fill(out, rows, nc, ns, num_tokens=num + 2) == num + 2
        assert table.decode(decoded, rows, seq) == 3
    monkeypatch.undo()
    np.testing.assert_array_equal(out[:, :num].numpy(), expected)
    assert (out[:, num : num + 2] == 0).all() and (out[:, num + 2 :] == -7).all()
    decoded_np = np.zeros((3, 3), dtype=np.int64)
    table.decode(decoded_np, np.array(STEP[0]), seq.numpy())
    np.testing.assert_array_equal(decoded.numpy(), decoded_np)
    table.check()


def test_meta_device_needs_no_values() -> None:
    """On the meta device (shapes only) any data-dependent step would fail: the step has none. (A table
    refuses the meta device, whose check() could never read its count: the mirror is made here.)"""
    table, _ = _table("cpu")
    table._steps.device = DeviceTable(table._state, "meta")
    num = sum(STEP[2])
    out = torch.empty((3, num), dtype=torch.int64, device="meta")
    rows, nc, ns = (torch.tensor(a, device="meta") for a in STEP)
    assert table.fill(out, rows, nc, ns, num_tokens=num) == num
    assert table.decode(out, rows, torch.empty(3, dtype=torch.int64, device="meta")) == 3


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_cuda_no_sync_and_equal_to_numpy() -> None:
    table, _ = _table("cuda")
    num = sum(STEP[2])
    expected = _expected(table, num)
    rows, nc, ns = (torch.tensor(a, device="cuda") for a in STEP)
    out = torch.zeros((3, num + 1), dtype=torch.int64, device="cuda")
    table.fill(out[:, :num], rows, nc, ns, num_tokens=num)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        table.fill(out[:, :num], rows, nc, ns, num_tokens=num)
        table.decode(out, rows, torch.tensor([60, 50, 12], device="cuda"))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    table.fill(out[:, :num], rows, nc, ns, num_tokens=num)
    np.testing.assert_array_equal(out[:, :num].cpu().numpy(), expected)
    table.check()


@cuda
def test_cuda_graph_replay_equals_eager() -> None:
    table, _ = _table("cuda")
    capacity = 64
    rows, nc, ns = (torch.tensor(a, device="cuda") for a in STEP)
    out = torch.zeros((3, capacity), dtype=torch.int64, device="cuda")
    eager = torch.zeros_like(out)
    table.fill(eager, rows, nc, ns, num_tokens=capacity)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        table.fill(out, rows, nc, ns, num_tokens=capacity)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table.fill(out, rows, nc, ns, num_tokens=capacity)
    out.zero_()
    graph.replay()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    # new step values in the same input tensors: replay follows them
    nc.copy_(torch.tensor([5, 1, 9], device="cuda"))
    graph.replay()
    table.fill(eager, rows, nc, ns, num_tokens=capacity)
    torch.testing.assert_close(out, eager, rtol=0, atol=0)


def test_float_table_device_step_does_not_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 table (Qwen3-Omni, fractional positions, audio in video) on the device path: no sync,
    equal to the numpy path and to ``family.positions()`` then ``float32(index) + delta``."""
    q3 = family("qwen3_omni_moe")
    vs, aus, vid, aud = 151652, 151647, 151656, 151646
    seqlen = int(np.argmax(q3.audio_tokens(np.arange(400)) == 30))
    ids = [5, vs, aus] + [vid] * 12 + [aud] * 30 + [aus + 1, vs + 1, 7, 8]
    kwargs = {
        "video_grid_thw": [[3, 4, 4]],
        "second_per_grid_ts": [1 / 3],
        "audio_seqlens": [seqlen],
        "use_audio_in_video": True,
    }
    positions, delta = q3.positions(ids, **kwargs)
    table = PositionTable(3, dtype=np.float32)
    table.add(1, q3, ids, **kwargs)
    table.add(0, q3, text(4))
    step = ([1, 0], [3, 2], [len(ids), 3])
    num = sum(step[2])
    expected = np.zeros((3, num), dtype=np.float32)
    assert table.fill(expected, *(np.array(a) for a in step)) == num
    np.testing.assert_array_equal(expected[:, : len(ids) - 3], positions[:, 3:])
    past = np.float32(np.arange(len(ids), len(ids) + 3, dtype=np.float32) + np.float32(delta))
    np.testing.assert_array_equal(expected[0, len(ids) - 3 : len(ids)], past)
    rows, nc, ns = (torch.tensor(a) for a in step)
    out = torch.full((3, num + 2), -7, dtype=torch.float32)
    decoded = torch.zeros((3, 2), dtype=torch.float32)
    table.fill(out, rows, nc, ns, num_tokens=num)  # warm-up
    _no_host_reads(monkeypatch)
    with NoSync():
        assert table.fill(out, rows, nc, ns, num_tokens=num + 1) == num + 1
        assert table.decode(decoded, rows, torch.tensor([len(ids) + 5, 9])) == 2
    monkeypatch.undo()
    np.testing.assert_array_equal(out[:, :num].numpy(), expected)
    assert (out[:, num] == 0).all() and (out[:, num + 1 :] == -7).all()
    decoded_np = np.zeros((3, 2), dtype=np.float32)
    table.decode(decoded_np, np.array([1, 0]), np.array([len(ids) + 5, 9]))
    np.testing.assert_array_equal(decoded.numpy(), decoded_np)
    table.check()


@cuda
def test_cuda_graph_after_freeze_follows_admissions() -> None:
    """``reserve`` then ``freeze`` before capture: later admissions and removals (compaction in place)
    keep the device tensors the graph reads, so replay writes the new requests' positions; an add that
    would grow the pool raises instead of reallocating under the graph."""
    from mrope import MRopeError

    table, prompts = _table("cuda")
    capacity = 64
    table.reserve(segments=4 * table.pool_capacity, tokens=capacity)
    table.freeze()
    rows, nc, ns = (torch.tensor(a, device="cuda") for a in STEP)
    out = torch.zeros((3, capacity), dtype=torch.int64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        table.fill(out, rows, nc, ns, num_tokens=capacity)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table.fill(out, rows, nc, ns, num_tokens=capacity)
    q25 = family("qwen2_5_vl")
    for _ in range(20):  # churn: the pool compacts in place
        table.remove(0)
        table.add(0, q25, prompts[0].input_ids, **prompts[0].kwargs())
        table.add(2, q25, text(9))
        table.remove(2)
    graph.replay()
    eager = torch.zeros_like(out)
    table.fill(eager, rows, nc, ns, num_tokens=capacity)
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    big = build_prompt(q25, [text(2), *[Image(1, 2), text(1)] * table.pool_capacity])  # > the pool
    with pytest.raises(MRopeError, match="frozen"):
        table.add(2, q25, big.input_ids, **big.kwargs())
    assert 2 not in table
    table.check()


@cuda
def test_cuda_admission_does_not_sync() -> None:
    """On CUDA an admission's copy is asynchronous (pinned staging): adds and removes pass
    ``set_sync_debug_mode("error")``, and the steps after them equal the host path's, also when the
    host state changes again before the copies have run (the ring holds their snapshot)."""
    table, prompts = _table("cuda")
    q25 = family("qwen2_5_vl")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(10):
            table.remove(0)
            table.add(0, q25, prompts[0].input_ids, **prompts[0].kwargs())
            table.add(2, q25, text(9))
            table.remove(2)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert table._steps.device._staging.buffer.is_pinned()
    churn(table, "cuda", 60)
