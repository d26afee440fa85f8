"""A :class:`mrope.serving.PositionTable` as plain values and back: what ``pickle``, ``copy.copy`` and
``copy.deepcopy`` of a table take (a data loader's worker processes pickle what they hold).

A table is its settings, its state (the slots' info and float32 deltas, the pool's entries and per-slot
lists, the first request's rows) and where its steps run (the device it names, the step columns its
mirror reserved). :func:`snapshot` copies them (the table holds its lock), so nothing is shared with the
copy; :func:`restore` gives the settings to build the table anew, then the rest to its new state and
steps. The compiled steps are made in the process that loads the table (numba's cache, or numpy where
numba is missing there), the device mirror on the first call that needs it. A device step's unchecked
errors (:meth:`~mrope.serving.PositionTable.check`) are not carried.
"""

from __future__ import annotations

from typing import Any

from .._errors import MRopeError
from ._state import SlotState
from .steps import Steps

#: the snapshot's layout; a table pickled in another one is refused by name
FORMAT = 2  # 2: the pool's per-slot reservations (1: holes)
#: the table's settings in a snapshot, the arguments that build it anew
SETTINGS = ("max_requests", "max_position", "dtype", "backend", "num_dims")


def snapshot(settings: dict[str, Any], state: SlotState, steps: Steps) -> dict[str, Any]:
    """The table of ``settings`` (:data:`SETTINGS`), ``state`` and ``steps`` as plain values (arrays
    copied); the caller holds the table's lock."""
    pool, mirror = state.pool, steps.device
    return {
        "format": FORMAT,
        **settings,
        "device": steps.device_name,
        "device_columns": steps.device_columns if mirror is None else int(mirror.ramp.shape[0]),
        "family_rows": state.family_rows,
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


def settings_of(values: Any) -> dict[str, Any]:
    """The settings of the table :func:`snapshot` took ``values`` from (:data:`SETTINGS`), which build
    it anew; a snapshot of another layout is refused."""
    if not isinstance(values, dict) or values.get("format") != FORMAT:
        found = values.get("format") if isinstance(values, dict) else type(values).__name__
        raise MRopeError(
            f"this PositionTable was pickled in another layout ({found!r}, this mrope reads {FORMAT}): "
            "load it with the mrope version that pickled it, or build the table anew"
        )
    return {name: values[name] for name in SETTINGS}


def restore(values: dict[str, Any], state: SlotState, steps: Steps) -> None:
    """Make ``state`` and ``steps`` (of a table built from :func:`settings_of`) the snapshot's; the arrays
    in ``values`` become the table's."""
    pool = state.pool
    state.info[...] = values["info"]
    if state.deltas is not None:
        state.deltas[...] = values["deltas"]
    pool.use(values["data"], values["floats"])
    pool.top, pool.frozen = values["top"], values["frozen"]
    pool.first, pool.count, pool.reserved = values["first"], values["count"], values["reserved"]
    pool.compactions = values["compactions"]
    if values["family_rows"] is not None:  # as the first request fixed them
        state.fix_rows(values["family_rows"])
    steps.device_name, steps.device_columns = values["device"], values["device_columns"]
