"""The positions state of a serving engine's running requests: :class:`PositionTable`, the facade.

An engine runs each request in a *slot* (vLLM's persistent batch row, SGLang's request pool index):
the table's state (:class:`._state.SlotState`) keeps, per slot, the request's placed segments
(O(images + video frames), not O(tokens)) in one flat pool (:mod:`._pool`): the request in slot ``s``
owns the pool entries from its ``base``, the last one a text segment at the prompt length that never
ends (``index + delta``, the decode tail). A segment's key is ``base << 32 | start``; free entries
hold ``entry << 32``, so the keys are sorted over the whole pool and one ``searchsorted`` finds the
segment of every scheduled token of every request. Positions then follow the render formula of
:mod:`mrope.core.segments` (offsets counted from each segment's ``origin``).

This module admits and removes requests and sends each step to its path: numpy ``out`` to the host step
(:mod:`.host_step`, or where numba imports the compiled step of :mod:`.compiled_step`: one pass over the
step's tokens, the same positions and the same errors; ``backend="numpy"`` or ``MROPE_NUMBA=0`` keep
numpy), torch tensors to the device mirror of :mod:`.device`. :meth:`PositionTable.fill_ragged` takes
vLLM Model Runner V2's layout (queries at ``query_start_loc``, counts per slot): the same step on the
host, one Triton launch (:mod:`.triton_step`) on a GPU.

A table of ``num_dims`` rows (HunYuan-VL: 4) holds requests whose family states how its rows follow from
the rendered rows (:attr:`mrope.Family.segment_rows`): each step renders into the view of ``out`` that
takes the rendered rows and writes the index rows beside them (:mod:`.index_rows`; on the device,
:mod:`.device`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import MRopeError
from ..core.one_row import OneRowLayout
from ..core.rows import PLAIN_ROWS, SegmentRows, check_num_dims
from ..families import Family, MultimodalInputs
from ._checks import FLOAT32 as _FLOAT32
from ._checks import INT64 as _INT64
from ._checks import check_sizes, is_int, table_dtype
from ._pool import MAX_CAPACITY as _MAX_CAPACITY
from ._snapshot import restore, settings_of, snapshot
from ._state import SlotState, state_bytes
from .intake import from_positions, nonempty, positions_input
from .packed import PackedPrompt
from .steps import Steps

#: what reaches a position past ``max_position`` (the message of :meth:`PositionTable._insert`): a request
#: from its inputs (:meth:`PositionTable.add`), or from the positions given (``add_positions``)
_FROM_INPUTS = (
    "the prompt reaches position {largest} (its positions follow from its tokens, its items' grids and "
    "second_per_grid_ts)"
)
_FROM_POSITIONS = "the positions given reach {largest} (their largest, or the last index + delta)"


class PositionTable:
    """M-RoPE positions of a serving engine's running requests, indexed by the engine's request slot.

    Parameters
    ----------
    max_requests : int
        Number of slots ``0 ... max_requests - 1`` (the engine's maximum number of running requests),
        at most 2**31.
    device : str or torch.device, default ``"cpu"``
        Where the torch path (:meth:`fill` and :meth:`decode` with torch tensors) runs. Anything but
        ``"cpu"`` keeps a copy of the table on that device, updated at :meth:`add` and :meth:`remove`.
        The numpy path (numpy ``out``) is always available.
    max_position : int, optional
        Exclusive bound on positions (e.g. the size of the model's cos/sin cache), below 2**63: adding
        a request, or filling a step, that would reach it raises :class:`MRopeError`. Whatever it is, a
        table hands out no position past 2**31 - 1, the largest position mrope hands out (an engine may
        narrow positions to int32), and a float32 table none from 2**24 on (float32 rounds larger
        integers): those bound every table, ``max_position`` given or not.
    pool_capacity : int, optional
        Initial number of segment entries of the pool (default ``8 * max_requests + 64``; a request
        takes its segments + 1), at most 2**31 (the entries its keys index). Each slot keeps the room
        of its largest request (rounded up to a power of two), so that steady admission and removal, in
        any order of sizes, neither compacts nor grows the pool once each slot has held its largest
        request; an :meth:`add` that fits neither its slot's room nor the pool's free end compacts the
        pool, and grows it (at least doubled) where less than 3/4 of it would be free. Growing
        reallocates the device
        copy: before capturing CUDA graphs, :meth:`reserve` the size needed, then :meth:`freeze`.
        Sizes beyond these bounds, or beyond memory, raise :class:`MRopeError` naming them.
    dtype : ``numpy.int64`` (default) or ``numpy.float32`` (numpy, torch or string dtype)
        The positions' dtype, which ``out`` must have. int64 tables hold every family but Qwen3-Omni,
        whose positions are fractional float32: serve it with a float32 table. A float32 table follows
        transformers' float32 arithmetic: a prompt position is ``family.positions()``'s float32 value
        (each rounded once from the exact ``t0 + offset``), and an index ``j`` past the prompt gets
        ``float32(j) + delta`` in float32, ``delta`` being float32 too; sequence indices stay below
        2**24, where ``float32(j)`` is exact (beyond it :class:`MRopeError`), and so do positions (a
        prompt reaching 2**24, e.g. a video of large ``second_per_grid_ts``, or an index whose ``index +
        delta`` would, is refused: float32 would round it). Other families go into a float32 table too
        (their positions as float32, exact: all below 2**24). The int64 path is not
        slowed down by float32 tables: each table has one dtype and one step.
    backend : ``"auto"`` (default), ``"numba"`` or ``"numpy"``
        How an int64 table's numpy-path :meth:`fill` and :meth:`decode` run: ``"numba"`` compiles the
        step into one pass over its tokens (:mod:`mrope.serving.compiled_step`; needs numba, which every
        vLLM install has); ``"numpy"`` keeps the vectorized numpy step; ``"auto"`` takes numba where it
        can be imported, unless the environment variable ``MROPE_NUMBA`` is ``0`` (or ``false``, ``off``,
        ``no``, in any case). Both write the same positions and raise the same errors. float32 tables
        always use numpy. ``table.backend`` tells which one runs. numba compiles the step on its first
        call for each combination of array types (seconds; then from its on-disk cache, a fraction of a
        second per process): an engine makes that call at start-up with an empty step of its real
        arrays, e.g. ``fill(out, slots[:0], num_computed[:0], num_scheduled[:0])``.
    num_dims : int, default 3
        Rows of positions of the table's requests (``out`` has that many rows): the family's
        ``num_dims`` (HunYuan-VL: ``len(mrope_section)``, 4 in its checkpoints). :meth:`add` refuses a
        family of other rows; the first request fixes how the rows follow from the rendered (t, h, w)
        (:attr:`mrope.Family.segment_rows`), and a later family whose rows differ is refused too.

    Notes
    -----
    A table may be shared by threads: every call holds the table's lock (a fraction of a microsecond),
    so calls from several threads run one at a time and each sees the table between calls.

    A table pickles (a data loader's worker processes pickle what they hold), and ``copy.copy`` and
    ``copy.deepcopy`` make an independent table: the same requests, nothing shared (a shallow copy that
    shared the pool would let each table's :meth:`add` overwrite the other's requests). The compiled
    steps and a device mirror are made anew where the table is loaded (:mod:`._snapshot`).

    Examples
    --------
    >>> table = PositionTable(256)
    >>> table.add(0, family, input_ids, image_grid_thw=grid)       # admission
    >>> n = table.fill(positions_np[:, :capacity], slots, num_computed, num_scheduled)  # each step
    >>> table.remove(0)                                             # finish
    """

    def __init__(
        self,
        max_requests: int,
        *,
        device: Any = "cpu",
        max_position: int | None = None,
        pool_capacity: int | None = None,
        dtype: Any = np.int64,
        backend: str = "auto",
        num_dims: int = 3,
    ) -> None:
        capacity = check_sizes(max_requests, max_position, pool_capacity)
        num_dims = check_num_dims(num_dims, "num_dims")
        self.dtype = table_dtype(dtype)
        self.max_requests = int(max_requests)
        self.max_position = None if max_position is None else int(max_position)
        floats = self.dtype == _FLOAT32
        self._floats = floats
        try:
            state = SlotState(
                self.max_requests,
                floats=floats,
                capacity=capacity,
                max_position=self.max_position,
                num_dims=int(num_dims),
            )
        except MemoryError:
            raise MRopeError(
                f"a table of max_requests={self.max_requests} and pool_capacity={capacity} does not fit "
                f"in memory (about {state_bytes(self.max_requests, capacity, floats) / 2**30:.1f} GiB)"
            ) from None
        self._state = state
        # the state's parts the table reads, bound once (none is ever replaced: the pool reallocates
        # its own arrays)
        self._pool, self._lock = state.pool, state.lock
        self.max_index = state.max_index  # sequence indices stay below
        self.num_dims = state.num_dims
        self._steps = Steps(state, backend, device)
        self.backend = self._steps.backend
        self._backend_asked = backend
        if not (isinstance(device, str) and device == "cpu"):
            self._steps.mirror()

    # -- pickle and copy (see _snapshot) ----------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            settings = {
                "max_requests": self.max_requests,
                "max_position": self.max_position,
                "dtype": self.dtype,
                "backend": self._backend_asked,
                "num_dims": self.num_dims,
            }
            return snapshot(settings, self._state, self._steps)

    def __setstate__(self, values: dict[str, Any]) -> None:
        self.__init__(**settings_of(values), pool_capacity=1)  # type: ignore[misc]  # (pool replaced)
        restore(values, self._state, self._steps)

    def __copy__(self) -> PositionTable:
        """An independent table (as :meth:`__deepcopy__`): a copy sharing the pool would corrupt both."""
        return self.__deepcopy__({})

    def __deepcopy__(self, memo: dict[int, Any]) -> PositionTable:
        copied = type(self).__new__(type(self))
        copied.__setstate__(self.__getstate__())  # the snapshot's arrays are copies already
        memo[id(self)] = copied
        return copied

    # -- queries ----------------------------------------------------------------------------------
    def __contains__(self, slot: int) -> bool:
        """Whether ``slot`` holds a request (an int out of range holds none; anything else but an int
        raises :class:`MRopeError`)."""
        if not is_int(slot):
            raise MRopeError(f"slot must be an int, got {slot!r}")
        with self._lock:
            return 0 <= slot < self.max_requests and self._state.is_live(slot)

    @property
    def num_requests(self) -> int:
        with self._lock:
            return self._pool.num_live()

    def prompt_length(self, slot: int) -> int:
        with self._lock:
            return self._state.prompt_length(self._live_slot(slot))

    def delta(self, slot: int) -> int | float:
        """``max(prompt positions) + 1 - prompt length``: the decode offset of ``slot`` (a float,
        holding a float32 value, in a float32 table)."""
        with self._lock:
            return self._state.delta(self._live_slot(slot))

    def state_nbytes(self, slot: int) -> int:
        """Bytes of state ``slot`` holds: its segments (decode tail included: a key and five int64
        fields, two float64 more in a float32 table) and its info."""
        with self._lock:
            return self._state.nbytes(self._live_slot(slot))

    @property
    def pool_capacity(self) -> int:
        """Segment entries the pool holds now (grown by :meth:`add` and :meth:`reserve`)."""
        return self._pool.capacity

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` fixed the table's arrays."""
        return self._pool.frozen

    def reserve(self, *, segments: int | None = None, tokens: int | None = None) -> None:
        """Allocate now what later calls would grow into: a segment pool of at least ``segments``
        entries (live requests' included; each request takes its segments + 1), and on the device path
        a step scratch for ``tokens`` columns (``num_tokens`` of :meth:`fill`, the largest a captured
        graph runs). Growing reallocates the device copy: call it before capturing CUDA graphs, then
        :meth:`freeze`. Raises :class:`MRopeError` (and grows nothing) on a frozen table that would have
        to grow, for ``segments`` beyond 2**31, a size that cannot be allocated, or ``tokens`` without
        torch (the device path's scratch)."""
        for name, value in (("segments", segments), ("tokens", tokens)):
            if value is not None and (not is_int(value) or value < 0):
                raise MRopeError(f"{name} must be an int >= 0 or None, got {value!r}")
        if segments is not None and segments > _MAX_CAPACITY:
            raise MRopeError(
                f"segments must be at most {_MAX_CAPACITY} (2**31, the entries the pool's keys index), "
                f"got {segments}"
            )
        with self._lock:
            pool = self._pool
            grow = segments is not None and segments > pool.capacity
            if grow and pool.frozen:
                raise MRopeError(
                    f"the table is frozen (freeze()): its pool of {pool.capacity} entries cannot "
                    f"grow to {segments}"
                )
            # everything that can refuse runs before the pool grows: the device scratch first (its
            # growth changes no state a caller sees)
            if tokens is not None:
                why = "reserve(tokens=...) sizes the device path's scratch, which"
                self._steps.mirror(why=why).reserve(int(tokens))
            if grow:
                self._state.grow(int(segments))
                if self._steps.device is not None:
                    self._steps.device.sync_all()

    def freeze(self) -> None:
        """Fix the addresses of the table's device tensors (e.g. before CUDA graph capture): from now on
        nothing is reallocated. An :meth:`add` that would grow the pool, or a device step of more
        columns than the device scratch holds (see :meth:`reserve`), raises :class:`MRopeError` and
        changes nothing. Compaction still runs, in place."""
        with self._lock:
            self._pool.frozen = True

    # -- admission --------------------------------------------------------------------------------
    def add(
        self,
        slot: int,
        family: Any,
        input_ids: Any,
        inputs: MultimodalInputs | None = None,
        *,
        replace: bool = False,
        **keywords: Any,
    ) -> None:
        """Register the request in ``slot`` from its prompt (or, after preemption, prompt + generated).

        Parameters
        ----------
        slot : int, in ``[0, max_requests)``, free unless ``replace`` (the engine's slot of the request)
        family : a family from :func:`mrope.from_config`
        input_ids : shape (L,), integer; list, numpy or torch
        inputs : :class:`mrope.MultimodalInputs`, optional, or its fields as keywords (``**keywords``), as
            :meth:`Family.positions` takes them: the grids, seconds, audio inputs, the offsets (vLLM:
            ``mm_feature.mm_position.offset``) and ``frame_offsets`` with which the prompt is not
            scanned for its items, or the items (an engine's per-item records, taken without array
            conversions), and the family's own inputs
        replace : bool; True: a request ``slot`` holds is replaced in the same call, in the slot's pool
            entries where the new one fits them (an engine that overwrites a slot at admission, as
            vLLM's V2 runner does); a refused call leaves it in place

        Raises
        ------
        MRopeError
            ``slot`` out of range or (without ``replace``) already live; a family whose rows of
            positions are not the table's (its ``num_dims``, or their order after the first request's);
            anything :meth:`Family.segments` refuses (audio inputs to a family without audio among them,
            offsets that do not fit the prompt); a
            Qwen3-Omni request in an int64 table; positions reaching ``max_position``, or past 2**31 - 1
            (float32 tables: reaching 2**24); a float32 table's prompt of 2**24 tokens or more. The
            table is then unchanged.

        Notes
        -----
        The request's state is its placed segments: O(images + video frames), not O(tokens).
        """
        if not isinstance(family, Family):
            raise MRopeError(
                f"family must be a family from mrope.from_config(config), got {type(family).__name__}"
            )
        rows = family.segment_rows
        if rows is not self._family_rows:
            self._check_rows(rows, family.model_type)
        if keywords or type(inputs) is not MultimodalInputs:
            inputs = MultimodalInputs.gather(inputs, keywords)
        segments, delta = family.segments(input_ids, inputs, layout=not self._floats)
        if type(segments) is OneRowLayout:  # a few blocks: written straight into the pool
            length = segments.length
            if length:
                self._insert(slot, segments, None, length, delta, length - 1 + delta, replace, rows)
                return
            segments = segments.table()  # a prompt of no tokens: its one empty segment is dropped
        table, length = segments, segments.length
        if not self._floats and table.data.dtype is not _INT64:
            raise MRopeError(
                f"slot {slot}: {family.model_type} has float32 positions (fractional video times), "
                f"this table holds int64: create it with PositionTable(..., dtype=np.float32)"
            )
        ints, floats = nonempty(table, floats=self._floats)
        largest = (length - 1) + delta if not self._floats else np.float32(length - 1) + delta
        self._insert(slot, ints, floats, length, delta, largest, replace, rows)

    def add_positions(self, slot: int, positions: Any, delta: int | float) -> None:
        """Register the request in ``slot`` from precomputed prompt positions.

        Parameters
        ----------
        positions : shape (num_dims, L), numpy or torch; integer, or (float32 tables) float32: the rows
            of the table's requests (a table of other rows than (t, h, w) takes them once its first
            :meth:`add` has fixed how they follow from the rendered rows; its index rows must hold each
            token's index). Only segments are kept: text runs and vision frames, and integer
            positions of any shape (an engine's own rule: frames whose h and w start on different
            bases, a chunk cut inside a frame row, lone tokens; at worst a segment per token). In
            float32 tables, fractional runs whose positions are not ``float32(first + offset)`` (a
            Qwen3-Omni audio split by video frames) raise :class:`MRopeError` (use :meth:`add`).
        delta : int (float32 tables: int or float, taken as float32), the offset of positions past the
            prompt (``index + delta``).
        """
        floats = self._floats
        rows = self._family_rows or PLAIN_ROWS
        if rows.num_dims != self.num_dims:
            raise MRopeError(
                f"add_positions: this table's {self.num_dims} rows follow from the rendered rows (t, h, w) "
                "as its requests' family states (Family.segment_rows), which its first add() fixes: "
                "add() a request first"
            )
        pos, delta = positions_input(positions, delta, floats=floats, num_dims=rows.num_dims)
        rendered = pos
        if not rows.plain:
            index = np.arange(pos.shape[1])
            if (pos[: rows.lead] != index).any():
                raise MRopeError(
                    f"positions are the rows {rows.describe()}: the index rows must hold each token's index"
                )
            rendered = np.ascontiguousarray(rows.rendered(pos))
        ints, fields = from_positions(rendered, what=f"positions of slot {slot}", floats=floats)
        length = pos.shape[1]
        last = length - 1 + delta if not floats else np.float32(length - 1) + np.float32(delta)
        self._insert(
            slot, ints, fields, length, delta, max(pos.max(), last), rows=rows, source=_FROM_POSITIONS
        )

    def add_packed(self, slot: int, packed: PackedPrompt, *, replace: bool = False) -> None:
        """Register the request in ``slot`` from its :class:`mrope.serving.PackedPrompt` (packed where its
        positions were computed, e.g. another process): its segment rows are copied into the pool, the
        prompt's tokens are not read. ``replace`` as in :meth:`add`.

        Raises
        ------
        MRopeError
            ``packed`` not a :class:`PackedPrompt`; a float32
            table, or one of other rows than (t, h, w) (they take :meth:`add`); the checks of :meth:`add`
            on the slot, the prompt's length and its largest position. The table is then unchanged.
        """
        if type(packed) is not PackedPrompt:  # (checked where it was made or unpickled)
            raise MRopeError(f"packed must be a mrope.serving.PackedPrompt, got {type(packed).__name__}")
        if self._floats or self.num_dims != PLAIN_ROWS.num_dims:
            raise MRopeError(
                "add_packed: a packed prompt holds int64 (t, h, w) segments; this table holds "
                f"{self.dtype} positions in {self.num_dims} rows: register with add()"
            )
        length, delta = packed.length, packed.delta
        self._insert(slot, packed.layout, None, length, delta, length - 1 + delta, replace, PLAIN_ROWS)

    def remove(self, slot: int) -> None:
        """Forget the request in ``slot`` (finished or preempted); the slot and its segments' pool
        entries are reused later."""
        with self._lock:
            slot = self._live_slot(slot)
            lo, hi = self._state.release(slot)
            if self._steps.device is not None:
                self._steps.device.sync(lo, hi, slot + 1)

    # -- each step --------------------------------------------------------------------------------
    def fill(
        self, out: Any, slots: Any, num_computed: Any, num_scheduled: Any, num_tokens: int | None = None
    ) -> int:
        """Write the positions of one engine step into ``out``.

        For each request ``i`` in order, the positions of sequence indices ``num_computed[i] ...
        num_computed[i] + num_scheduled[i] - 1`` go to consecutive columns of ``out``: an index inside
        the prompt takes the prompt's position, an index ``j`` past it ``j + delta`` on every row
        (float32 tables: ``float32(j) + delta`` in float32).

        Parameters
        ----------
        out : numpy.ndarray (num_dims, >= N) of the table's dtype (int64, or float32), may be a strided
            view (e.g. of a pinned torch buffer); or a torch tensor on the table's device (the device
            path, see :meth:`mrope.serving.device.DeviceTable.fill`). Rows as the requests' family
            gives them (3: (t, h, w); HunYuan-VL: index rows, then width, height, image ordinal).
        slots, num_computed, num_scheduled : (num_reqs,) integer arrays (device tensors on the torch
            path); int32 and int64 numpy arrays are read without a copy
        num_tokens : int, optional on the numpy path (N is computed); required on the torch path, where
            it is ``sum(num_scheduled)`` or a fixed capacity (columns past the real tokens get 0; a
            smaller value is bad input, counted as below).

        Returns
        -------
        int : N, the number of columns written.

        Raises
        ------
        MRopeError
            A slot out of range or not live, a negative count, arrays of different lengths, ``out`` too
            small or not (num_dims, n) of the table's dtype, a last index ``num_computed + num_scheduled - 1``
            reaching the table's bound (2**32; float32 tables 2**24) or whose position ``index + delta``
            reaches ``max_position`` or passes 2**31 - 1 (float32 tables: reaches 2**24; every
            request's last index, also one with no token scheduled). Nothing is
            written. The torch path raises for shapes and dtypes only: bad values there are counted on
            the device (no host synchronization), their columns written as 0, and :meth:`check` raises.
        """
        with self._lock:
            return self._steps.run(out, slots, num_computed, num_scheduled, num_tokens, False)

    def decode(self, out: Any, slots: Any, seq_lens: Any) -> int:
        """Decode positions ``seq_lens - 1 + delta[slots]`` on every row of ``out[:, :num_reqs]``.

        The request's last token (index ``seq_lens - 1``) must lie past its prompt: an index inside it
        is bad input on every path (:meth:`fill` serves it), as are those :meth:`fill` refuses. With
        torch tensors on the table's device this runs there with no host synchronization (the second
        seed's SGLang path); with numpy it is :meth:`fill` with one token per request. Returns num_reqs.
        """
        with self._lock:
            return self._steps.run(out, slots, seq_lens, seq_lens, None, True)

    def fill_ragged(self, out: Any, slots: Any, query_start_loc: Any, slot_num_computed: Any) -> None:
        """Write one engine step's positions in vLLM Model Runner V2's layout (``prepare_positions``).

        Request ``i`` runs in ``slots[i]``; its tokens go to columns ``query_start_loc[i] ...
        query_start_loc[i + 1] - 1`` of ``out`` and are its sequence indices from
        ``slot_num_computed[slots[i]]`` on (indexed by slot, not by request), with the positions
        :meth:`fill` gives them. Other columns are not written.

        Parameters
        ----------
        out : (num_dims, n) array of the table's dtype: numpy or a CPU tensor (the host path, through
            :meth:`fill`), or a tensor on the table's device (one Triton launch for an int64 table on
            CUDA: no host synchronization, CUDA-graph capturable after :meth:`reserve` and :meth:`freeze`;
            elsewhere, or for a float32 table, the torch step of :meth:`fill`, which also writes 0 in the
            columns outside the queries).
        slots : (num_reqs,) integer
        query_start_loc : (>= num_reqs + 1,) integer, non-decreasing; the first num_reqs + 1 are read
        slot_num_computed : (>= max slot + 1,) integer, per slot

        Notes
        -----
        int32 and int64 arrays and tensors are read without a copy.

        Raises
        ------
        MRopeError
            What :meth:`fill` refuses, a ``query_start_loc`` too short or decreasing, a slot without an
            entry of ``slot_num_computed``; nothing is written. The device path raises for shapes and
            dtypes only: bad values there are counted (their columns written as 0) and :meth:`check`
            raises.
        """
        with self._lock:
            self._steps.ragged(out, slots, query_start_loc, slot_num_computed)

    def check(self) -> None:
        """Raise :class:`MRopeError` if a device-path step since the last check had bad input.

        The device path cannot raise without a host synchronization: it writes 0 for the columns of
        bad requests and counts them on the device. This call synchronizes; make it where the engine
        synchronizes anyway (e.g. when it reads the sampled tokens).
        """
        with self._lock:
            if self._steps.device is not None:
                self._steps.device.check()

    # -- internals --------------------------------------------------------------------------------
    @property
    def _family_rows(self) -> SegmentRows | None:
        """The rows of the table's requests, fixed by the first one (None before it)."""
        return self._state.family_rows

    def _slot(self, slot: Any) -> int:
        """``slot`` as an int in ``[0, max_requests)``."""
        if type(slot) is not int:
            if not is_int(slot):
                raise MRopeError(f"slot must be an int, got {slot!r}")
            slot = int(slot)
        if not 0 <= slot < self.max_requests:
            raise MRopeError(f"slot {slot} is out of range [0, {self.max_requests})")
        return slot

    def _live_slot(self, slot: Any) -> int:
        slot = self._slot(slot)
        if not self._state.is_live(slot):
            raise MRopeError(f"slot {slot} holds no request (never added, or removed)")
        return slot

    def _insert(
        self,
        slot: Any,
        ints: np.ndarray | OneRowLayout,
        floats: Any,
        length: int,
        delta: int | float,
        largest: Any,
        replace: bool = False,
        rows: SegmentRows = PLAIN_ROWS,
        source: str = _FROM_INPUTS,
    ) -> None:
        """Register the request in ``slot`` (checked here: an int in range, free unless ``replace``) from
        its segments (:mod:`.intake`, or a one-row layout), after the checks of its length and
        largest position; its ``rows`` (the family's) fix the table's at its first request. ``source``:
        what reached the largest position, for the message (:data:`_FROM_INPUTS`, :data:`_FROM_POSITIONS`)."""
        if type(slot) is not int or not 0 <= slot < self.max_requests:
            slot = self._slot(slot)
        with self._lock:
            if rows is not self._family_rows:
                self._check_rows(rows, "the request")
            if not replace and self._state.is_live(slot):
                raise MRopeError(f"slot {slot} already holds a request: remove() it before adding another")
            if length >= self.max_index:
                raise MRopeError(
                    f"prompt of slot {slot} has {length} tokens, at most {self.max_index - 1} are supported"
                    + (" in a float32 table" if self._floats else "")
                )
            if largest >= self._state.max_position:  # the bound of every table (see position_bound)
                reach = source.format(largest=largest)
                raise MRopeError(f"slot {slot}: {reach}, beyond {self._state.bound_text}")
            lo, hi, moved = self._state.insert(slot, ints, floats, length, delta)
            if self._family_rows is None:  # the first request: the steps apply its rows from now on
                self._state.fix_rows(rows)
            device = self._steps.device
            if device is not None:
                if moved:
                    device.sync_all()
                else:
                    device.sync(lo, hi, slot + 1)

    def _check_rows(self, rows: SegmentRows, what: str) -> None:
        """Refuse a request of ``rows`` (``what``: its family) unless they are the table's."""
        if rows.num_dims != self.num_dims:
            raise MRopeError(
                f"{what} gives {rows.num_dims} rows of positions {rows.describe()}, this table holds "
                f"{self.num_dims}: create it with PositionTable(..., num_dims={rows.num_dims})"
            )
        fixed = self._family_rows
        if fixed is not None and rows != fixed:
            raise MRopeError(
                f"{what} gives the rows {rows.describe()}, this table's requests the rows "
                f"{fixed.describe()} (fixed by its first request): a table serves one family's rows"
            )
