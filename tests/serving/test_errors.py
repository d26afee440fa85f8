"""Bad input to PositionTable raises MRopeError and changes nothing: not the table, not ``out``. The
int64 table's tests run on both steps (the ``backend`` fixture): the compiled one refuses exactly what
the numpy one refuses, with the same message."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import family
from support.peers import require
from support.snapshot import unchanged
from support.strategies import Image, Video, build_prompt, text


@pytest.fixture
def table(backend: str) -> PositionTable:
    fam = family("qwen2_vl")
    t = PositionTable(4, max_position=1000, backend=backend)
    assert t.backend == backend
    p = build_prompt(fam, [text(3), Image(2, 2), text(2)])
    t.add(0, fam, p.input_ids, **p.kwargs())
    t.add(2, fam, text(7))
    return t


FILL_CASES = {
    "never added": (([1], [0], [1]), r"slots\[0\] = 1 holds no request"),
    "out of range": (([0, 4], [0, 0], [1, 1]), r"slots\[1\] = 4 is out of range"),
    "negative row": (([-1], [8], [1]), r"slots\[0\] = -1 is out of range"),
    "negative scheduled": (([0, 2], [0, 7], [3, -1]), r"num_scheduled\[1\] = -1"),
    "negative computed": (([0], [-2], [1]), r"num_computed\[0\] = -2"),
    "lengths": (([0, 2], [0], [1, 1]), "one length"),
    "beyond max_position": (([2], [995], [6]), "beyond max_position 1000"),
    "decode beyond max_position": (([2, 0], [1500, 20], [1, 1]), "beyond max_position 1000"),
    "float counts": (([0], [0.0], [1]), "must hold integers"),
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(FILL_CASES))
def test_fill_bad_input_writes_nothing(table: PositionTable, case: str, dtype) -> None:
    """int64 and int32 inputs (float counts stay float)."""
    (rows, nc, ns), match = FILL_CASES[case]
    rows, nc, ns = (a.astype(dtype) if a.dtype.kind == "i" else a for a in map(np.array, (rows, nc, ns)))
    out = np.full((3, 64), -7, dtype=np.int64)
    unchanged(table, lambda: table.fill(out[:, :40], rows, nc, ns), match)
    assert (out == -7).all()


DECODE_CASES = {
    "never added": (([1], [1]), r"slots\[0\] = 1 holds no request"),
    "out of range": (([0, 4], [20, 8]), r"slots\[1\] = 4 is out of range"),
    "zero length": (([2, 0], [8, 0]), r"seq_lens\[1\] = 0 \(slot 0\)"),
    "beyond max_position": (([2, 0], [1500, 20]), "beyond max_position 1000"),
    "lengths": (([0, 2], [20]), "one length"),
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(DECODE_CASES))
def test_decode_bad_input_writes_nothing(table: PositionTable, case: str, dtype) -> None:
    (rows, seq_lens), match = DECODE_CASES[case]
    out = np.full((3, 64), -7, dtype=np.int64)
    call = lambda: table.decode(out[:, :40], np.array(rows, dtype=dtype), np.array(seq_lens, dtype=dtype))  # noqa: E731
    unchanged(table, call, match)
    assert (out == -7).all()
    unchanged(
        table, lambda: table.decode(out[:, :1], np.array([2, 0]), np.array([8, 20])), "out has 1 columns"
    )


HUGE = (1 << 63) - 1  # counts whose sums wrap int64


@pytest.mark.parametrize("path", ["host", "device"])
@pytest.mark.parametrize("floats", [False, True])
def test_bounds_of_indices(backend: str, path: str, floats: bool) -> None:
    """Sequence indices below the table's bound (2**32; float32 tables 2**24) whose positions stay below
    the positions' bound (2**31; float32 tables 2**24: a text request's index is its position) are
    served, on fill and decode, host and device paths alike; an index at the bound, or counts whose sum
    wraps int64, is refused (host: raised, nothing written; device: counted, zeros written)."""
    bound = (1 << 24) if floats else (1 << 32)
    dtype = np.float32 if floats else np.int64
    table = PositionTable(4, dtype=dtype, backend="numpy" if floats else backend)
    table.add(2, family("qwen2_vl"), text(7))
    last = bound - 1
    top = (1 << 24 if floats else 1 << 31) - 1  # the largest position served
    good = [([2], [top], [1]), ([2, 2], [0, top - 3], [1, 4]), ([2], [top + 1], [0])]
    bad = [
        ([2], [bound], [1]),
        ([2, 2], [0, last - 3], [1, 5]),
        ([2], [HUGE], [1]),
        ([2], [HUGE], [2]),
        ([2, 2], [1, HUGE - 1], [2, 2]),
        ([2], [5], [HUGE]),
    ]
    if path == "host":
        out = np.full((3, 8), -7, dtype=dtype)
        for rows, nc, ns in good:
            num = sum(ns)
            assert table.fill(out, np.array(rows), np.array(nc), np.array(ns)) == num
            np.testing.assert_array_equal(
                out[0, :num], np.concatenate([np.arange(c, c + k) for c, k in zip(nc, ns, strict=True)])
            )
        assert table.decode(out, np.array([2]), np.array([top + 1])) == 1 and out[0, 0] == top
        out.fill(-7)
        for rows, nc, ns in bad:
            unchanged(
                table,
                lambda rows=rows, nc=nc, ns=ns: table.fill(out, np.array(rows), np.array(nc), np.array(ns)),
                rf"sequence index \d+ is beyond {last}",
            )
        for seq_len in (bound + 1, HUGE, -HUGE - 1):
            unchanged(
                table,
                lambda s=seq_len: table.decode(out, np.array([2]), np.array([s])),
                rf"sequence index {seq_len - 1} \(seq_lens\[0\] = {seq_len}\) is beyond"
                rf"|seq_lens\[0\] = {seq_len} \(slot 2\)",
            )
        assert (out == -7).all()
        return
    out = torch.full((3, 8), -7, dtype=torch.float32 if floats else torch.int64)
    for rows, nc, ns in good:
        num = sum(ns)
        assert table.fill(out, *(torch.tensor(a) for a in (rows, nc, ns)), num_tokens=num) == num
        expected = np.concatenate([np.arange(c, c + k) for c, k in zip(nc, ns, strict=True)])
        np.testing.assert_array_equal(out[0, :num].numpy(), expected.astype(dtype))
    assert table.decode(out, torch.tensor([2]), torch.tensor([top + 1])) == 1 and out[0, 0] == top
    table.check()
    for rows, nc, ns in bad:
        out.fill_(-7)
        num = min(sum(ns), 8)  # the refused request's columns (the last ones) get zeros
        table.fill(out, *(torch.tensor(a) for a in (rows, nc, ns)), num_tokens=num)
        with pytest.raises(MRopeError, match="1 request"):
            table.check()
        assert (out[:, num - min(ns[-1], 8) : num] == 0).all() and (out[:, num:] == -7).all()
    for seq_len in (bound + 1, HUGE, -HUGE - 1):
        table.decode(out, torch.tensor([2]), torch.tensor([seq_len]))
        with pytest.raises(MRopeError, match="1 request"):
            table.check()
        assert (out[:, 0] == 0).all()


def test_empty_steps(table: PositionTable) -> None:
    """A step without tokens writes nothing; every request's last index is still checked (its
    position against max_position too), as on every path."""
    out = np.full((3, 8), -7, dtype=np.int64)
    assert table.fill(out, np.array([2]), np.array([500]), np.array([0])) == 0
    assert table.fill(out, np.array([], dtype=np.int64), np.array([]), np.array([])) == 0
    unchanged(
        table, lambda: table.fill(out, np.array([2]), np.array([5000]), np.array([0])), "beyond max_position"
    )
    unchanged(table, lambda: table.fill(out, np.array([1]), np.array([0]), np.array([0])), "holds no request")
    assert (out == -7).all()


@pytest.mark.parametrize(
    ("out", "match"),
    [
        (np.zeros((3, 2), dtype=np.int64), "out has 2 columns, the step needs 3"),
        (np.zeros((3, 8), dtype=np.int32), "int64"),
        (np.zeros((2, 8), dtype=np.int64), r"\(3, n\)"),
        (np.zeros(8, dtype=np.int64), r"\(3, n\)"),
        ([[0] * 8] * 3, "numpy array"),
    ],
)
def test_fill_bad_out(table: PositionTable, out, match: str) -> None:
    before = np.array(out, copy=True)
    unchanged(table, lambda: table.fill(out, np.array([0, 2]), np.array([0, 7]), np.array([2, 1])), match)
    np.testing.assert_array_equal(np.asarray(out), before)


def test_num_tokens_must_be_n(table: PositionTable) -> None:
    out = np.full((3, 8), -7, dtype=np.int64)
    args = np.array([0, 2]), np.array([0, 7]), np.array([2, 1])
    for bad in (2, 4, -1):
        unchanged(table, lambda bad=bad: table.fill(out, *args, num_tokens=bad), "num_tokens")
    assert (out == -7).all()
    assert table.fill(out, *args, num_tokens=3) == 3


def test_read_only_out(table: PositionTable) -> None:
    out = np.zeros((3, 8), dtype=np.int64)
    out.flags.writeable = False
    unchanged(table, lambda: table.fill(out, np.array([2]), np.array([7]), np.array([1])), "read-only")


def test_rows_twice_removed_unknown(table: PositionTable) -> None:
    fam = family("qwen2_vl")
    unchanged(table, lambda: table.add(0, fam, text(4)), "slot 0 already holds a request")
    unchanged(table, lambda: table.add(4, fam, text(4)), r"slot 4 is out of range \[0, 4\)")
    unchanged(table, lambda: table.remove(1), "slot 1 holds no request")
    table.remove(2)
    unchanged(table, lambda: table.remove(2), "slot 2 holds no request")
    out = np.full((3, 4), -7, dtype=np.int64)
    unchanged(table, lambda: table.fill(out, np.array([2]), np.array([7]), np.array([1])), "holds no request")
    assert (out == -7).all()


def test_bad_prompts_change_nothing(table: PositionTable) -> None:
    q25 = family("qwen2_5_vl")
    p = build_prompt(q25, [text(2), Video(4, 2, 2), text(2)], [1e6])  # unbounded second_per_grid_ts
    unchanged(table, lambda: table.add(1, q25, p.input_ids, **p.kwargs()), "beyond max_position 1000")
    fam = family("qwen2_vl")
    unchanged(
        table, lambda: table.add(1, fam, text(3) + [151655] * 3, image_grid_thw=[[1, 4, 4]]), "placeholder"
    )
    fractional = np.array([[0, 1.5, 2], [0, 5, 2], [0, 1, 9]], dtype=np.float32)  # no rule, float32
    floats = PositionTable(4, max_position=1000, dtype=np.float32)
    unchanged(floats, lambda: floats.add_positions(1, fractional, 7.0), "not text runs and vision frames")
    unchanged(table, lambda: table.add_positions(1, np.zeros((2, 3), dtype=np.int64), 0), r"shape \(3, L\)")
    unchanged(
        table, lambda: table.add_positions(1, np.arange(5)[None].repeat(3, 0), 0.5), "delta must be an int"
    )


def test_device_path_shape_errors_raise_and_value_errors_are_counted(table: PositionTable) -> None:
    """The device path checks shapes on the host; values (free rows, negative counts) cannot be checked
    without a sync: their columns get 0 and ``check()`` raises later."""
    out = torch.full((3, 8), -7, dtype=torch.int64)
    rows, nc, ns = torch.tensor([0, 2]), torch.tensor([0, 7]), torch.tensor([2, 1])
    for bad, match in (
        (lambda: table.fill(out, rows, nc, ns), "num_tokens must be a host int"),
        (lambda: table.fill(out, rows, nc, ns, num_tokens=9), "out has 8 columns"),
        (lambda: table.fill(out.int(), rows, nc, ns, num_tokens=3), "int64"),
        (lambda: table.fill(out, rows, nc[:1], ns, num_tokens=3), "one length"),
        (lambda: table.fill(out, rows.float(), nc, ns, num_tokens=3), "integer"),
        (lambda: table.decode(out, rows, torch.tensor([1])), "one length"),
    ):
        unchanged(table, bad, match)
        assert (out == -7).all()
    table.fill(out, torch.tensor([0, 1, 2]), torch.tensor([0, 0, -1]), torch.tensor([2, 1, 1]), num_tokens=4)
    assert (out[:, 2:4] == 0).all() and (out[:, 4:] == -7).all()
    with pytest.raises(MRopeError, match="2 request"):
        table.check()
    table.check()  # the count was reset


def test_float_tables_and_dtypes() -> None:
    """Qwen3-Omni (float32 positions) needs a float32 table; ``out`` must have the table's dtype; a
    float32 table bounds indices by 2**24; bad dtypes are refused. Failed calls change nothing."""
    q3 = family("qwen3_omni_moe")
    ids = [5, 151652] + [151656] * 12 + [151653, 7]
    kwargs = {"video_grid_thw": [[3, 4, 4]], "second_per_grid_ts": [1 / 3]}
    positions, delta = q3.positions(ids, **kwargs)
    ints = PositionTable(2)
    ints.add(0, family("qwen2_vl"), text(3))
    unchanged(ints, lambda: ints.add(1, q3, ids, **kwargs), "dtype=np.float32")
    unchanged(ints, lambda: ints.add_positions(1, positions, delta), "need a float32 table")
    unchanged(ints, lambda: ints.add(1, family("qwen2_vl"), text(3), audio_seqlens=[9]), "audio_seqlens")
    out32 = np.full((3, 4), -7, dtype=np.float32)
    unchanged(ints, lambda: ints.fill(out32, np.array([0]), np.array([0]), np.array([2])), "int64 array")
    floats = PositionTable(2, dtype="float32", max_position=100)
    floats.add(0, q3, ids, **kwargs)
    assert isinstance(floats.delta(0), float) and floats.delta(0) == delta
    out64 = np.full((3, 4), -7, dtype=np.int64)
    for bad, match in (
        (lambda: floats.fill(out64, np.array([0]), np.array([0]), np.array([2])), "float32 array"),
        (lambda: floats.fill(out32, np.array([0]), np.array([1 << 24]), np.array([1])), "beyond 16777215"),
        (lambda: floats.fill(out32, np.array([0]), np.array([120]), np.array([1])), "max_position 100"),
        (lambda: floats.add_positions(1, positions, "1.5"), "delta must be an int or a float"),
        (lambda: floats.add_positions(1, positions.astype(bool), delta), "must hold integers"),
        (
            lambda: floats.fill(torch.zeros((3, 4)).double(), *(torch.tensor([0]),) * 3, num_tokens=1),
            "float32",
        ),
    ):
        unchanged(floats, bad, match)
    assert (out32 == -7).all() and (out64 == -7).all()
    for dtype in (np.float64, "int32", torch.float16):
        with pytest.raises(MRopeError, match="dtype must be int64"):
            PositionTable(1, dtype=dtype)
    assert PositionTable(1, dtype=torch.float32).dtype == np.float32


@settings(max_examples=60)
@given(data=st.data())
def test_backends_refuse_alike(data: st.DataObject) -> None:
    """On random steps, good or bad (any row, negative counts, indices near the bounds, a short
    ``out``, a wrong ``num_tokens``, int32 or int64), the compiled step returns what the numpy step
    returns, or raises the same error with ``out`` untouched."""
    require("numba")
    fam = family("qwen2_vl")
    p = build_prompt(fam, [text(3), Image(2, 4), text(2)])
    max_position = data.draw(st.sampled_from([None, 12, 40, 1 << 33]), label="max_position")
    tables = [PositionTable(4, max_position=max_position, backend=b) for b in ("numba", "numpy")]
    for t in tables:
        for row, ids in ((0, p.input_ids), (2, text(7))):
            if max_position is None or max_position > 12 or row == 2:
                t.add(row, fam, ids, **(p.kwargs() if row == 0 else {}))
    n = data.draw(st.integers(0, 5), label="requests")
    lengths = [n, n, n]
    if data.draw(st.integers(0, 9), label="mismatch") == 0:
        lengths[data.draw(st.integers(0, 2))] += 1
    near = st.sampled_from([(1 << 32) - 2, (1 << 32) - 1, 1 << 32, (1 << 31) - 1])
    rows = data.draw(st.lists(st.integers(-2, 5), min_size=lengths[0], max_size=lengths[0]), label="rows")
    nc = data.draw(st.lists(st.integers(-2, 20) | near, min_size=lengths[1], max_size=lengths[1]), label="nc")
    ns = data.draw(st.lists(st.integers(-2, 6), min_size=lengths[2], max_size=lengths[2]), label="ns")
    dtype = data.draw(st.sampled_from([np.int64, np.int32]), label="dtype")
    if dtype == np.int32:
        nc = [min(v, (1 << 31) - 1) for v in nc]
    args = [np.array(v, dtype=dtype) for v in (rows, nc, ns)]
    columns = data.draw(st.integers(0, 40), label="out columns")
    num_tokens = data.draw(st.none() | st.integers(-1, 30), label="num_tokens")
    decode = data.draw(st.booleans(), label="decode")
    results = []
    for t in tables:
        out = np.full((3, 48), -7, dtype=np.int64)
        try:
            if decode:
                got = t.decode(out[:, :columns], args[0], args[1])
            else:
                got = t.fill(out[:, :columns], *args, num_tokens=num_tokens)
        except MRopeError as err:
            assert (out == -7).all()
            results.append(("error", str(err)))
        else:
            results.append((got, out.copy()))
    (a, a_out), (b, b_out) = results
    assert a == b
    if a != "error":
        np.testing.assert_array_equal(a_out, b_out)
    else:
        assert a_out == b_out


def test_add_positions_bounds(table: PositionTable) -> None:
    """A delta whose decode positions would meet the prompt's, and positions that are negative, too
    large, or unsigned values that would wrap, are refused."""
    positions, delta = family("qwen2_vl").positions(
        text(3) + [151655] * 4 + text(2), image_grid_thw=[[1, 4, 4]]
    )
    assert delta < 0
    for bad in (delta - 1, delta - 100, -(1 << 40)):
        unchanged(table, lambda bad=bad: table.add_positions(1, positions, bad), "does not fit the positions")
    unchanged(table, lambda: table.add_positions(1, positions, 1 << 40), "does not fit the positions")
    for bad in (positions - 3, positions + (1 << 31)):
        unchanged(table, lambda bad=bad: table.add_positions(1, bad, delta), r"positions must lie in \[0, ")
    wrapping = np.array([[(1 << 64) - 5, (1 << 64) - 4]] * 3, dtype=np.uint64)
    unchanged(table, lambda: table.add_positions(1, wrapping, 0), r"positions must lie in \[0, ")
    floats = PositionTable(2, dtype=np.float32)
    unchanged(floats, lambda: floats.add_positions(1, np.full((3, 2), np.nan, np.float32), 0.0), "finite")
    unchanged(
        floats, lambda: floats.add_positions(1, positions.astype(np.float32), delta - 1.0), "does not fit"
    )
    table.add_positions(1, positions, delta)
    table.remove(1)
    table.add_positions(1, positions, delta + 5)  # a gap after the prompt does not collide


def test_add_positions_errors_name_what_was_given(table: PositionTable) -> None:
    """A bfloat16 or float16 tensor is named as such (read as float32, it was called float32), and a
    bound passed by positions given is blamed on them, not on grids and seconds that were never given."""
    positions, delta = family("qwen2_vl").positions(
        text(3) + [151655] * 4 + text(2), image_grid_thw=[[1, 4, 4]]
    )
    for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16"), (torch.float32, "float32")):
        tensor = torch.from_numpy(positions).to(dtype)
        unchanged(
            table, lambda t=tensor: table.add_positions(1, t, delta), f"positions are {name}: an int64 table"
        )
    unchanged(
        table,
        lambda: table.add_positions(1, torch.from_numpy(positions).bool(), delta),
        "must hold integers, got dtype bool",
    )
    with pytest.raises(MRopeError, match="image_grid_thw must hold integers, got dtype bfloat16"):
        table.add(1, family("qwen2_vl"), text(3), image_grid_thw=torch.ones((1, 3), dtype=torch.bfloat16))
    far = positions + 1000  # past max_position 1000, the table's
    unchanged(
        table,
        lambda: table.add_positions(1, far, delta + 1000),
        rf"slot 1: the positions given reach {far.max()} \(their largest, or the last index \+ delta\), "
        "beyond max_position 1000",
    )
    q25 = family("qwen2_5_vl")
    p = build_prompt(q25, [text(2), Video(4, 2, 2), text(2)], [1e6])
    unchanged(
        table,
        lambda: table.add(1, q25, p.input_ids, **p.kwargs()),
        r"the prompt reaches position \d+ \(its positions follow from its tokens, its items' grids and "
        r"second_per_grid_ts\), beyond max_position 1000",
    )


BAD_SLOTS = [2.5, "a", True, None, np.float64(1.0)]


@pytest.mark.parametrize("bad", BAD_SLOTS, ids=repr)
def test_slots_must_be_ints(table: PositionTable, bad) -> None:
    fam = family("qwen2_vl")
    for call in (
        lambda: bad in table,
        lambda: table.add(bad, fam, text(3)),
        lambda: table.add_positions(bad, *fam.positions(text(3))),
        lambda: table.remove(bad),
        lambda: table.prompt_length(bad),
        lambda: table.delta(bad),
        lambda: table.state_nbytes(bad),
    ):
        unchanged(table, call, "slot must be an int")
    assert 7 not in table and -1 not in table and np.int32(0) in table


def test_add_needs_a_family(table: PositionTable) -> None:
    from support.engine import CONFIGS

    for bad in (CONFIGS["qwen2_vl"], "qwen2_vl", None):
        unchanged(
            table,
            lambda bad=bad: table.add(1, bad, text(3)),
            "family must be a family from mrope.from_config",
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_requests": True}, "max_requests"),
        ({"max_requests": 2.0}, "max_requests"),
        ({"max_requests": 0}, "max_requests"),
        ({"pool_capacity": 2.5}, "pool_capacity"),
        ({"pool_capacity": "8"}, "pool_capacity"),
        ({"pool_capacity": True}, "pool_capacity"),
        ({"pool_capacity": 0}, "pool_capacity"),
        ({"max_position": True}, "max_position"),
        ({"max_position": 10.0}, "max_position"),
        ({"max_position": 0}, "max_position"),
        ({"device": "no-such-device"}, "not a torch device"),
        ({"num_dims": 2**40}, r"num_dims must be an int from 3 to 128 .*, got 1099511627776"),
        ({"num_dims": 129}, "num_dims must be an int from 3 to 128"),
        ({"num_dims": 2}, "num_dims must be an int from 3 to 128"),
        ({"num_dims": True}, "num_dims must be an int from 3 to 128"),
        ({"num_dims": 4.0}, "num_dims must be an int from 3 to 128"),
    ],
)
def test_constructor_refuses(kwargs: dict, match: str) -> None:
    with pytest.raises(MRopeError, match=match):
        PositionTable(**{"max_requests": 2, **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda() -> None:
    with pytest.raises(MRopeError, match="device 'cuda' cannot be used"):
        PositionTable(2, device="cuda")
    with pytest.raises(MRopeError, match="cannot be used"):
        PositionTable(2, device="cuda:0")


def test_device_out_must_not_share_memory(table: PositionTable) -> None:
    """An expanded (or otherwise self-overlapping) ``out`` is refused on the host, before any write."""
    args = torch.tensor([0, 2]), torch.tensor([0, 7]), torch.tensor([2, 1])
    base = torch.full((1, 16), -7, dtype=torch.int64)
    for out in (base[:, :8].expand(3, 8), base.as_strided((3, 8), (1, 1))):
        unchanged(table, lambda out=out: table.fill(out, *args, num_tokens=3), "sharing memory")
        unchanged(table, lambda out=out: table.decode(out, args[0], torch.tensor([10, 9])), "sharing memory")
    assert (base == -7).all()
    wide = torch.zeros((3, 16), dtype=torch.int64)
    assert table.fill(wide[:, ::2], *args, num_tokens=3) == 3  # strided, not overlapping
    table.check()


def test_decode_inside_the_prompt_is_refused_on_every_path(backend: str) -> None:
    """decode() serves indices past the prompt; an index inside it is an error on the numpy, compiled
    and device paths alike (fill() serves it)."""
    fam = family("qwen2_vl")
    table = PositionTable(3, backend=backend)
    table.add(0, fam, text(5))
    table.add(1, fam, text(3) + [151655] * 4 + text(2), image_grid_thw=[[1, 4, 4]])
    out = np.full((3, 4), -7, dtype=np.int64)
    for slots, seq_lens in (([0], [5]), ([1, 0], [10, 4]), ([0, 1], [6, 2])):
        call = lambda s=slots, n=seq_lens: table.decode(out, np.array(s), np.array(n))  # noqa: E731
        unchanged(table, call, "inside its prompt")
        decoded = torch.full((3, 4), -7, dtype=torch.int64)
        table.decode(decoded, torch.tensor(slots), torch.tensor(seq_lens))
        with pytest.raises(MRopeError, match="1 request"):
            table.check()
    assert (out == -7).all()
    assert table.decode(out, np.array([0, 1]), np.array([6, 10])) == 2


def test_device_counts_what_the_host_refuses(table: PositionTable) -> None:
    """``num_tokens`` smaller than the scheduled tokens, and a free slot in a step without tokens, are
    errors on the host path; the device path counts them (``check()`` raises)."""
    out = torch.full((3, 8), -7, dtype=torch.int64)
    step = torch.tensor([0, 2]), torch.tensor([0, 7]), torch.tensor([5, 3])
    table.fill(out, *step, num_tokens=8)
    table.check()
    for num in (6, 7, 0):
        table.fill(out, *step, num_tokens=num)
        with pytest.raises(MRopeError, match="request"):
            table.check()
        host = np.zeros((3, 8), dtype=np.int64)
        unchanged(
            table, lambda n=num, h=host: table.fill(h, *(a.numpy() for a in step), num_tokens=n), "num_tokens"
        )
    table.fill(out, torch.tensor([1]), torch.tensor([0]), torch.tensor([0]), num_tokens=0)
    with pytest.raises(MRopeError, match="1 request"):
        table.check()


def test_the_meta_device_is_refused_up_front() -> None:
    """The meta device holds no values: the table took it, and check() failed later with a RuntimeError
    (``.item()`` of a meta tensor)."""
    match = "the meta device holds no values"
    for device in ("meta", torch.device("meta")):
        with pytest.raises(MRopeError, match=match):
            PositionTable(2, device=device)
    table = PositionTable(2)
    table.add(0, family("qwen2_vl"), text(3))
    meta = torch.empty((3, 4), dtype=torch.int64, device="meta")
    args = (torch.tensor([0], device="meta"),) * 3
    unchanged(table, lambda: table.fill(meta, *args, num_tokens=1), match)
    unchanged(table, lambda: table.decode(meta, *args[:2]), match)
    assert table._steps.device is None
    table.check()


def test_reserve_of_an_absurd_device_scratch_changes_nothing(table: PositionTable) -> None:
    """``reserve(tokens=2**62)`` raised torch's RuntimeError, after growing the pool when ``segments``
    was given too."""
    capacity = table.pool_capacity
    for tokens in (1 << 62, (1 << 63) - 1):
        unchanged(
            table,
            lambda t=tokens: table.reserve(segments=4 * capacity, tokens=t),
            rf"tokens={tokens}: a device scratch of {tokens} int64 columns .* cannot be allocated on cpu",
        )
    assert table.pool_capacity == capacity
    table.reserve(segments=4 * capacity, tokens=64)
    assert table.pool_capacity == 4 * capacity


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_and_sparse_tensors_are_refused(table: PositionTable) -> None:
    """They raised RuntimeError ("NestedTensorImpl doesn't support sizes") or TypeError."""
    ints = torch.tensor([0, 2])
    nested = torch.nested.nested_tensor([ints, ints[:1]])
    jagged = torch.nested.nested_tensor([ints, ints[:1]], layout=torch.jagged)
    sparse = torch.eye(2, dtype=torch.int64).to_sparse()
    host = np.full((3, 8), -7, dtype=np.int64)
    device = torch.full((3, 8), -7, dtype=torch.int64)
    args = (torch.tensor([0, 2]), torch.tensor([0, 7]), torch.tensor([2, 1]))
    for bad, kind in ((nested, "nested"), (jagged, "nested"), (sparse, "sparse_coo")):
        unchanged(table, lambda b=bad: table.fill(host, b, [0, 7], [2, 1]), rf"slots is a {kind} tensor")
        unchanged(table, lambda b=bad: table.decode(host, [0, 2], b), rf"seq_lens is a {kind} tensor")
        unchanged(table, lambda b=bad: table.fill(device, b, *args[1:], num_tokens=3), rf"slots is a {kind}")
        unchanged(
            table,
            lambda b=bad: table.fill_ragged(device, args[0], b, torch.zeros(4, dtype=torch.int64)),
            rf"query_start_loc is a {kind}",
        )
    out = torch.nested.nested_tensor([torch.zeros(8, dtype=torch.int64)] * 3)
    unchanged(table, lambda: table.fill(out, *args, num_tokens=3), "out is a nested tensor")
    sparse_out = torch.zeros((3, 8), dtype=torch.int64).to_sparse()
    unchanged(table, lambda: table.fill(sparse_out, *args, num_tokens=3), "out is a sparse_coo tensor")
    unchanged(table, lambda: table.add(1, family("qwen2_vl"), nested), "input_ids is a nested tensor")
    assert (host == -7).all() and (device == -7).all()


# -- the bound on positions every table holds (issue 35: 2**31 - 1; float32 tables below 2**24) ---------
LARGEST = (1 << 31) - 1  # the largest position mrope hands out
FLOAT_BOUND = 1 << 24  # a float32 table's positions stay below it: float32 holds every integer below
BEYOND = r"reaches position .*beyond (max_position|the largest position|what a float32 table holds)"


def _time_prompt(seconds: float, tail: int = 2):
    """A Qwen2.5-VL prompt whose video of 4 frames takes time indices up to ``3 * 2 * seconds``: its
    positions lie near that at small indices (a video of large ``second_per_grid_ts``); ``tail`` text
    tokens after it, each one position more."""
    fam = family("qwen2_5_vl")
    return fam, build_prompt(fam, [text(1), Video(4, 1, 2), text(tail)], [seconds])


def _positions(fam, p) -> tuple[np.ndarray, int]:
    """``fam.positions`` of prompt ``p``, rendered from ``fam.segments`` (the same values; until issue 35's
    item 6 lands, ``positions`` of a prompt whose positions near 2**31 allocates O(largest position))."""
    table, delta = fam.segments(p.input_ids, **p.kwargs())
    return mrope.render.render_all(table), delta


def _near_bound_prompt(bound: int, over: int):
    """:func:`_time_prompt` whose largest position is ``bound - 1 + over``."""
    seconds = float(np.float32((bound - 512) / 6))
    fam, p = _time_prompt(seconds, 0)
    positions, _ = _positions(fam, p)
    return _time_prompt(seconds, bound - 1 + over - int(positions.max()))


def _one_token_steps(table: PositionTable, out: np.ndarray, indices: list[int]) -> dict[int, object]:
    """Each index as its own step of slot 0 (fill, and decode past the prompt; int64 and int32 arrays): the
    position it gets, or None where refused (nothing written, the table unchanged); the paths agree."""
    got: dict[int, object] = {}
    length = table.prompt_length(0)
    for j in indices:
        results = []
        for a in (np.int64, np.int32):
            calls = [lambda a=a, j=j: table.fill(out, np.array([0], a), np.array([j], a), np.array([1], a))]
            if j >= length:
                calls.append(lambda a=a, j=j: table.decode(out, np.array([0], a), np.array([j + 1], a)))
            for call in calls:
                out.fill(-7)
                try:
                    call()
                except MRopeError:
                    assert (out == -7).all()
                    unchanged(table, call, BEYOND)
                    results.append(None)
                else:
                    results.append(out[:, 0].copy())
        first = results[0]
        assert all((r is None) == (first is None) for r in results), j
        assert first is None or all(np.array_equal(r, first) for r in results), j
        got[j] = first
    return got


@pytest.mark.parametrize("floats", [False, True])
@settings(max_examples=30, deadline=None)
@given(over=st.integers(-8, 2), extra=st.integers(1, 8), bounded=st.booleans())
def test_a_table_hands_out_no_position_past_its_bound(backend, floats, over, extra, bounded) -> None:
    """Whatever ``max_position`` (none, or one above the bound), a table hands out positions up to 2**31 - 1
    (float32 tables: below 2**24, where float32 is exact) and refuses any step or prompt reaching past, on
    every path: a request is refused at ``add`` (as ``family.positions`` refuses it, or by the table) or
    gets ``family.positions`` exactly, and each index past the prompt gets ``index + delta`` exactly or is
    refused (fill and decode, int64 and int32 arrays, numpy and numba; the torch path counts it)."""
    bound = FLOAT_BOUND if floats else LARGEST + 1
    fam, p = _near_bound_prompt(bound, over)
    dtype = np.float32 if floats else np.int64
    max_position = (1 << 40) if bounded else None
    table = PositionTable(2, dtype=dtype, backend="numpy" if floats else backend, max_position=max_position)
    table.add(1, family("qwen2_vl"), text(3))  # a request of delta 0 beside it
    add = lambda: table.add(0, fam, p.input_ids, **p.kwargs())  # noqa: E731
    try:
        positions, delta = _positions(fam, p)
    except MRopeError as error:  # (the family's own bound: 2**31 - 1)
        assert not floats and over > 0
        unchanged(table, add, re.escape(str(error)))
        return
    assert int(positions.max()) == bound - 1 + over
    if over > 0:  # a prompt position at the bound (float32; int64 tables: the family refused it above)
        unchanged(table, add, BEYOND)
        return
    add()
    length = len(p.input_ids)
    out = np.full((3, 4), -7, dtype=dtype)
    got = _one_token_steps(table, out, [*range(4), *range(length - 4, length + extra)])
    for j, position in got.items():
        exact = positions[:, j] if j < length else np.full(3, j + delta, dtype=np.int64)
        if exact.max() >= bound:
            assert position is None, j
        else:
            assert position is not None, j
            np.testing.assert_array_equal(position.astype(np.int64), exact, err_msg=str(j))
    last = length + extra - 1  # the torch path counts what the host refuses
    out_t = torch.full((3, 4), -7, dtype=torch.float32 if floats else torch.int64)
    table.fill(out_t, torch.tensor([0]), torch.tensor([last]), torch.tensor([1]), num_tokens=1)
    if last + delta >= bound:
        with pytest.raises(MRopeError, match="1 request"):
            table.check()
        assert (out_t[:, 0] == 0).all()
    else:
        table.check()
        assert int(out_t[0, 0]) == last + delta


def test_positions_near_2_31_are_refused_not_wrapped_or_rounded(backend) -> None:
    """The issue's cases: positions in the tens of millions at small indices (a float32 table would round
    them) and near 2**31 (past it, an int32 engine wraps them): int64 tables serve the first exactly and
    refuse past 2**31 - 1; float32 tables refuse both at ``add``."""
    fam, p = _time_prompt(3e7 / 6)  # positions near 3e7
    positions, delta = _positions(fam, p)
    floats = PositionTable(2, dtype=np.float32)
    unchanged(floats, lambda: floats.add(0, fam, p.input_ids, **p.kwargs()), "what a float32 table holds")
    table = PositionTable(2, backend=backend)
    table.add(0, fam, p.input_ids, **p.kwargs())
    out = np.zeros((3, len(p.input_ids)), dtype=np.int64)
    table.fill(out, np.array([0]), np.array([0]), np.array([len(p.input_ids)]))
    np.testing.assert_array_equal(out, positions)
    fam, p = _time_prompt((LARGEST - 600) / 6)
    positions, delta = _positions(fam, p)
    unchanged(floats, lambda: floats.add(1, fam, p.input_ids, **p.kwargs()), "what a float32 table holds")
    table.add(1, fam, p.input_ids, **p.kwargs())
    seq_len = LARGEST + 1 - delta  # decode's length whose last index gets position 2**31 - 1
    out = np.full((3, 2), -7, dtype=np.int64)
    assert table.decode(out, np.array([1]), np.array([seq_len])) == 1
    assert out[0, 0] == LARGEST
    past = r"2147483648, beyond the largest position mrope hands out, 2147483647 \(2\*\*31 - 1\)"
    unchanged(table, lambda: table.decode(out, np.array([1]), np.array([seq_len + 1])), past)
    unchanged(table, lambda: table.fill(out, np.array([1]), np.array([seq_len - 1]), np.array([2])), past)
