"""The host step of a :class:`mrope.serving.PositionTable`: ``fill`` and ``decode`` vectorized with numpy,
for int64 and float32 tables alike.

:class:`HostStep` converts and checks the step's index arrays, then composes the numpy backend's
primitives (:mod:`mrope.render.numpy`) once (:meth:`HostStep._positions`): one ``searchsorted`` over the
pool's keys (``base << 32 | start``, sorted over the whole pool, see :mod:`._pool`) finds the segment of
every scheduled token of every request and ``render_at`` renders them; a step whose tokens all lie past
their prompts (decode, speculative decode) skips the search: ``index + delta``, the decode tail. The count
of numpy calls is the cost (~1 us each, whatever the batch): an int64 table's checks are a few reductions
over per-request scratch kept between steps, compared as bytes where they can be. A float32 table
(Qwen3-Omni) reads ``t0``, ``hw0`` and the deltas from its float64 arrays and rounds each position once.

It is also the reference for the compiled step (:mod:`.compiled_step`): where the kernel refuses a step,
the table runs this one, whose checks (:mod:`._checks`) raise the error, so both refuse the same input
with the same message. The table's lock is held around every call (the scratch is shared state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from ..render.numpy import find_segments, render_at, render_tail
from ._checks import (
    FLOAT32,
    INT32,
    INT64,
    SIGN,
    as_index,
    check_max,
    check_out,
    refuse_prompt_decode,
    validate,
)
from ._state import DEAD, DELTA, KEY, PLEN, SlotState

#: rows of the per-request scratch: LAST (end + delta), END (num_computed + num_scheduled), NC and NS
#: (count ^ SIGN), then the slots' info rows (PLEN, DELTA, KEY) from INFO on
LAST, END, NC, NS, INFO = range(5)
_INT32_MAX = (1 << 31) - 1


class HostStep:
    """The host step over one table's state (:class:`._state.SlotState`) and its scratch, grown to the
    largest step seen (never shrunk)."""

    def __init__(self, state: SlotState) -> None:
        # the state's parts the step reads, bound once (none is ever replaced: the pool reallocates its
        # own arrays)
        self._state = state
        self._info, self._pool = state.info, state.pool
        self._floats = state.floats
        self.dtype = FLOAT32 if state.floats else INT64  # out's
        self._max_slots = state.max_slots
        self._max_index = state.max_index  # sequence indices stay below
        self._max_position = state.max_position  # positions stay below (``state.index_limit``: see fill)
        self._unsigned_bound = state.max_index ^ SIGN  # the bound of counts ``^ SIGN`` (see fill)
        self._flags = np.empty(0, dtype=bool)
        self._grow_scratch(64)
        self._scratch = np.empty((4, 0), dtype=np.int64)
        self._arange = np.arange(0, dtype=np.int64)

    def decode(self, out: Any, slots: Any, seq_lens: Any) -> int:
        """:meth:`PositionTable.decode`'s numpy path: :meth:`fill` of index ``seq_lens - 1``, one token
        per request."""
        lens = seq_lens
        if (
            type(lens) is not np.ndarray
            or (lens.dtype is not INT64 and lens.dtype is not INT32)
            or lens.ndim != 1
        ):
            lens = as_index(seq_lens, "seq_lens")
        return self.fill(
            out, slots, np.subtract(lens, 1, dtype=np.int64), np.ones_like(lens), None, seq_lens=lens
        )

    def fill(
        self, out: Any, slots: Any, nc: Any, ns: Any, num_tokens: int | None, seq_lens: Any = None
    ) -> int:
        """:meth:`PositionTable.fill`'s numpy path (and its error messages, for the compiled path too);
        ``seq_lens``: :meth:`decode`'s (``nc`` is ``seq_lens - 1``), named in its messages."""
        if not isinstance(out, np.ndarray):
            raise MRopeError(f"out must be a numpy array (or a torch tensor), got {type(out).__name__}")
        # the checks of the decode path cost a few numpy calls: keep Python overhead out of it
        if (
            type(slots) is not np.ndarray
            or (slots.dtype is not INT64 and slots.dtype is not INT32)
            or slots.ndim != 1
        ):
            slots = as_index(slots, "slots")
        if type(nc) is not np.ndarray or (nc.dtype is not INT64 and nc.dtype is not INT32) or nc.ndim != 1:
            nc = as_index(nc, "num_computed")
        if type(ns) is not np.ndarray or (ns.dtype is not INT64 and ns.dtype is not INT32) or ns.ndim != 1:
            ns = as_index(ns, "num_scheduled")
        n = slots.shape[0]
        decode = seq_lens is not None
        if decode and seq_lens.shape[0] != n:
            raise MRopeError(f"slots and seq_lens must have one length, got {n} and {seq_lens.shape[0]}")
        if nc.shape[0] != n or ns.shape[0] != n:
            raise MRopeError(
                f"slots, num_computed and num_scheduled must have one length, got {n}, "
                f"{nc.shape[0]}, {ns.shape[0]}"
            )
        if n == 0:
            return check_out(out, 0, num_tokens, self.dtype)
        if self._floats:
            return self._fill_float(out, slots, nc, ns, num_tokens, seq_lens)
        if self._flags.shape[0] < n:
            self._grow_scratch(n)
        # per-request scratch: rows LAST (end + delta), END (num_computed + num_scheduled),
        # NC and NS (count ^ SIGN: counts ordered as unsigned, a negative one above every bound, so
        # that one max checks both ends and ``end`` cannot wrap), then the slots' info
        # (PLEN, DELTA, KEY), taken there: one max over rows END ... PLEN checks every bound (LAST only
        # where a last index reaches the state's index limit)
        scratch = self._slot_info[:, :n]
        # slot s's info is column s + 1; columns 0 and max_slots + 1 are free that catch
        # out-of-range slots (mode="clip"), so one take validates slots too
        index = np.add(slots, 1, out=self._slot_scratch[:n])
        info = self._info.take(index, axis=1, mode="clip", out=scratch[INFO:])
        before = np.less(nc, info[PLEN], out=self._flags[:n])  # inside the prompt, or a free slot
        # decode (one token per request, past its prompt)? Compared as bytes: one memcmp each, several
        # times cheaper than a ufunc and a count
        ones = self._ones if ns.dtype is INT64 else self._ones32
        if ns.tobytes() == ones[: ns.itemsize * n] and before.tobytes() == self._zeros[:n]:
            # below the state's index limit, every index is below the table's bound and its position
            # below max_position (an int32 index is below the limit unless a delta is positive)
            limit = self._state.index_limit
            beyond = (nc.dtype is not INT32 or limit <= _INT32_MAX) and np.maximum.reduce(nc) >= limit
            if beyond:
                validate(self._max_slots, slots, nc, ns, info, self._max_index, seq_lens)
            check_out(out, n, num_tokens)
            position = np.add(nc, info[DELTA], out=index)
            if beyond:
                check_max(position, self._state)
            render_tail(out[:, :n], position)
            return n
        end = np.add(nc, ns, out=scratch[END], dtype=np.int64)
        np.bitwise_xor(nc, SIGN, out=scratch[NC], dtype=np.int64)
        np.bitwise_xor(ns, SIGN, out=scratch[NS], dtype=np.int64)
        highest = [0, *np.maximum.reduce(scratch[END : INFO + 1], axis=1).tolist()]
        if (
            highest[INFO] == DEAD
            or highest[NC] > self._unsigned_bound
            or highest[NS] > self._unsigned_bound
            or highest[END] > self._max_index
        ):
            validate(self._max_slots, slots, nc, ns, info, self._max_index, seq_lens)  # raises
        if decode:  # here only with an index inside its prompt (not the fast path above)
            refuse_prompt_decode(slots, nc, info[PLEN])
        cum = np.add.accumulate(ns, out=scratch[NC])  # each request's last column + 1 (int64)
        num = int(cum[-1])
        check_out(out, num, num_tokens)
        # the last index's position (inside the prompt, it is at most the prompt's largest, checked at
        # add); requests without scheduled tokens too: one rule on every path. Only a last index at or
        # past the state's index limit can reach max_position (see :meth:`SlotState.insert`)
        last = None
        if highest[END] > self._state.index_limit:
            last = np.add(end, info[DELTA], out=scratch[LAST])
            if np.maximum.reduce(last) > self._max_position:
                check_max(last - 1, self._state)
        if num == 0:
            return 0
        # per request, index minus column: end - cum
        first = np.subtract(end, cum, out=scratch[END])
        past = before.tobytes() == self._zeros[:n]  # every token past its prompt: the decode tail
        self._positions(out, first, ns, num, info, info[DELTA] if past else None)
        return num

    def _fill_float(
        self,
        out: np.ndarray,
        slots: np.ndarray,
        nc: np.ndarray,
        ns: np.ndarray,
        num_tokens: int | None,
        seq_lens: np.ndarray | None,
    ) -> int:
        """:meth:`fill`'s checks of a float32 table (arguments already index arrays of one length, at
        least one request), then its positions: the formula in float64 (exact) rounded once to float32,
        as :func:`mrope.render.render_all` renders ``family.positions()``; past the prompt ``float64(index)
        + delta`` rounded once (below 2**24, transformers' float32 ``index + delta``)."""
        state = self._state
        column = slots + 1  # out-of-range slots read the free columns at both ends (mode="clip")
        info = state.info.take(column, axis=1, mode="clip")
        num = validate(state.max_slots, slots, nc, ns, info, state.max_index, seq_lens)
        if seq_lens is not None and (nc < info[PLEN]).any():
            refuse_prompt_decode(slots, nc, info[PLEN])
        check_out(out, num, num_tokens, FLOAT32)
        delta = state.deltas.take(column, mode="clip")
        # the last index's position (the int64 step's rule), as float32 rounds it (float32 holds the
        # integers below the table's bound, 2**24 at most: a position that rounds to it is refused)
        check_max((nc + ns - 1 + delta).astype(np.float32), state)
        if num == 0:
            return 0
        first = np.subtract(nc + ns, np.cumsum(ns), dtype=np.int64)  # per request, index minus column
        self._positions(out, first, ns, num, info, delta if (nc >= info[PLEN]).all() else None)
        return num

    def _positions(
        self,
        out: np.ndarray,
        first: np.ndarray,
        ns: np.ndarray,
        num: int,
        info: np.ndarray,
        delta: np.ndarray | None,
    ) -> None:
        """The positions of the step's ``num`` tokens into ``out[:, :num]``: request ``i``'s ``ns[i]``
        tokens at consecutive columns, its index minus its first column ``first[i]`` (int64, overwritten).
        ``delta`` (per request) where every token lies past its prompt: the decode tail (an int64 delta
        folded into ``first``, a float32 table's added per token, one rounding); ``None``: the lookup and
        the render of each token in the pool, keyed by its slot's key (``info[KEY]``)."""
        dest = out[:, :num]
        if delta is not None:
            if self._floats:
                index = first.repeat(ns)
                index += self._ramp(num)
                render_tail(dest, index, delta.repeat(ns))
                return
            # each request's delta is folded into its first index (one add per request, not per token)
            index = np.add(first, delta, out=first).repeat(ns)
            index += self._ramp(num)
            render_tail(dest, index)
            return
        first += info[KEY]
        key = first.repeat(ns)
        key += self._ramp(num)
        pool = self._pool
        # the pool's rows are a segment table's, keyed base << 32 | index: one lookup, one render
        seg = find_segments(pool.keys[: pool.top], key)
        render_at(pool.data, seg, key, dest, floats=pool.floats, scratch=self._scratch_tokens(num))

    def _scratch_tokens(self, num: int) -> np.ndarray:
        """(4, num) int64 scratch for :func:`mrope.render.numpy.render_at` (grown, never shrunk)."""
        if self._scratch.shape[1] < num:
            self._scratch = np.empty((4, max(num, 2 * self._scratch.shape[1])), dtype=np.int64)
        return self._scratch[:, :num]

    def _grow_scratch(self, n: int) -> None:
        """Scratch for steps of ``n`` requests (grown, never shrunk)."""
        size = max(n, 2 * self._flags.shape[0])
        self._flags = np.empty(size, dtype=bool)
        self._slot_scratch = np.empty(size, dtype=np.int64)
        self._slot_info = np.empty((INFO + 3, size), dtype=np.int64)
        self._ones = np.ones(size, dtype=np.int64).tobytes()
        self._ones32 = np.ones(size, dtype=np.int32).tobytes()
        self._zeros = bytes(size)

    def _ramp(self, num: int) -> np.ndarray:
        """``arange(num)`` int64, a view of one kept array (grown, never shrunk)."""
        if self._arange.shape[0] < num:
            self._arange = np.arange(max(num, 2 * self._arange.shape[0]), dtype=np.int64)
        return self._arange[:num]
