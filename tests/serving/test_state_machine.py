"""PositionTable as a state machine (hypothesis ``RuleBasedStateMachine``).

Random sequences of admission (``add``, ``add_positions``), removal, steps (``fill``, ``decode``) and
refused calls of every kind run against a model of the running requests (each one's
``family.positions()`` and delta). Every step runs on the host path (the table's backend, and a numpy
twin of an int64 table) and on the device path (torch tensors on the CPU): each must write the model's
positions, or refuse what the model refuses (host: :class:`MRopeError`, nothing written, the table
unchanged; device: the columns counted, ``check()`` raising). After every step, every live request's
positions are checked on every path.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import CONFIGS, OMNI, family, reference
from support.snapshot import assert_same, snapshot, unchanged
from support.strategies import prompts

NAMES = sorted(CONFIGS) + list(OMNI)
BACKENDS = ["numpy"] + (["numba"] if importlib.util.find_spec("numba") else [])
OUT_COLUMNS = 160


class Refused(Exception):
    """The model's verdict: the call must be refused."""


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[PositionTable] = []

    @initialize(
        floats=st.booleans(),
        backend=st.sampled_from(BACKENDS),
        slots=st.integers(1, 4),
        capacity=st.integers(1, 16),
        max_position=st.none() | st.integers(20, 120),
    )
    def setup(self, floats: bool, backend: str, slots: int, capacity: int, max_position: int | None) -> None:
        self.floats = floats
        self.dtype = np.float32 if floats else np.int64
        self.torch_dtype = torch.float32 if floats else torch.int64
        self.bound = (1 << 24) if floats else (1 << 32)
        self.slots = slots
        self.max_position = max_position
        # positions stay below max_position and, in every table, 2**31 (float32 tables 2**24)
        implicit = (1 << 24) if floats else (1 << 31)
        self.position_bound = implicit if max_position is None else min(max_position, implicit)
        kwargs = {"pool_capacity": capacity, "max_position": max_position, "dtype": self.dtype}
        backends = ["numpy"] if floats else sorted({backend, "numpy"})
        self.tables = [
            PositionTable(slots, device=torch.device("cpu"), backend=b, **kwargs) for b in backends
        ]
        self.live: dict[int, tuple[np.ndarray, Any]] = {}

    # -- the model ------------------------------------------------------------------------------
    def _slot_error(self, slot: Any, live: bool) -> None:
        if not 0 <= slot < self.slots:
            raise Refused("out of range")
        if live and slot not in self.live:
            raise Refused("holds no request")

    def _position(self, index: int, delta: Any) -> Any:
        """The position of an index past the prompt, as the table computes its bound."""
        return np.float32(np.float64(index) + delta) if self.floats else index + delta

    def _check_request(self, slot: int, first: int, count: int) -> None:
        self._slot_error(slot, live=True)
        if first < 0 or count < 0:
            raise Refused("counts must be >= 0")
        if first + count > self.bound:
            raise Refused("is beyond")
        last = self._position(first + count - 1, self.live[slot][1])
        if last >= self.position_bound:
            raise Refused("reaches position")

    def _expected(self, slot: int, first: int, count: int) -> np.ndarray:
        positions, delta = self.live[slot]
        if first >= positions.shape[1]:  # past the prompt (maybe near the index bound): no loop
            index = np.arange(first, first + count, dtype=np.int64)
            values = index.astype(np.float32) + np.float32(delta) if self.floats else index + delta
            return np.broadcast_to(values, (3, count)).astype(self.dtype)
        return reference(positions, delta, first, count, self.dtype)

    # -- admission ------------------------------------------------------------------------------
    @rule(data=st.data())
    def add(self, data: st.DataObject) -> None:
        slot = data.draw(st.integers(-1, self.slots), label="slot")
        name = data.draw(st.sampled_from(NAMES), label="family")
        fam = family(name)
        p = data.draw(prompts(fam, max_images=1, max_videos=1, max_text=4, max_side=3, max_frames=3))
        positions, delta = fam.positions(p.input_ids, **p.kwargs())
        precomputed = data.draw(st.booleans(), label="precomputed")
        replace = not precomputed and data.draw(st.booleans(), label="replace")  # add(replace=True)
        verdict = None
        try:  # in the order the table checks
            if positions.dtype == np.float32 and not self.floats:
                raise Refused("float32 table" if precomputed else "dtype=np.float32")
            self._slot_error(slot, live=False)
            if slot in self.live and not replace:
                raise Refused("already holds a request")
            last = len(p.input_ids) - 1 + delta
            if max(positions.max(), last) >= self.position_bound:
                raise Refused("positions given reach" if precomputed else "the prompt reaches position")
        except Refused as refused:
            verdict = str(refused)
        taken = set()
        for table in self.tables:
            if precomputed:
                call = lambda t=table: t.add_positions(slot, positions, delta)  # noqa: E731
            else:
                call = lambda t=table: t.add(slot, fam, p.input_ids, replace=replace, **p.kwargs())  # noqa: E731
            taken.add(self._run_admission(table, call, verdict, precomputed))
        assert len(taken) == 1  # every table took it, or none
        if taken == {True}:  # (a refused replacement leaves the request before it)
            self.live[slot] = (positions, delta)

    def _run_admission(self, table: PositionTable, call, verdict: str | None, precomputed: bool) -> bool:
        """Run the admission ``call`` on ``table``; whether the table took the request."""
        if verdict is not None:
            unchanged(table, call, verdict)
            return False
        before = snapshot(table)
        try:
            call()
        except MRopeError as err:
            allowed = ("register the request with add()",) if precomputed else ()
            allowed += ("frozen",) if table.frozen else ()
            assert any(a in str(err) for a in allowed), err
            assert_same(before, snapshot(table))
            return False
        return True

    @rule(data=st.data())
    def add_positions_bad_delta(self, data: st.DataObject) -> None:
        """A delta whose decode positions meet the prompt's: refused."""
        fam = family(data.draw(st.sampled_from(sorted(CONFIGS)), label="family"))
        p = data.draw(prompts(fam, max_images=1, max_videos=1, max_text=4, max_side=3, max_frames=3))
        positions, delta = fam.positions(p.input_ids, **p.kwargs())
        free = [s for s in range(self.slots) if s not in self.live]
        slot = free[0] if free else 0
        bad = delta - data.draw(st.integers(1, 5), label="short by")
        for table in self.tables:
            unchanged(table, lambda t=table: t.add_positions(slot, positions, bad), ".")

    @rule(slot=st.integers(-1, 4))
    def remove(self, slot: int) -> None:
        try:
            self._slot_error(slot, live=True)
        except Refused as refused:
            for table in self.tables:
                unchanged(table, lambda t=table: t.remove(slot), str(refused))
            return
        for table in self.tables:
            table.remove(slot)
        del self.live[slot]

    # -- steps ----------------------------------------------------------------------------------
    def _draw_step(self, data: st.DataObject) -> tuple[list[int], list[int], list[int]]:
        n = data.draw(st.integers(0, 4), label="requests")
        slots, first, count = [], [], []
        for _ in range(n):
            live = sorted(self.live)
            slot = data.draw(
                st.sampled_from(live) if live and data.draw(st.integers(0, 7)) else st.integers(-1, 4)
            )
            length = self.live[slot][0].shape[1] if slot in self.live else 4
            kind = data.draw(st.integers(0, 9), label="kind")
            if kind == 0:  # near the index bound
                f = self.bound - data.draw(st.integers(-1, 4))
            elif kind == 1:  # negative, or wrapping int64
                f = data.draw(st.sampled_from([-1, -3, (1 << 63) - 1]))
            else:
                f = data.draw(st.integers(0, length + 6))
            c = data.draw(st.integers(-1, 4) if kind < 2 else st.integers(0, length + 4))
            slots.append(slot)
            first.append(f)
            count.append(c)
        return slots, first, count

    @rule(data=st.data())
    def fill(self, data: st.DataObject) -> None:
        slots, first, count = self._draw_step(data)
        num = sum(count)
        verdict = None
        try:
            for s, f, c in zip(slots, first, count, strict=True):
                self._check_request(s, f, c)
            if num > OUT_COLUMNS:
                raise Refused("columns")
        except Refused as refused:
            verdict = str(refused)
        int32 = data.draw(st.booleans(), label="int32") and all(
            -(1 << 31) <= v < (1 << 31) for v in first + count
        )
        index_dtype = np.int32 if int32 else np.int64
        args = [np.array(a, dtype=index_dtype) for a in (slots, first, count)]
        num_tokens = data.draw(st.sampled_from([None, num, num + 1]), label="num_tokens")
        step_verdict = verdict  # the device path takes its own num_tokens
        if num_tokens == num + 1 and verdict is None:
            verdict = "num_tokens"
        expected = None
        if step_verdict is None:
            parts = [self._expected(s, f, c) for s, f, c in zip(slots, first, count, strict=True)]
            expected = np.concatenate([np.zeros((3, 0), dtype=self.dtype), *parts], axis=1)
        for table in self.tables:
            out = np.full((3, OUT_COLUMNS + 1), -7, dtype=self.dtype)
            call = lambda t=table, o=out: t.fill(o[:, :OUT_COLUMNS], *args, num_tokens=num_tokens)  # noqa: E731
            if verdict is not None:
                unchanged(table, call, ".")
                assert (out == -7).all()
            else:
                assert call() == num
                np.testing.assert_array_equal(out[:, :num], expected, err_msg=f"{table.backend}")
                assert (out[:, num:] == -7).all()
        # the device path: N = the scheduled tokens, a capacity past them, or fewer (counted)
        pad = data.draw(st.integers(-2, 3), label="device padding")
        if num > OUT_COLUMNS or not all(-(1 << 63) <= v < (1 << 63) for v in first + count):
            return
        device_num = max(0, num + pad)
        wrong = step_verdict is not None or device_num < num
        tensors = [torch.from_numpy(a) for a in args]
        for table in self.tables:
            out = torch.full((3, OUT_COLUMNS + 4), -7, dtype=self.torch_dtype)
            assert table.fill(out, *tensors, num_tokens=device_num) == device_num
            if wrong:
                with pytest.raises(MRopeError, match="request"):
                    table.check()
            else:
                table.check()
                np.testing.assert_array_equal(out[:, :num].numpy(), expected)
                assert (out[:, num:device_num] == 0).all()
            assert (out[:, device_num:] == -7).all()

    @rule(data=st.data())
    def decode(self, data: st.DataObject) -> None:
        slots, first, _ = self._draw_step(data)
        seq_lens = [f + 1 for f in first]
        verdict = None
        try:
            for s, f in zip(slots, first, strict=True):
                self._check_request(s, f, 1)
                if f < self.live[s][0].shape[1]:
                    raise Refused("inside its prompt")
        except Refused as refused:
            verdict = str(refused)
        if not all(v < (1 << 63) for v in seq_lens):
            return
        args = [np.array(a, dtype=np.int64) for a in (slots, seq_lens)]
        expected = None
        if verdict is None:
            parts = [self._expected(s, f, 1) for s, f in zip(slots, first, strict=True)]
            expected = np.concatenate([np.zeros((3, 0), dtype=self.dtype), *parts], axis=1)
        for table in self.tables:
            out = np.full((3, 8), -7, dtype=self.dtype)
            if verdict is not None:
                unchanged(table, lambda t=table, o=out: t.decode(o, *args), ".")
                assert (out == -7).all()
            else:
                assert table.decode(out, *args) == len(slots)
                np.testing.assert_array_equal(out[:, : len(slots)], expected)
            out_t = torch.full((3, 8), -7, dtype=self.torch_dtype)
            assert table.decode(out_t, *(torch.from_numpy(a) for a in args)) == len(slots)
            if verdict is not None:
                with pytest.raises(MRopeError, match="request"):
                    table.check()
            else:
                table.check()
                np.testing.assert_array_equal(out_t[:, : len(slots)].numpy(), expected)
            assert (out_t[:, len(slots) :] == -7).all()

    # -- refused calls of every kind --------------------------------------------------------------
    @rule(data=st.data())
    def refused(self, data: st.DataObject) -> None:
        fam = family("qwen2_vl")
        ids = [1, 2, 3]
        out = np.zeros((3, 8), dtype=self.dtype)
        read_only = np.zeros((3, 8), dtype=self.dtype)
        read_only.flags.writeable = False
        other = np.zeros((3, 8), dtype=np.int64 if self.floats else np.float32)
        shared = torch.zeros((1, 8), dtype=self.torch_dtype).expand(3, 8)
        one = np.array([0])
        t1 = torch.tensor([0])
        calls = {
            "slot type": (lambda t: t.add(2.5, fam, ids), "slot must be an int"),
            "slot bool": (lambda t: t.remove(True), "slot must be an int"),
            "contains": (lambda t: "a" in t, "slot must be an int"),
            "config": (lambda t: t.add(0, CONFIGS["qwen2_vl"], ids), "family must be"),
            "positions shape": (
                lambda t: t.add_positions(0, np.zeros((2, 3), np.int64), 0),
                r"shape \(3, L\)",
            ),
            # fractional positions that are not float32 runs (integer ones of any shape are held)
            "positions rule": (
                lambda t: t.add_positions(0, np.array([[0, 1.5, 2], [0, 5, 2], [0, 1, 9]], np.float32), 9),
                "not text" if self.floats else "float32 table",
            ),
            "out dtype": (lambda t: t.fill(other, one, one, one), "dtype|array|holds no|max_position"),
            "out read-only": (
                lambda t: t.fill(read_only, one, one, np.array([0])),
                "read-only|holds no|max_position",
            ),
            "out list": (lambda t: t.fill([[0] * 8] * 3, one, one, one), "numpy array"),
            "lengths": (lambda t: t.fill(out, np.array([0, 0]), one, one), "one length"),
            "float counts": (lambda t: t.fill(out, one, np.array([0.5]), one), "must hold integers"),
            "2-D slots": (lambda t: t.fill(out, np.zeros((1, 1), np.int64), one, one), "1-D"),
            "device num_tokens": (
                lambda t: t.fill(torch.zeros((3, 8), dtype=self.torch_dtype), t1, t1, t1),
                "num_tokens",
            ),
            "device shared out": (lambda t: t.fill(shared, t1, t1, t1, num_tokens=1), "sharing memory"),
            "device float slots": (
                lambda t: t.decode(torch.zeros((3, 8), dtype=self.torch_dtype), t1.float(), t1),
                "integer",
            ),
            "reserve": (lambda t: t.reserve(segments=-1), "segments"),
        }
        name = data.draw(st.sampled_from(sorted(calls)), label="refused call")
        call, match = calls[name]
        for table in self.tables:
            unchanged(table, lambda t=table: call(t), match)
            table.check()

    @precondition(lambda self: self.tables and not self.tables[0].frozen)
    @rule(segments=st.integers(0, 200))
    def reserve_and_freeze(self, segments: int) -> None:
        """After this, an add that needs growth is refused ("frozen"); the device scratch is reserved
        for every step drawn here (test_table checks its refusal)."""
        for table in self.tables:
            table.reserve(segments=segments, tokens=4096)
            assert table.pool_capacity >= segments
            table.freeze()

    # -- after every step -----------------------------------------------------------------------
    @invariant()
    def every_live_request(self) -> None:
        for table in self.tables:
            assert table.num_requests == len(self.live)
            for slot in range(self.slots):
                assert (slot in table) == (slot in self.live)
            for slot, (positions, delta) in self.live.items():
                length = positions.shape[1]
                assert table.prompt_length(slot) == length
                expected = reference(positions, delta, 0, length + 2, self.dtype)
                out = np.empty((3, length + 2), dtype=self.dtype)
                if self._position(length + 1, delta) >= self.position_bound:
                    continue  # the two indices past the prompt would reach it
                assert table.fill(out, np.array([slot]), np.array([0]), np.array([length + 2])) == length + 2
                np.testing.assert_array_equal(out, expected)
                out_t = torch.empty((3, length + 2), dtype=self.torch_dtype)
                one = torch.tensor([slot])
                table.fill(out_t, one, torch.tensor([0]), torch.tensor([length + 2]), num_tokens=length + 2)
                table.check()
                np.testing.assert_array_equal(out_t.numpy(), expected)


TableMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_table_machine = TableMachine.TestCase
