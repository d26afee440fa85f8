"""The steps of a :class:`mrope.PositionTable`, and the one place that picks which runs: :class:`Steps`.

A step of ``fill``, ``decode`` or ``fill_ragged`` (converted to ``fill``'s counts on the host,
:mod:`.ragged`) goes by ``out``: a torch tensor to the device mirror (:mod:`.device`), a numpy array to
the compiled step (:mod:`.compiled_step`, where the table's backend is numba) or the host step
(:mod:`.host_step`, which also names the errors of a step the kernel refuses). A table whose rows are
not the rendered (t, h, w) (HunYuan-VL) runs the step into the view of ``out`` that takes them and writes
the index rows beside them (:mod:`.index_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._arrays import is_torch_tensor
from .._errors import MRopeError
from ..render.choose import numba_allowed
from ._checks import INT32, INT64, as_index
from ._state import SlotState
from .host_step import HostStep
from .index_rows import check_rows_out, write_index_rows
from .ragged import host_counts, host_out, refuse_decreasing

#: what a :class:`mrope.PositionTable` takes as ``backend``
BACKENDS = ("auto", "numba", "numpy")


def compiled_steps(backend: str, floats: bool) -> Any:
    """The compiled steps for a table of ``backend`` (:func:`.compiled_step.step_for`, by the dtypes of
    the step's index arrays), or ``None``: the host step.

    ``"auto"``: where numba imports, for int64 tables, unless ``MROPE_NUMBA`` is off (``0``, ``false``,
    ``off``, ``no``); ``"numba"``: required (:class:`MRopeError` without numba, or for a float32 table,
    ``floats``); ``"numpy"``: never."""
    if backend not in BACKENDS:
        raise MRopeError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend == "numpy" or (backend == "auto" and (floats or not numba_allowed())):
        return None
    if floats:
        raise MRopeError(
            "backend='numba' serves int64 tables; a float32 table takes backend='numpy' or 'auto'"
        )
    try:
        from .compiled_step import step_for
    except ImportError as err:  # numba missing, not built for this numpy, or its JIT disabled
        if backend == "numba":
            hint = " (pip install numba)" if isinstance(err, ModuleNotFoundError) else ""
            raise MRopeError(f"backend='numba' needs numba's compiler{hint}: {err}") from None
        return None
    return step_for


class Steps:
    """The steps over one table's state: the host step, the compiled ones (kept by the index arrays'
    dtypes) and the device mirror (made on first need). The table's lock is held around every call."""

    def __init__(self, state: SlotState, backend: str, device: Any, device_columns: int = 0) -> None:
        self.state = state
        self.host = HostStep(state)
        self.kernel = compiled_steps(backend, state.floats)  # None: the host step
        self.backend = "numpy" if self.kernel is None else "numba"
        self.compiled: dict[tuple[np.dtype, ...], Callable[..., int]] = {}
        #: where the device mirror lives (the table's ``device``), and the step columns a new one
        #: reserves (a loaded table's, else 0)
        self.device_name, self.device_columns = device, device_columns
        self.device: Any = None  # the mirror (mrope.serving.device.DeviceTable), once made

    def run(self, out: Any, slots: Any, first: Any, count: Any, num_tokens: int | None, decode: bool) -> int:
        """``fill`` (``decode``: ``decode``, ``first`` holding seq_lens, ``count`` unused) into ``out``; N."""
        if type(out) is not np.ndarray:
            if is_torch_tensor(out):
                device = self.mirror(out.device)
                if decode:
                    return device.decode(out, slots, first)
                return device.fill(out, slots, first, count, num_tokens)
            raise MRopeError(f"out must be a numpy array (or a torch tensor), got {type(out).__name__}")
        state = self.state
        rows = state.rows
        view = out
        if rows is not None:  # not the rendered (t, h, w): the family's rows
            check_rows_out(out, rows.num_dims, self.host.dtype)
            view = rows.rendered(out)
        num = -1
        # the compiled step where the inputs are its kind (the host step converts or refuses the others)
        if self.kernel is not None and type(slots) is type(first) is type(count) is np.ndarray:
            step = self.compiled.get((slots.dtype, first.dtype, count.dtype))  # one lookup: the dtypes
            if step is None:
                step = self._new_step(slots.dtype, first.dtype, count.dtype)
            if (
                step is not None
                and slots.ndim == first.ndim == count.ndim == 1
                and view.dtype is INT64
                and view.ndim == 2
                and view.flags.writeable
                and (num_tokens is None or (type(num_tokens) is int and num_tokens >= 0))
            ):
                num = step(  # the kernel checks the arrays' lengths (and returns -1)
                    view,
                    slots,
                    first,
                    count,
                    decode,
                    state.info,
                    state.pool.data,
                    state.max_position,  # (the table's bound, always one: see _state.position_bound)
                    state.max_index,
                    -1 if num_tokens is None else num_tokens,
                )
                if num < 0:  # bad input, nothing written: the host step names the error
                    self._refused(view, slots, first, count, num_tokens, decode)
        if num < 0:
            host = self.host
            num = (
                host.decode(view, slots, first)
                if decode
                else host.fill(view, slots, first, count, num_tokens)
            )
        if rows is not None and rows.lead and num:
            if decode:  # every token past its prompt: the rendered rows' index + delta
                out[: rows.lead, :num] = view[0, :num]
            else:  # (the step checked the arrays: their conversions raise nothing)
                slots, nc, ns = (
                    as_index(slots, "slots"),
                    as_index(first, "num_computed"),
                    as_index(count, "num_scheduled"),
                )
                write_index_rows(out, rows.lead, view, self.state.prompt_lengths(slots), nc, ns, num)
        return num

    def ragged(self, out: Any, slots: Any, query_start_loc: Any, slot_num_computed: Any) -> None:
        """``fill_ragged``: one launch on a device tensor, else :meth:`run` of the step's counts."""
        if is_torch_tensor(out) and out.device.type != "cpu":
            self.mirror(out.device).fill_ragged(out, slots, query_start_loc, slot_num_computed)
            return
        out = host_out(out)
        slots, nc, ns, starts, first = host_counts(slots, query_start_loc, slot_num_computed)
        try:
            self.run(out[:, first:] if out.ndim == 2 else out, slots, nc, ns, None, False)
        except MRopeError:
            refuse_decreasing(starts, slots.shape[0])
            raise

    def mirror(self, device: Any = None, why: str = "") -> Any:
        """The device mirror (made on first need, on ``device`` or the table's), checked to be on
        ``device``; ``why``: what asks for it, for the message without torch."""
        if self.device is None:
            try:
                from .device import DeviceTable
            except ImportError as err:
                what = why or f"device={self.device_name!r} asks for the device path, which"
                raise MRopeError(f"{what} needs torch (pip install 'mrope[torch]'): {err}") from None
            mirror = DeviceTable(
                self.state, self.device_name if device is None else device, self.device_columns
            )
            if mirror.device.type == "meta":
                raise MRopeError(
                    "the meta device holds no values (shapes only): the device path needs a device that "
                    "computes (cpu, cuda, ...)"
                )
            self.device = mirror
        self.device.check_device(device)
        return self.device

    def _refused(
        self, out: np.ndarray, slots: Any, first: Any, count: Any, num_tokens: Any, decode: bool
    ) -> None:
        """Raise the host step's error for a step the compiled one refused."""
        if decode:
            self.host.decode(out, slots, first)
        else:
            self.host.fill(out, slots, first, count, num_tokens)
        raise RuntimeError("mrope internal error: the compiled step refused a step numpy accepts")

    def _new_step(self, *dtypes: np.dtype) -> Callable[..., int] | None:
        """The compiled step for index arrays of ``dtypes``, kept by them; None unless each is int32 or
        int64 (the host step converts the others)."""
        if any(dtype is not INT64 and dtype is not INT32 for dtype in dtypes):
            return None
        step = self.compiled[dtypes] = self.kernel(*dtypes)
        return step
