"""The device path of :class:`mrope.PositionTable`: the torch backend's primitives (:mod:`mrope.render.torch`:
segment lookup, render at segments, decode tail) composed into the step, on device tensors.

The table's state (:class:`._state.SlotState`: the pool and per-slot info) is mirrored on the device
(copied there at admission, the only host-to-device traffic: on CUDA from a pinned staging ring,
asynchronously, so that admitting a request never waits for the work queued on the device;
:mod:`.staging`). A step is fixed-shape torch ops with N
given by the caller: no ``.item()``, no ``nonzero``, no boolean-mask indexing, no copy to the host, so
it neither synchronizes nor blocks CUDA graph capture. Bad values (a free slot, a negative count, a position
reaching ``max_position``) cannot raise without a synchronization: their columns get 0 and a device
counter records them; :meth:`DeviceTable.check` (called by :meth:`PositionTable.check`) raises later.
:meth:`DeviceTable.fill_ragged` runs as one Triton kernel (:mod:`.triton_step`) where it can, with the same
rules and the same counter.

A table whose requests give other rows than (t, h, w) (HunYuan-VL: the state's ``rows``) writes the
rendered rows into their rows of ``out`` (reversed where the family reverses them: one ``index_copy_``)
and each token's index, or past its prompt the rendered ``index + delta``, into the index rows.

float32 tables (Qwen3-Omni) keep ``t0``, ``hw0`` and the deltas as float64 tensors (float32 values):
each position is the float64 sum rounded once to float32 on the write to ``out``, as on the host.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from .._arrays import overlapping
from .._errors import MRopeError
from ..core.rows import SegmentRows
from ..core.segments import START
from ..render.torch import find_segments, render_at, render_tail
from ._state import DEAD, DELTA, KEY, PLEN, SlotState
from .ragged import check_starts
from .staging import Staging

_DTYPE = torch.int64  # indices, keys, integer fields


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _overlaps(tensor: torch.Tensor) -> bool:
    """Whether two elements of ``tensor`` share memory (a zero or too small stride)."""
    return overlapping(tensor.shape, tensor.stride())


def _dense(x: Any) -> bool:
    """A dense (strided, not nested) tensor: the only kind the device path reads or writes."""
    return not x.is_nested and x.layout is torch.strided


def _kind(x: torch.Tensor) -> str:
    """``"nested"`` or the layout's name (``"sparse_coo"``, ...) of a tensor that is not dense."""
    return "nested" if x.is_nested else str(x.layout).removeprefix("torch.")


