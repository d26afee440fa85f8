"""Refusals of PositionTable's host paths that need no torch (issue 20): whatever would make a call
fail or write garbage is checked before the first write and raises MRopeError naming what the caller
passed (never a wrapped value, never a dtype numpy chose), and a failed call changes nothing: not the
table, not ``out``. Runs with numpy alone; int64 tables on both steps (the ``backend`` fixture)."""

from __future__ import annotations

import sys
import tracemalloc

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from mrope import MRopeError
from mrope.serving import PositionTable, _pool
from mrope.serving import table as table_module
from support.engine import family
from support.snapshot import unchanged
from support.strategies import Image, build_prompt, text

STEP = np.array([0, 2]), np.array([0, 7]), np.array([2, 1])  # slots, num_computed, num_scheduled
SHARING = "out has elements sharing memory"


def _table(backend: str = "numpy", dtype=np.int64) -> PositionTable:
    fam = family("qwen2_vl")
    table = PositionTable(4, backend=backend if dtype == np.int64 else "numpy", dtype=dtype)
    p = build_prompt(fam, [text(3), Image(2, 2), text(2)])
    table.add(0, fam, p.input_ids, **p.kwargs())
    table.add(2, fam, text(7))
    return table


def _calls(table: PositionTable, out: np.ndarray) -> list:
    """fill, decode and fill_ragged, each writing the first 3 (decode: 2) columns of ``out``."""
    slots, nc, ns = STEP
    return [
        lambda: table.fill(out, slots, nc, ns),
        lambda: table.decode(out, np.array([2, 0]), np.array([9, 12])),
        lambda: table.fill_ragged(out, slots, np.array([0, 2, 3]), np.array([0, 0, 7, 0])),
    ]


