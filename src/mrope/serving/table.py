"""The positions state of a serving engine's running requests, and the per-step ``fill`` (CPU path).

Every live request keeps its placed segments (O(images + video frames), not O(tokens)) in one flat
pool: request ``row`` owns the pool slots ``base[row] ... base[row] + n - 1``, the last one a text
segment at the prompt length that never ends (``index + delta``, the decode tail). A segment's key is
``base << 32 | start``; free slots hold ``slot << 32``, so the keys are sorted over the whole pool and
one ``searchsorted`` finds the segment of every scheduled token of every request. Positions then
follow the formula of :mod:`mrope.core.render`. Steps where every token lies past its prompt (decode,
speculative decode) skip the search: ``index + delta[row]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._backends import is_torch_tensor, to_int_array
from .._errors import MRopeError
from ._checks import DEAD as _DEAD
from ._checks import DELTA as _DELTA
from ._checks import INT64 as _INT64
from ._checks import KEY as _KEY
from ._checks import MAX_INDEX as _MAX_INDEX
from ._checks import PLEN as _PLEN
from ._checks import as_index, check_out, validate
from ._segments import POSITION_DTYPE, from_positions, nonempty

_SHIFT = 32  # key = base << 32 | index


class PositionTable:
    """M-RoPE positions of a serving engine's running requests, indexed by row (persistent batch slot).

    Parameters
    ----------
    max_requests : int
        Number of rows (the engine's maximum number of running requests).
    device : str or torch.device, default ``"cpu"``
        Where the torch path (:meth:`fill` and :meth:`decode` with torch tensors) runs. Anything but
        ``"cpu"`` keeps a copy of the table on that device, updated at :meth:`add` and :meth:`remove`.
        The numpy path (numpy ``out``) is always available.
    max_position : int, optional
        Exclusive bound on positions (e.g. the size of the model's cos/sin cache): adding a request, or
        filling a step, that would reach it raises :class:`MRopeError`.
    pool_capacity : int, optional
        Initial number of segment slots (default ``8 * max_requests + 64``). The pool is compacted, and
        grown if still too small, when an :meth:`add` does not fit (growing reallocates the device copy:
        capture CUDA graphs after the pool has its final size).

    Examples
    --------
    >>> table = PositionTable(256)
    >>> table.add(0, family, input_ids, image_grid_thw=grid)       # admission
    >>> n = table.fill(positions_np[:, :capacity], rows, num_computed, num_scheduled)  # each step
    >>> table.remove(0)                                             # finish
    """

    def __init__(
        self,
        max_requests: int,
        *,
        device: Any = "cpu",
        max_position: int | None = None,
        pool_capacity: int | None = None,
    ) -> None:
        if not isinstance(max_requests, (int, np.integer)) or max_requests <= 0:
            raise MRopeError(f"max_requests must be a positive int, got {max_requests!r}")
        if max_position is not None and (
            not isinstance(max_position, (int, np.integer)) or max_position <= 0
        ):
            raise MRopeError(f"max_position must be a positive int or None, got {max_position!r}")
        capacity = 8 * int(max_requests) + 64 if pool_capacity is None else int(pool_capacity)
        if capacity <= 0:
            raise MRopeError(f"pool_capacity must be positive, got {pool_capacity!r}")
        self.max_requests = int(max_requests)
        self.max_position = None if max_position is None else int(max_position)
        # rows _PLEN, _DELTA, _KEY; request ``row`` in column ``row + 1``, free rows at both ends
        self._info = np.zeros((3, self.max_requests + 2), dtype=np.int64)
        self._info[_PLEN] = _DEAD
        self._flags = np.empty(0, dtype=bool)
        self._grow_scratch(64)
        self._base = np.zeros(self.max_requests, dtype=np.int64)
        self._slots = np.zeros(self.max_requests, dtype=np.int64)  # 0: free row
        self._pool = _empty_pool(capacity)
        self._top = 0  # first never-used slot
        self._scratch = np.empty((5, 0), dtype=np.int64)
        self._arange = np.arange(0, dtype=np.int64)
        self._device_name = device
        self._device = None  # the torch mirror, see mrope.serving.device
        if not (isinstance(device, str) and device == "cpu"):
            self._device_state()

    # -- queries ----------------------------------------------------------------------------------
    def __contains__(self, row: int) -> bool:
        return 0 <= row < self.max_requests and self._slots[row] > 0

    @property
    def num_requests(self) -> int:
        return int(np.count_nonzero(self._slots))

    def prompt_length(self, row: int) -> int:
        return int(self._info[_PLEN, self._live_row(row) + 1])

    def delta(self, row: int) -> int:
        """``max(prompt positions) + 1 - prompt length``: the decode offset of ``row``."""
        return int(self._info[_DELTA, self._live_row(row) + 1])

    def state_nbytes(self, row: int) -> int:
        """Bytes of state ``row`` holds: its segments (5 int64 each, decode tail included) and its info."""
        return int(self._slots[self._live_row(row)]) * 5 * 8 + 3 * 8

    # -- admission --------------------------------------------------------------------------------
    def add(
        self,
        row: int,
        family: Any,
        input_ids: Any,
        *,
        image_grid_thw: Any = None,
        video_grid_thw: Any = None,
        second_per_grid_ts: Any = None,
    ) -> None:
        """Register the request in ``row`` from its prompt (or, after preemption, prompt + generated).

        Parameters
        ----------
        row : int, in ``[0, max_requests)``, free
        family : a family from :func:`mrope.from_config`
        input_ids : shape (L,), integer; list, numpy or torch
        image_grid_thw, video_grid_thw : (num_items, 3), optional
        second_per_grid_ts : (num_videos,), optional

        Raises
        ------
        MRopeError
            ``row`` out of range or already live; anything :meth:`Family.segments` refuses; positions
            reaching ``max_position``. The table is unchanged.
        """
        self._free_row(row)
        table, delta = family.segments(
            input_ids,
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
        )
        self._insert(row, nonempty(table), table.length, delta, table.length + delta - 1)

    def add_positions(self, row: int, positions: Any, delta: int) -> None:
        """Register the request in ``row`` from precomputed prompt positions.

        Parameters
        ----------
        positions : shape (3, L), integer (numpy or torch); must follow the M-RoPE rule (text runs and
            vision frames), which is checked: only the segments are kept.
        delta : int, the offset of positions past the prompt (``index + delta``).
        """
        self._free_row(row)
        pos = to_int_array(positions, name="positions", ndim=2)
        if pos.shape[0] != 3 or pos.shape[1] == 0:
            raise MRopeError(f"positions must have shape (3, L) with L >= 1, got {tuple(pos.shape)}")
        if not isinstance(delta, (int, np.integer)):
            raise MRopeError(f"delta must be an int, got {delta!r}")
        data = from_positions(pos.astype(POSITION_DTYPE, copy=False), row=row)
        length = pos.shape[1]
        self._insert(row, data, length, int(delta), max(int(pos.max()), length + int(delta) - 1))

    def remove(self, row: int) -> None:
        """Forget the request in ``row`` (finished or preempted); its slots are reused later."""
        row = self._live_row(row)
        lo, hi = int(self._base[row]), int(self._base[row] + self._slots[row])
        self._pool[0, lo:hi] = np.arange(lo, hi, dtype=np.int64) << _SHIFT
        self._info[:, row + 1] = (_DEAD, 0, 0)
        self._slots[row] = 0
        if self._device is not None:
            self._device.sync(self._pool, self._info, lo, hi, row + 1)

    # -- each step --------------------------------------------------------------------------------
    def fill(
        self, out: Any, rows: Any, num_computed: Any, num_scheduled: Any, num_tokens: int | None = None
    ) -> int:
        """Write the positions of one engine step into ``out``.

        For each request ``i`` in order, the positions of sequence indices ``num_computed[i] ...
        num_computed[i] + num_scheduled[i] - 1`` go to consecutive columns of ``out``: an index inside
        the prompt takes the prompt's position, an index ``j`` past it ``j + delta`` on all three rows.

        Parameters
        ----------
        out : numpy.ndarray (3, >= N) int64, may be a strided view (e.g. of a pinned torch buffer);
            or a torch tensor on the table's device (the device path, see
            :meth:`mrope.serving.device.DeviceTable.fill`).
        rows, num_computed, num_scheduled : (num_reqs,) integer arrays (device tensors on the torch path)
        num_tokens : int, optional on the numpy path (N is computed); required on the torch path, where
            it is ``sum(num_scheduled)`` or a fixed capacity (columns past the real tokens get 0).

        Returns
        -------
        int : N, the number of columns written.

        Raises
        ------
        MRopeError
            A row out of range or not live, a negative count, arrays of different lengths, ``out`` too
            small or not int64 (3, n), positions reaching ``max_position``. Nothing is written.
        """
        if not isinstance(out, np.ndarray):
            if is_torch_tensor(out):
                return self._device_state(out.device).fill(out, rows, num_computed, num_scheduled, num_tokens)
            raise MRopeError(f"out must be a numpy array (or a torch tensor), got {type(out).__name__}")
        # the checks of the decode path cost a few numpy calls: keep Python overhead out of it
        if type(rows) is not np.ndarray or rows.dtype is not _INT64 or rows.ndim != 1:
            rows = as_index(rows, "rows")
        if type(num_computed) is not np.ndarray or num_computed.dtype is not _INT64 or num_computed.ndim != 1:
            num_computed = as_index(num_computed, "num_computed")
        if (
            type(num_scheduled) is not np.ndarray
            or num_scheduled.dtype is not _INT64
            or num_scheduled.ndim != 1
        ):
            num_scheduled = as_index(num_scheduled, "num_scheduled")
        nc, ns = num_computed, num_scheduled
        n = rows.shape[0]
        if nc.shape[0] != n or ns.shape[0] != n:
            raise MRopeError(
                f"rows, num_computed and num_scheduled must have one length, got {n}, "
                f"{nc.shape[0]}, {ns.shape[0]}"
            )
        if n == 0:
            return check_out(out, 0, num_tokens)
        if self._flags.shape[0] < n:
            self._grow_scratch(n)
        # row r's info is column r + 1; columns 0 and max_requests + 1 are free rows that catch
        # out-of-range rows (mode="clip"), so one take validates rows too
        index = np.add(rows, 1, out=self._row_scratch[:n])
        info = self._info.take(index, axis=1, mode="clip", out=self._row_info[:, :n])
        before = np.less(nc, info[_PLEN], out=self._flags[:n])  # inside the prompt, or a free row
        # decode (one token per request, past its prompt)? Compared as bytes: one memcmp each, several
        # times cheaper than a ufunc and a count
        if ns.tobytes() == self._ones[: 8 * n] and before.tobytes() == self._zeros[:n]:
            check_out(out, n, num_tokens)
            first = np.add(nc, info[_DELTA], out=index)
            if self.max_position is not None:
                self._check_max(first)
            np.copyto(out[:, :n], first)
            return n
        num = validate(self.max_requests, rows, nc, ns, info)
        check_out(out, num, num_tokens)
        if num == 0:
            return 0
        # the last index's position if past the prompt (the prompt's own were checked at add)
        if self.max_position is not None:
            self._check_max(nc + ns + info[_DELTA] - 1)
        col0 = np.cumsum(ns)
        col0 -= ns  # first column of each request
        if before.tobytes() == self._zeros[:n]:  # every token past its prompt: index + delta
            col = np.repeat(nc + info[_DELTA] - col0, ns)
            col += self._ramp(num)
            np.copyto(out[:, :num], col)
            return num
        key = np.repeat(info[_KEY] + nc - col0, ns)
        key += self._ramp(num)
        seg = np.searchsorted(self._pool[0, : self._top], key, side="right")
        seg -= 1
        fields = self._scratch_tokens(num)
        np.take(self._pool, seg, axis=1, out=fields, mode="clip")  # "clip": unbuffered; seg is valid
        start, t0, hw0, width, is_text = fields
        offset = np.subtract(key, start, out=key)
        np.divmod(offset, width, out=(start, width))
        offset *= is_text
        np.add(t0, offset, out=out[0, :num])
        np.add(hw0, start, out=out[1, :num])
        np.add(hw0, width, out=out[2, :num])
        out[2, :num] += offset
        return num

    def decode(self, out: Any, rows: Any, seq_lens: Any) -> int:
        """Decode positions ``seq_lens - 1 + delta[rows]`` on all three rows of ``out[:, :num_reqs]``.

        The request's last token (index ``seq_lens - 1``) must lie past its prompt. With torch tensors
        on the table's device this runs there with no host synchronization (the second seed's SGLang
        path); with numpy it is :meth:`fill` with one token per request. Returns num_reqs.
        """
        if is_torch_tensor(out):
            return self._device_state(out.device).decode(out, rows, seq_lens)
        lens = as_index(seq_lens, "seq_lens")
        return self.fill(out, rows, lens - 1, np.ones_like(lens))

    def check(self) -> None:
        """Raise :class:`MRopeError` if a device-path step since the last check had bad input.

        The device path cannot raise without a host synchronization: it writes 0 for the columns of
        bad requests and counts them on the device. This call synchronizes; make it where the engine
        synchronizes anyway (e.g. when it reads the sampled tokens).
        """
        if self._device is not None:
            self._device.check()

    # -- internals --------------------------------------------------------------------------------
    def _device_state(self, device: Any = None) -> Any:
        from .device import DeviceTable

        if self._device is None:
            self._device = DeviceTable(self, self._device_name if device is None else device)
        self._device.check_device(device)
        return self._device

    def _live_row(self, row: Any) -> int:
        if not isinstance(row, (int, np.integer)) or isinstance(row, bool):
            raise MRopeError(f"row must be an int, got {row!r}")
        if not 0 <= row < self.max_requests:
            raise MRopeError(f"row {row} is out of range [0, {self.max_requests})")
        if self._slots[row] == 0:
            raise MRopeError(f"row {row} holds no request (never added, or removed)")
        return int(row)

    def _free_row(self, row: Any) -> None:
        if not isinstance(row, (int, np.integer)) or isinstance(row, bool):
            raise MRopeError(f"row must be an int, got {row!r}")
        if not 0 <= row < self.max_requests:
            raise MRopeError(f"row {row} is out of range [0, {self.max_requests})")
        if self._slots[row]:
            raise MRopeError(f"row {row} already holds a request: remove() it before adding another")

    def _insert(self, row: int, data: np.ndarray, length: int, delta: int, largest: int) -> None:
        if length >= _MAX_INDEX:
            raise MRopeError(
                f"prompt of row {row} has {length} tokens, at most {_MAX_INDEX - 1} are supported"
            )
        if self.max_position is not None and largest >= self.max_position:
            raise MRopeError(
                f"row {row}: the prompt reaches position {largest}, beyond max_position "
                f"{self.max_position} (check second_per_grid_ts and the grids)"
            )
        need = data.shape[1] + 1
        if self._top + need > self._pool.shape[1]:
            self._compact(need)
        lo = self._top
        hi = lo + need
        pool = self._pool
        pool[:, lo : hi - 1] = data
        pool[:, hi - 1] = (length, length + delta, length + delta, 1, 1)  # the decode tail
        pool[0, lo:hi] += lo << _SHIFT
        self._top = hi
        self._base[row], self._slots[row] = lo, need
        self._info[:, row + 1] = (length, delta, lo << _SHIFT)
        if self._device is not None:
            self._device.sync(pool, self._info, lo, hi, row + 1)

    def _compact(self, need: int) -> None:
        """Move the live requests' slots to the front of the pool (growing it if ``need`` still does
        not fit)."""
        live = np.flatnonzero(self._slots)
        live = live[np.argsort(self._base[live])]
        count = self._slots[live]
        used = int(count.sum())
        capacity = self._pool.shape[1]
        if used + need > capacity:
            capacity = max(2 * capacity, used + need)
        new_base = np.cumsum(count) - count
        shift = np.repeat(self._base[live] - new_base, count)
        src = shift + np.arange(used)
        pool = _empty_pool(capacity)
        pool[:, :used] = self._pool[:, src]
        pool[0, :used] -= shift << _SHIFT
        self._pool = pool
        self._base[live] = new_base
        self._info[_KEY, live + 1] = new_base << _SHIFT
        self._top = used
        if self._device is not None:
            self._device.sync_all(pool, self._info)

    def _check_max(self, last: np.ndarray) -> None:
        """``last``: per request, the position of its last scheduled index if that is past the prompt."""
        if last.max() >= self.max_position:
            i = int(np.argmax(last))
            raise MRopeError(
                f"request {i} of the step reaches position {last[i]}, beyond max_position {self.max_position}"
            )

    def _scratch_tokens(self, num: int) -> np.ndarray:
        if self._scratch.shape[1] < num:
            self._scratch = np.empty((5, max(num, 2 * self._scratch.shape[1])), dtype=np.int64)
        return self._scratch[:, :num]

    def _grow_scratch(self, n: int) -> None:
        """Scratch for steps of ``n`` requests (grown, never shrunk)."""
        size = max(n, 2 * self._flags.shape[0])
        self._flags = np.empty(size, dtype=bool)
        self._row_scratch = np.empty(size, dtype=np.int64)
        self._row_info = np.empty((3, size), dtype=np.int64)
        self._ones = np.ones(size, dtype=np.int64).tobytes()
        self._zeros = bytes(size)

    def _ramp(self, num: int) -> np.ndarray:
        if self._arange.shape[0] < num:
            self._arange = np.arange(max(num, 2 * self._arange.shape[0]), dtype=np.int64)
        return self._arange[:num]


def _empty_pool(capacity: int) -> np.ndarray:
    """A (5, capacity) pool of free slots: keys ``slot << 32``, width 1."""
    pool = np.zeros((5, capacity), dtype=POSITION_DTYPE)
    pool[0] = np.arange(capacity, dtype=np.int64) << _SHIFT
    pool[3] = 1
    return pool