class DeviceTable:
    """The device copy of a :class:`PositionTable` and its torch ``fill`` and ``decode``.

    Created by the table (``device=`` anything but ``"cpu"``, or on the first torch call); engines use
    it through :meth:`PositionTable.fill` and :meth:`PositionTable.decode`.
    """

    def __init__(self, state: SlotState, device: Any, columns: int = 0) -> None:
        """The mirror of ``state`` on ``device``, its step scratch of ``columns`` columns (a loaded
        table's reserved columns: :mod:`._snapshot`)."""
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as err:
            raise MRopeError(f"device {device!r} is not a torch device: {err}") from None
        try:  # torch raises AssertionError or RuntimeError for a device it was not built for or lacks
            torch.empty(0, device=self.device)
        except (AssertionError, RuntimeError) as err:
            raise MRopeError(f"device {device!r} cannot be used: {err}") from None
        self.state = state
        self.max_slots = state.max_slots
        self.num_dims = state.num_dims
        self._orders: dict[SegmentRows, torch.Tensor] = {}  # the rows of out of the rendered rows
        self.out_dtype = torch.float32 if state.floats else torch.int64
        self.data = self.keys = self.floats = None  # the pool's, as in mrope.serving._pool
        self._staging = Staging(self.device)
        self._copy_pool()
        self.info = torch.from_numpy(state.info).to(self.device)  # (3, max_slots + 2)
        self.delta = None if state.deltas is None else torch.from_numpy(state.deltas).to(self.device)
        self.errors = torch.zeros((), dtype=_DTYPE, device=self.device)
        self.zero = torch.zeros((), dtype=_DTYPE, device=self.device)
        self.ramp = torch.arange(columns, dtype=_DTYPE, device=self.device)

    def check_device(self, device: Any) -> None:
        if device is not None and not _same_device(torch.device(device), self.device):
            raise MRopeError(f"tensors are on {device}, the table's device copy is on {self.device}")

    # -- admission (host to device) ---------------------------------------------------------------
    def sync(self, lo: int, hi: int, column: int) -> None:
        """Copy pool entries ``lo:hi`` and one info column from the host state, through the staging ring
        (on CUDA asynchronous: an admission does not wait for the device)."""
        pool = self.state.pool
        pairs = [
            (self.data[:, lo:hi], pool.data[:, lo:hi]),
            (self.info[:, column], self.state.info[:, column]),
        ]
        if self.floats is not None:
            pairs.append((self.floats[:, lo:hi], pool.floats[:, lo:hi]))
            pairs.append((self.delta[column : column + 1], self.state.deltas[column : column + 1]))
        self._staging.copy(pairs)

    def sync_all(self) -> None:
        """Copy the whole pool (after compaction; reallocated if it grew) and all info."""
        self._copy_pool()
        pairs = [(self.info, self.state.info)]
        if self.delta is not None:
            pairs.append((self.delta, self.state.deltas))
        self._staging.copy(pairs)

    def _copy_pool(self) -> None:
        pool = self.state.pool
        pairs = []
        for name in ("data", "floats"):
            host, mine = getattr(pool, name), getattr(self, name)
            if host is None:
                continue
            if mine is not None and tuple(mine.shape) == host.shape:
                pairs.append((mine, host))
            else:
                setattr(self, name, torch.from_numpy(host).to(self.device))
        self._staging.copy(pairs)
        self.keys = self.data[START]  # the view the lookup reads (the host pool's ``keys``)

    def check(self) -> None:
        """Raise :class:`MRopeError` if a step since the last check had bad input (synchronizes)."""
        count = int(self.errors.item())
        if count:
            self.errors.zero_()
            raise MRopeError(
                f"{count} request(s) of device-path steps had bad input (a slot holding no request, "
                "a negative count, an index reaching the table's bound, an index inside the prompt "
                "for decode(), a position reaching max_position, or tokens past num_tokens); their "
                "columns were written as 0"
            )

    # -- each step --------------------------------------------------------------------------------
    def fill(
        self, out: torch.Tensor, slots: Any, num_computed: Any, num_scheduled: Any, num_tokens: int | None
    ) -> int:
        """:meth:`PositionTable.fill` on device tensors; ``num_tokens`` (host int) is required.

        ``num_tokens`` may exceed ``sum(num_scheduled)`` (a fixed capacity, e.g. for a CUDA graph):
        the columns past the real tokens get 0. A smaller one is counted as bad input for each request
        whose tokens do not fit (their columns are not written past ``num_tokens``). Every request is
        checked, also in a step of no tokens (a free slot there is bad input, as on the host).
        """
        if not isinstance(num_tokens, (int, np.integer)) or isinstance(num_tokens, bool) or num_tokens < 0:
            raise MRopeError(
                f"num_tokens must be a host int >= 0 on the device path (the scheduler's N or a "
                f"fixed capacity), got {num_tokens!r}"
            )
        num = int(num_tokens)
        self._check_out(out, num)
        slots, nc, ns = (
            self._index(slots, "slots"),
            self._index(num_computed, "num_computed"),
            self._index(num_scheduled, "num_scheduled"),
        )
        n = slots.shape[0]
        if nc.shape[0] != n or ns.shape[0] != n:
            raise MRopeError(
                f"slots, num_computed and num_scheduled must have one length, got {n}, "
                f"{nc.shape[0]}, {ns.shape[0]}"
            )
        self._step(out, slots, nc, ns, num)
        return num

    def fill_ragged(
        self, out: Any, slots: Any, query_start_loc: Any, slot_num_computed: Any, backend: str = "auto"
    ) -> None:
        """:meth:`PositionTable.fill_ragged` on device tensors: one Triton launch (:mod:`.triton_step`) for
        an int64 table on a CUDA device, else (``backend="torch"``, a float32 table, Triton missing) the
        torch step of :meth:`fill`, which also writes 0 to the columns of ``out`` outside the queries.
        ``backend="triton"`` forces the kernel (tests run it on CPU tensors under Triton's interpreter)."""
        self._check_out(out, None)
        tensors = [
            self._index(x, name, int32=True)
            for x, name in (
                (slots, "slots"),
                (query_start_loc, "query_start_loc"),
                (slot_num_computed, "slot_num_computed"),
            )
        ]
        slots, starts, computed = tensors
        n = slots.shape[0]
        check_starts(n, starts.shape[0])
        if backend == "auto":
            triton_ok = self.out_dtype == torch.int64 and self.device.type == "cuda" and _triton_step()
            backend = "triton" if triton_ok else "torch"
        if backend == "triton":
            if self.out_dtype != torch.int64:
                raise MRopeError("the Triton step of fill_ragged serves int64 tables")
            from .triton_step import fill_ragged

            # the kernel reads the index tensors at stride 1
            slots, starts, computed = (x if x.stride(0) == 1 else x.contiguous() for x in tensors)
            fill_ragged(self, out, slots, starts, computed)
            return
        if backend != "torch":
            raise MRopeError(f"backend must be 'auto', 'triton' or 'torch', got {backend!r}")
        slots, starts, computed = (x if x.dtype == _DTYPE else x.to(_DTYPE) for x in tensors)
        starts = starts[: n + 1]
        ends = starts[1:]
        size = computed.shape[0]
        if size == 0:
            nc = torch.full_like(slots, -1)
        else:  # a slot without an entry of slot_num_computed reads -1: bad input, counted below
            nc = computed.index_select(0, slots.clamp(0, size - 1))
            nc = torch.where((slots >= 0) & (slots < size), nc, -1)
        self._step(out, slots, nc, ends - starts[:-1], out.shape[1], ends, starts[:1])

    def _step(
        self,
        out: torch.Tensor,
        slots: torch.Tensor,
        nc: torch.Tensor,
        ns: torch.Tensor,
        num: int,
        ends: torch.Tensor | None = None,
        first: torch.Tensor | None = None,
    ) -> None:
        """The torch step into ``out[:, :num]``: request ``i``'s tokens in the columns up to ``ends[i]``
        (default ``cumsum(ns)``) from ``first`` (a one-element tensor, default 0); other columns get 0."""
        n = slots.shape[0]
        col = self._ramp(num)  # before any write: a frozen table refuses to grow it
        if n == 0:
            out[:, :num].zero_()
            return
        # per request, the host path's checks (counted, not raised), also when the step has no token
        info, ok, delta = self._slots_info(slots)
        if ends is None:
            ends = torch.cumsum(ns, 0)
        max_index = self.state.max_index
        # the last index below max_index (``max_index - nc`` cannot wrap: nc >= 0); every request's
        # columns inside ``num_tokens`` (a smaller N would drop the last requests' tokens)
        ok &= (nc >= 0) & (ns >= 0) & (nc <= max_index) & (ns <= max_index - nc) & (ends <= num)
        if first is not None:
            ok &= first >= 0
        # the last index's position below the table's bound (the host path's rule; every table has one)
        last = nc + ns - 1 + delta
        ok &= (last if self.delta is None else last.to(torch.float32)) < self.state.max_position
        self.errors.add_(torch.logical_not(ok).sum())
        if num == 0:
            return
        req = torch.searchsorted(ends, col, right=True)  # request of each column; n past the real ones
        real = req < n
        if first is not None:
            real &= col >= first
        req.clamp_(max=n - 1)
        key = (info[KEY] + nc - ends + ns).index_select(0, req)
        key += col
        seg = find_segments(self.keys, key)  # (clamped: keys of bad requests only)
        pos = render_at(self.data, seg, key, self.floats)
        if self.floats is not None:
            pos = pos.to(torch.float32)
        valid = ok.index_select(0, req)
        valid &= real
        rows = self.state.rows
        if rows is None:
            torch.where(valid, pos, self.zero, out=out[:, :num])
            return
        index = key - info[KEY].index_select(0, req)
        self._write_rows(out[:, :num], rows, pos, valid, index, info[PLEN].index_select(0, req))

    def _write_rows(
        self,
        out: torch.Tensor,
        rows: SegmentRows,
        pos: torch.Tensor,
        valid: torch.Tensor,
        index: torch.Tensor,
        length: torch.Tensor,
    ) -> None:
        """The family's rows into ``out`` (num_dims, num): the rendered rows ``pos`` in the rows ``rows``
        gives them, and in the index rows each token's ``index`` below its prompt ``length``, else the
        rendered ``index + delta``; 0 in the columns not ``valid``."""
        rendered = torch.where(valid, pos, self.zero)
        out.index_copy_(0, self._order(rows), rendered)
        if rows.lead:
            inside = (index < length) & valid
            index_row = torch.where(inside, index.to(rendered.dtype), rendered[0])
            out[: rows.lead].copy_(index_row.expand(rows.lead, -1))

    def _order(self, rows: SegmentRows) -> torch.Tensor:
        """``rows.order`` as a device tensor (made once per rows, at the first step)."""
        order = self._orders.get(rows)
        if order is None:
            order = self._orders[rows] = torch.tensor(rows.order, dtype=_DTYPE, device=self.device)
        return order

    def decode(self, out: torch.Tensor, slots: Any, seq_lens: Any) -> int:
        """``seq_lens - 1 + delta[slots]`` on every row of ``out[:, :num_reqs]``, on the device."""
        slots, lens = self._index(slots, "slots"), self._index(seq_lens, "seq_lens")
        n = slots.shape[0]
        if lens.shape[0] != n:
            raise MRopeError(f"slots and seq_lens must have one length, got {n} and {lens.shape[0]}")
        self._check_out(out, n)
        if n == 0:
            return 0
        info, ok, delta = self._slots_info(slots)
        index = lens - 1
        ok &= (index >= info[PLEN]) & (index < self.state.max_index)
        pos = render_tail(index, delta)  # float32 in a float32 table: one rounding of the float64 sum
        ok &= pos[0] < self.state.max_position  # (every table has a bound on positions)
        self.errors.add_(torch.logical_not(ok).sum())
        num_dims = self.num_dims
        if num_dims != 3:  # every row the same past the prompt
            pos = pos[0].expand(num_dims, -1)
        torch.where(ok.expand(num_dims, n), pos, self.zero, out=out[:, :n])
        return n

    # -- internals --------------------------------------------------------------------------------
    def _slots_info(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Info (3, n) of ``slots``, whether each slot is live (out-of-range slots read a free column),
        and the slots' deltas (float64 in a float32 table)."""
        column = (slots + 1).clamp_(0, self.max_slots + 1)
        info = self.info.index_select(1, column)
        delta = info[DELTA] if self.delta is None else self.delta.index_select(0, column)
        return info, info[PLEN] != DEAD, delta

    def reserve(self, num: int) -> None:
        """Size the step scratch for ``num`` columns now (see :meth:`PositionTable.reserve`)."""
        if self.ramp.shape[0] < num:
            if self.state.pool.frozen:
                raise MRopeError(
                    f"the table is frozen (freeze()): its device scratch of {self.ramp.shape[0]} "
                    f"columns cannot grow to {num}"
                )
            try:  # torch raises RuntimeError (OutOfMemoryError is one) for a size it cannot allocate
                self.ramp = torch.arange(num, dtype=_DTYPE, device=self.device)
            except (RuntimeError, MemoryError) as err:
                raise MRopeError(
                    f"tokens={num}: a device scratch of {num} int64 columns ({num * 8 / 2**30:.1f} GiB) "
                    f"cannot be allocated on {self.device}: {err}"
                ) from None

    def _ramp(self, num: int) -> torch.Tensor:
        if self.ramp.shape[0] < num:  # grows during warm-up, before any graph capture
            if self.state.pool.frozen:
                raise MRopeError(
                    f"the table is frozen (freeze()): a device step of {num} columns needs more scratch "
                    f"than its {self.ramp.shape[0]} (reserve(tokens=...) before freezing)"
                )
            self.ramp = torch.arange(max(num, 2 * self.ramp.shape[0]), dtype=_DTYPE, device=self.device)
        return self.ramp[:num]

    def _check_out(self, out: Any, num: int | None) -> None:
        """``out`` a (num_dims, >= num) tensor of the table's dtype on its device (``num=None``: all of
        it)."""
        num_dims = self.num_dims
        if isinstance(out, torch.Tensor) and not _dense(out):
            raise MRopeError(
                f"out is a {_kind(out)} tensor: pass a dense (strided) ({num_dims}, n) "
                f"{self.out_dtype} tensor"
            )
        if (
            not isinstance(out, torch.Tensor)
            or out.dtype != self.out_dtype
            or out.dim() != 2
            or out.shape[0] != num_dims
        ):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise MRopeError(
                f"out must be a ({num_dims}, n) {self.out_dtype} tensor (the table's dtype"
                f"{' and num_dims' if num_dims != 3 else ''}), got {shape} {getattr(out, 'dtype', '')}"
            )
        if not _same_device(out.device, self.device):
            raise MRopeError(f"out is on {out.device}, the table's device copy is on {self.device}")
        if num is None:
            num = out.shape[1]
        if out.shape[1] < num:
            raise MRopeError(f"out has {out.shape[1]} columns, the step needs {num}")
        if not out.is_contiguous() and _overlaps(out[:, :num]):
            raise MRopeError(
                f"out has elements sharing memory (strides {out.stride()}, e.g. an expand()ed tensor): "
                "pass a tensor that can hold one position per element"
            )

    def _index(self, x: Any, name: str, int32: bool = False) -> torch.Tensor:
        """``x`` checked (a 1-D integer tensor on the device), as int64 (``int32``: int32 kept)."""
        if not isinstance(x, torch.Tensor):
            raise MRopeError(
                f"{name} must be a torch tensor on {self.device} on the device path, got {type(x).__name__}"
            )
        if not _dense(x):
            raise MRopeError(f"{name} is a {_kind(x)} tensor: pass a dense (strided) 1-D integer tensor")
        if x.dim() != 1 or x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise MRopeError(
                f"{name} must be a 1-D integer tensor, got shape {tuple(x.shape)} dtype {x.dtype}"
            )
        if not _same_device(x.device, self.device):
            raise MRopeError(f"{name} is on {x.device}, the table's device copy is on {self.device}")
        return x if x.dtype == _DTYPE or (int32 and x.dtype == torch.int32) else x.to(_DTYPE)


@functools.cache
def _triton_step() -> bool:
    """Whether the Triton step (:mod:`.triton_step`) imports: Triton is an optional extra."""
    try:
        from . import triton_step  # noqa: F401
    except ImportError:
        return False
    return True