def _overlapping(dtype) -> tuple[np.ndarray, list[np.ndarray]]:
    """A base array and writable (3, 8) views of it whose first columns share memory."""
    base = np.full(256, -7, dtype=dtype)
    item = base.itemsize
    return base, [
        as_strided(base, (3, 8), (0, item)),  # three rows on one (a writable broadcast)
        as_strided(base, (3, 8), (item, item)),  # rows one element apart
        as_strided(base, (3, 8), (16 * item, 0)),  # one column, repeated
        as_strided(base, (3, 8), (item, 2 * item)),  # interleaved: row 2's first column is row 0's second
        as_strided(base, (3, 8), (16 * item, item // 2)),  # columns half an element apart
        as_strided(base, (3, 8), (2 * item, 2 * item)),  # row 1's first column is row 0's second
    ]


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_an_out_whose_elements_share_memory_is_refused(backend: str, dtype) -> None:
    """The device path refuses such an ``out``; the host paths (numpy and compiled steps, float32
    tables) used to write it, each differently. Now every one refuses it before writing."""
    table = _table(backend, dtype)
    base, views = _overlapping(dtype)
    for out in views:
        for call in _calls(table, out):
            unchanged(table, call, SHARING)
    assert (base == -7).all()


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_strided_outs_that_share_no_memory_are_served(backend: str, dtype) -> None:
    """Transposed, strided, reversed views, and a view whose columns overlap only past the columns the
    step writes: served, on both steps alike, as a plain array is."""
    table = _table(backend, dtype)
    base = np.full(256, -7, dtype=dtype)
    item = base.itemsize
    outs = [
        np.full((8, 3), -7, dtype=dtype).T,
        np.full((3, 16), -7, dtype=dtype)[:, ::2],
        np.full((3, 8), -7, dtype=dtype)[:, ::-1],
        np.full((3, 8), -7, dtype=dtype)[::-1],
        as_strided(base, (3, 8), (3 * item, item)),  # columns 0-2 of each row are its own
    ]
    for out in outs:
        for k, num in enumerate((3, 2, 3)):  # fill, decode, fill_ragged
            clean = np.full((3, 8), -7, dtype=dtype)
            _calls(table, clean)[k]()
            _calls(table, out)[k]()
            np.testing.assert_array_equal(np.array(out[:, :num]), clean[:, :num])


# -- decode names the lengths it was given -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.float32])
@pytest.mark.parametrize("seq_len", [0, -1, -(1 << 63)])
def test_decode_names_the_seq_lens_it_was_given(backend: str, dtype, seq_len: int) -> None:
    """decode() is fill() with ``num_computed = seq_lens - 1``: its errors named ``num_computed``
    (never passed) and, for the most negative int64, the index that ``seq_lens - 1`` wraps to."""
    table = _table(backend, dtype)
    out = np.full((3, 4), -7, dtype=dtype)
    call = lambda: table.decode(out, np.array([2, 0]), np.array([9, seq_len]))  # noqa: E731
    unchanged(table, call, rf"^seq_lens\[1\] = {seq_len} \(slot 0\): a length counts the new token")
    if seq_len > -(1 << 31):
        int32 = lambda: table.decode(out, np.array([2, 0]), np.array([9, seq_len], np.int32))  # noqa: E731
        unchanged(table, int32, rf"^seq_lens\[1\] = {seq_len} \(slot 0\)")
    assert (out == -7).all()


def test_decode_beyond_the_bound_names_seq_lens(backend: str) -> None:
    table = _table(backend)
    out = np.full((3, 4), -7, dtype=np.int64)
    for seq_len in ((1 << 32) + 1, (1 << 63) - 1):
        unchanged(
            table,
            lambda s=seq_len: table.decode(out, np.array([2]), np.array([s])),
            rf"^slot 2: sequence index {seq_len - 1} \(seq_lens\[0\] = {seq_len}\) is beyond 4294967295$",
        )
    unchanged(
        table, lambda: table.decode(out, np.array([2, 0]), np.array([9])), "slots and seq_lens must have one"
    )
    assert (out == -7).all()


# -- integers beyond int64 ----------------------------------------------------------------------------
BEYOND = [
    ("slots", [1 << 64], r"slots\[0\] = 18446744073709551616 does not fit in int64"),
    ("slots", np.array([(1 << 64) - 1], dtype=np.uint64), r"slots\[0\] = 18446744073709551615 does not fit"),
    ("slots", [-(1 << 63) - 1], r"slots\[0\] = -9223372036854775809 does not fit in int64"),
    ("num_computed", [1 << 63], r"num_computed\[0\] = 9223372036854775808 does not fit in int64"),
    ("num_scheduled", [-(1 << 70)], r"num_scheduled\[0\] = -1180591620717411303424 does not fit"),
    ("num_scheduled", [1.5], r"num_scheduled must hold integers, got dtype float64"),
]


@pytest.mark.parametrize(("name", "value", "match"), BEYOND, ids=lambda v: str(v)[:20])
def test_integers_beyond_int64_are_named_not_wrapped(backend: str, name: str, value, match: str) -> None:
    """numpy reads a list holding an integer beyond int64 as float64 or object, and a uint64 array
    casts to int64 by wrapping: the error named that dtype, or the wrapped value."""
    table = _table(backend)
    out = np.full((3, 4), -7, dtype=np.int64)
    args = {"slots": [2], "num_computed": [7], "num_scheduled": [1], name: value}
    unchanged(
        table, lambda: table.fill(out, args["slots"], args["num_computed"], args["num_scheduled"]), match
    )
    assert (out == -7).all()


def test_fill_ragged_names_a_decreasing_query_start_loc_that_wraps(backend: str) -> None:
    """``query_start_loc[2] - query_start_loc[1]`` wraps int64 to a large count: the error named a
    sequence index the caller never passed."""
    table = _table(backend)
    out = np.full((3, 8), -7, dtype=np.int64)
    starts = np.array([0, 2, -(1 << 63) + 1])
    unchanged(
        table,
        lambda: table.fill_ragged(out, np.array([0, 2]), starts, np.array([0, 0, 7, 0])),
        r"query_start_loc decreases at request 1: 2 then -9223372036854775807",
    )
    assert (out == -7).all()


# -- sizes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_requests": 1 << 40}, r"max_requests must be at most 2147483648 .*, got 1099511627776"),
        ({"max_requests": (1 << 31) + 1}, r"max_requests must be at most 2147483648"),
        ({"pool_capacity": 1 << 40}, r"pool_capacity must be at most 2147483648 .*, got 1099511627776"),
        ({"max_position": 1 << 70}, r"max_position must be below 2\*\*63 .*, got 1180591620717411303424"),
    ],
)
def test_absurd_sizes_are_refused_before_anything_is_allocated(kwargs: dict, match: str) -> None:
    """They raised MemoryError (or, max_position, a numba TypingError at the first step)."""
    tracemalloc.start()
    try:
        with pytest.raises(MRopeError, match=match):
            PositionTable(**{"max_requests": 2, **kwargs})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_reserve_refuses_absurd_sizes_and_changes_nothing() -> None:
    table = _table()
    unchanged(table, lambda: table.reserve(segments=1 << 40), r"segments must be at most 2147483648")
    unchanged(table, lambda: table.reserve(segments=(1 << 31) + 1), r"segments must be at most 2147483648")


