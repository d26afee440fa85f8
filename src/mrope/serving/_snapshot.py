"""A :class:`mrope.serving.PositionTable` as plain values and back: what ``pickle``, ``copy.copy`` and
``copy.deepcopy`` of a table take (a data loader's worker processes pickle what they hold).

A table's state is a few arrays (the slots' info and float32 deltas, the pool's entries) and Python
values (the pool's per-slot lists and top, the bounds, the first request's rows). :func:`snapshot`
copies them under the table's lock, so a table that other threads change is taken between two calls,
and what it holds is never shared with the copy. Everything made from them is made anew by
:func:`restore`: the views and memoryviews of the arrays, the lock, the numpy step's scratch and the
compiled steps (in the process that loads the table: numba's cache, or numpy where numba is missing
there) at once; the device mirror (``device=`` other than ``"cpu"``, or a table that ran the torch path)
on the first call that needs it, on the device the table names, with the step columns it had reserved.
A device step's unchecked errors (:meth:`~mrope.serving.PositionTable.check`) are not carried.
"""

from __future__ import annotations

from typing import Any

from .._errors import MRopeError

#: the snapshot's layout; a table pickled in another one is refused by name
FORMAT = 2  # 2: the pool's per-slot reservations (1: holes)


def snapshot(table: Any) -> dict[str, Any]:
    """The state of ``table`` (a :class:`~mrope.serving.PositionTable`) as plain values (arrays copied),
    taken under its lock."""
    with table._lock:
        state, pool, mirror = table._state, table._pool, table._device
        return {
            "format": FORMAT,
            "max_requests": table.max_requests,
            "max_position": table.max_position,
            "dtype": table.dtype,
            "backend": table._backend_asked,
            "num_dims": table.num_dims,
            "device": table._device_name,
            "device_columns": table._device_columns if mirror is None else int(mirror.ramp.shape[0]),
            "family_rows": table._family_rows,
            "info": state.info.copy(),
            "deltas": None if state.deltas is None else state.deltas.copy(),
            "data": pool.data.copy(),
            "floats": None if pool.floats is None else pool.floats.copy(),
            "top": pool.top,
            "frozen": pool.frozen,
            "first": list(pool.first),
            "count": list(pool.count),
            "reserved": list(pool.reserved),
            "compactions": pool.compactions,
        }


def restore(table: Any, values: Any) -> None:
    """Make ``table`` (new, uninitialized: ``pickle`` and ``copy`` make it) the one :func:`snapshot`
    took ``values`` from; the arrays in ``values`` become the table's."""
    if not isinstance(values, dict) or values.get("format") != FORMAT:
        found = values.get("format") if isinstance(values, dict) else type(values).__name__
        raise MRopeError(
            f"this PositionTable was pickled in another layout ({found!r}, this mrope reads {FORMAT}): "
            "load it with the mrope version that pickled it, or build the table anew"
        )
    table.__init__(  # type: ignore[misc]  # the bounds checked again; a pool of one entry, replaced below
        values["max_requests"],
        max_position=values["max_position"],
        pool_capacity=1,
        dtype=values["dtype"],
        backend=values["backend"],
        num_dims=values["num_dims"],
    )
    state, pool = table._state, table._pool
    state.info[...] = values["info"]
    if state.deltas is not None:
        state.deltas[...] = values["deltas"]
    pool._use(values["data"], values["floats"])
    pool.top, pool.frozen = values["top"], values["frozen"]
    pool.first, pool.count, pool.reserved = values["first"], values["count"], values["reserved"]
    pool.compactions = values["compactions"]
    rows = values["family_rows"]
    if rows is not None:  # as the first request fixed them (PositionTable._insert)
        table._family_rows = rows
        table._rows = state.rows = None if rows.plain else rows
    table._device_name = values["device"]
    table._device_columns = values["device_columns"]
