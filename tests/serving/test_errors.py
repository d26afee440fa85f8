"""Bad input to PositionTable raises MRopeError and changes nothing: not the table, not ``out``. The
int64 table's tests run on both steps (the ``backend`` fixture): the compiled one refuses exactly what
the numpy one refuses, with the same message."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _engine import family
from hypothesis import given, settings
from hypothesis import strategies as st

from _peers import require
from mrope import MRopeError
from mrope.serving import PositionTable
from strategies import Image, Video, build_prompt, text


def _snapshot(table: PositionTable) -> list[np.ndarray]:
    pool = table._pool
    arrays = (pool.keys, pool.fields, table._info, pool.base, pool.slots)
    return [a.copy() for a in arrays] + [np.array(pool.top)]


@pytest.fixture
def table(backend: str) -> PositionTable:
    fam = family("qwen2_vl")
    t = PositionTable(4, max_position=1000, backend=backend)
    assert t.backend == backend
    p = build_prompt(fam, [text(3), Image(2, 2), text(2)])
    t.add(0, fam, p.input_ids, **p.kwargs())
    t.add(2, fam, text(7))
    return t


def _unchanged(table: PositionTable, call, match: str) -> None:
    before = _snapshot(table)
    with pytest.raises(MRopeError, match=match):
        call()
    for a, b in zip(before, _snapshot(table), strict=True):
        np.testing.assert_array_equal(a, b)


FILL_CASES = {
    "never added": (([1], [0], [1]), r"rows\[0\] = 1 holds no request"),
    "out of range": (([0, 4], [0, 0], [1, 1]), r"rows\[1\] = 4 is out of range"),
    "negative row": (([-1], [8], [1]), r"rows\[0\] = -1 is out of range"),
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
    _unchanged(table, lambda: table.fill(out[:, :40], rows, nc, ns), match)
    assert (out == -7).all()


DECODE_CASES = {
    "never added": (([1], [1]), r"rows\[0\] = 1 holds no request"),
    "out of range": (([0, 4], [20, 8]), r"rows\[1\] = 4 is out of range"),
    "zero length": (([2, 0], [8, 0]), r"num_computed\[1\] = -1"),
    "beyond max_position": (([2, 0], [1500, 20]), "beyond max_position 1000"),
    "lengths": (([0, 2], [20]), "one length"),
}


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(DECODE_CASES))
def test_decode_bad_input_writes_nothing(table: PositionTable, case: str, dtype) -> None:
    (rows, seq_lens), match = DECODE_CASES[case]
    out = np.full((3, 64), -7, dtype=np.int64)
    call = lambda: table.decode(out[:, :40], np.array(rows, dtype=dtype), np.array(seq_lens, dtype=dtype))  # noqa: E731
    _unchanged(table, call, match)
    assert (out == -7).all()
    _unchanged(
        table, lambda: table.decode(out[:, :1], np.array([2, 0]), np.array([8, 20])), "out has 1 columns"
    )


def test_bounds_of_indices_and_empty_steps(table: PositionTable, backend: str) -> None:
    """Sequence indices stay below 2**32 - 1 (decode steps too); a step without tokens writes nothing
    and does not check max_position."""
    unbounded = PositionTable(4, backend=backend)
    unbounded.add(2, family("qwen2_vl"), text(7))
    out = np.full((3, 8), -7, dtype=np.int64)
    for nc in ([(1 << 32) - 1], [0, (1 << 32) - 1]):
        rows, ns = np.array([2] * len(nc)), np.ones(len(nc), dtype=np.int64)
        _unchanged(
            unbounded,
            lambda nc=nc, rows=rows, ns=ns: unbounded.fill(out, rows, np.array(nc), ns),
            "sequence index 4294967295 is beyond 4294967295",
        )
    assert unbounded.fill(out, np.array([2]), np.array([(1 << 32) - 2]), np.array([1])) == 1
    assert out[0, 0] == (1 << 32) - 2
    out.fill(-7)
    assert table.fill(out, np.array([2]), np.array([5000]), np.array([0])) == 0
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
    _unchanged(table, lambda: table.fill(out, np.array([0, 2]), np.array([0, 7]), np.array([2, 1])), match)
    np.testing.assert_array_equal(np.asarray(out), before)


def test_num_tokens_must_be_n(table: PositionTable) -> None:
    out = np.full((3, 8), -7, dtype=np.int64)
    args = np.array([0, 2]), np.array([0, 7]), np.array([2, 1])
    for bad in (2, 4, -1):
        _unchanged(table, lambda bad=bad: table.fill(out, *args, num_tokens=bad), "num_tokens")
    assert (out == -7).all()
    assert table.fill(out, *args, num_tokens=3) == 3


def test_read_only_out(table: PositionTable) -> None:
    out = np.zeros((3, 8), dtype=np.int64)
    out.flags.writeable = False
    _unchanged(table, lambda: table.fill(out, np.array([2]), np.array([7]), np.array([1])), "read-only")


def test_rows_twice_removed_unknown(table: PositionTable) -> None:
    fam = family("qwen2_vl")
    _unchanged(table, lambda: table.add(0, fam, text(4)), "row 0 already holds a request")
    _unchanged(table, lambda: table.add(4, fam, text(4)), r"row 4 is out of range \[0, 4\)")
    _unchanged(table, lambda: table.remove(1), "row 1 holds no request")
    table.remove(2)
    _unchanged(table, lambda: table.remove(2), "row 2 holds no request")
    out = np.full((3, 4), -7, dtype=np.int64)
    _unchanged(
        table, lambda: table.fill(out, np.array([2]), np.array([7]), np.array([1])), "holds no request"
    )
    assert (out == -7).all()


def test_bad_prompts_change_nothing(table: PositionTable) -> None:
    q25 = family("qwen2_5_vl")
    p = build_prompt(q25, [text(2), Video(4, 2, 2), text(2)], [1e6])  # unbounded second_per_grid_ts
    _unchanged(table, lambda: table.add(1, q25, p.input_ids, **p.kwargs()), "beyond max_position 1000")
    fam = family("qwen2_vl")
    _unchanged(
        table, lambda: table.add(1, fam, text(3) + [151655] * 3, image_grid_thw=[[1, 4, 4]]), "placeholder"
    )
    positions = np.array([[0, 1, 2], [0, 5, 2], [0, 1, 9]])
    _unchanged(table, lambda: table.add_positions(1, positions, 0), "not text runs and vision frames")
    _unchanged(table, lambda: table.add_positions(1, np.zeros((2, 3), dtype=np.int64), 0), r"shape \(3, L\)")
    _unchanged(
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
        _unchanged(table, bad, match)
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
    _unchanged(ints, lambda: ints.add(1, q3, ids, **kwargs), "dtype=np.float32")
    _unchanged(ints, lambda: ints.add_positions(1, positions, delta), "need a float32 table")
    _unchanged(ints, lambda: ints.add(1, family("qwen2_vl"), text(3), audio_seqlens=[9]), "audio_seqlens")
    out32 = np.full((3, 4), -7, dtype=np.float32)
    _unchanged(ints, lambda: ints.fill(out32, np.array([0]), np.array([0]), np.array([2])), "int64 array")
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
        _unchanged(floats, bad, match)
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