def test_allocation_failures_are_mrope_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A size within the bounds that memory cannot hold: the MemoryError becomes an MRopeError naming
    the sizes, and nothing changes."""

    def no_memory(*args, **kwargs):
        raise MemoryError("no memory (test)")

    with monkeypatch.context() as m:
        m.setattr(table_module, "SlotState", no_memory)
        with pytest.raises(MRopeError, match=r"max_requests=1000 and pool_capacity=8064 does not fit"):
            PositionTable(1000)
    table = _table()
    capacity = table.pool_capacity
    with monkeypatch.context() as m:
        m.setattr(_pool, "_fresh", no_memory)
        unchanged(table, lambda: table.reserve(segments=1 << 20), "cannot grow to 1048576 entries")
    assert table.pool_capacity == capacity
    table.reserve(segments=1 << 10)
    assert table.pool_capacity == 1 << 10


def test_the_pool_never_grows_past_what_its_keys_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Growth doubles the pool: capped at MAX_CAPACITY (2**31; 16 here), and an admission that would
    need more is refused, not stored under keys that wrap."""
    monkeypatch.setattr(_pool, "MAX_CAPACITY", 16)
    fam = family("qwen2_vl")
    table = PositionTable(8, pool_capacity=4)
    p = build_prompt(fam, [text(3), Image(2, 2), text(2)])  # 3 segments + the decode tail
    for slot in range(4):
        table.add(slot, fam, p.input_ids, **p.kwargs())
    assert table.pool_capacity == 16
    unchanged(table, lambda: table.add(4, fam, p.input_ids, **p.kwargs()), "at most 16 .* entries")
    table.remove(0)
    table.add(4, fam, p.input_ids, **p.kwargs())  # compaction makes room
    assert table.pool_capacity == 16


# -- without torch -------------------------------------------------------------------------------------
def test_the_device_path_without_torch_is_an_mrope_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """It raised ModuleNotFoundError; reserve(segments=..., tokens=...) grew the pool before that."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "mrope.serving.device", None)
    for device in ("cuda", "cpu:0"):
        with pytest.raises(
            MRopeError, match=rf"device='{device}' asks for the device path, which needs torch"
        ):
            PositionTable(2, device=device)
    table = _table()
    capacity = table.pool_capacity
    message = r"reserve\(tokens=...\) sizes the device path's scratch, which needs torch"
    unchanged(table, lambda: table.reserve(segments=4 * capacity, tokens=64), message)
    assert table.pool_capacity == capacity
    table.reserve(segments=4 * capacity)  # the host pool alone needs no torch
    assert table.pool_capacity == 4 * capacity
