"""mrope in vLLM's V1 model runner (``GPUModelRunner``, which V1's CPU runner inherits, and its persistent
``InputBatch``; vLLM 0.32 and 0.33, gone in 0.34).

``_init_mrope_positions`` (admission, resumption of a streaming request) becomes ``PositionTable.add``;
``_prepare_inputs`` keeps the step's scheduled counts; ``_calc_mrope_positions`` (each step) is one
``fill`` into ``mrope_positions.np``; ``_on_request_state_removed`` frees the request's slot (a preempted
request keeps it: resumption and prefix-cache hits need nothing); ``InputBatch.add_request``,
``swap_states``, ``condense`` keep the map from persistent-batch index to table slot current.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._errors import MRopeError
from ...families import Family
from ...serving import PositionTable
from .features import admission_inputs
from .models import note_positions_mode, served_family, vllm_path_reason
from .report import note_runner
from .state import PATCHES, STATS, mode, original

logger = logging.getLogger("mrope.integrations.vllm")

#: runners holding mrope state (released by :func:`release_runners`)
SERVED_RUNNERS: weakref.WeakSet[Any] = weakref.WeakSet()


def patch_targets(runner_cls: type, batch_cls: type) -> dict[tuple[Any, str], Callable[..., Any]]:
    """What the V1 runner's patches replace: ``(owner, name) -> mrope's replacement``."""
    return {
        (runner_cls, "_init_mrope_positions"): _init_mrope_positions,
        (runner_cls, "_prepare_inputs"): _prepare_inputs,
        (runner_cls, "_calc_mrope_positions"): _calc_mrope_positions,
        (runner_cls, "_on_request_state_removed"): _on_request_state_removed,
        (batch_cls, "add_request"): _add_request,
        (batch_cls, "swap_states"): _swap_states,
        (batch_cls, "condense"): _condense,
    }


def release_runners(vllm_init: Callable[[Any, Any], None]) -> None:
    """Give every served runner's live requests vLLM's own positions (``vllm_init``: vLLM's
    ``_init_mrope_positions``) and drop mrope's state: vLLM's path serves them from now on."""
    for runner in list(SERVED_RUNNERS):
        state = runner.__dict__.pop("_mrope", None)
        if state is not None:
            state.release(runner, vllm_init)


def vllm_init_positions() -> Callable[[Any, Any], None] | None:
    """vLLM's own ``_init_mrope_positions`` while the V1 patches are in place (None otherwise)."""
    return original(_init_mrope_positions) if PATCHES.patched(_init_mrope_positions) else None


# -- per-runner state -------------------------------------------------------------------------------
class _RunnerState:
    """A model runner's table, its request slots and the persistent batch's index -> slot map. With a
    family, requests are registered by its rule; without one (positions mode), from the positions
    vLLM computed; inactive (no table), vLLM's own path serves the runner."""

    def __init__(self, runner: Any, family: Family | None, *, active: bool) -> None:
        batch = runner.input_batch
        self.family = family
        num_slots = 2 * batch.max_num_reqs  # room for preempted requests beside the running ones
        self.table = PositionTable(num_slots) if active else None  # None: vLLM's path
        self.slot_of: dict[str, int] = {}
        self.free_slots = list(range(num_slots - 1, -1, -1))
        self.batch_slots = np.full(batch.max_num_reqs, -1, dtype=np.int64)
        self.batch = batch
        batch._mrope = self
        self.runner = weakref.ref(runner)
        self.num_scheduled: np.ndarray | None = None
        self.step = 0
        if self.table is not None:  # compile (or load) the step for vLLM's array types now, not at a step
            none = batch.num_computed_tokens_cpu[:0]
            self.table.fill(runner.mrope_positions.np, self.batch_slots[:0], none, none)

    @property
    def active(self) -> bool:
        return self.table is not None

    @property
    def positions_mode(self) -> bool:
        """Whether requests are registered from vLLM's positions (no family), their steps the table's."""
        return self.active and self.family is None

    def admit(self, req_state: Any) -> None:
        """Register a request (a new one, or a streaming request's updated prompt); in positions mode
        from the positions vLLM computed for it at this admission."""
        if self.family is None:
            return self.admit_positions(req_state)
        self.forget(req_state.req_id)
        slot = self._free_slot()
        ids, inputs = _request_inputs(self.family, req_state)
        self.table.add(slot, self.family, ids, **inputs)
        self._bind(req_state.req_id, slot)

    def readmit(self, req_state: Any) -> int:
        """Register a resumed request whose slot was evicted while it was preempted; its slot."""
        try:
            self.admit(req_state)
        except Exception:  # it was served from vLLM's positions: it still has them
            self.admit_positions(req_state)
        return self.slot_of[req_state.req_id]

    def admit_positions(self, req_state: Any) -> None:
        """Register a request from the positions vLLM computed for it (``req_state.mrope_positions``)."""
        self.forget(req_state.req_id)
        slot = self._free_slot()
        self.table.add_positions(slot, req_state.mrope_positions, req_state.mrope_position_delta)
        self._bind(req_state.req_id, slot)

    def adopt(self, runner: Any) -> None:
        """Register the requests vLLM's path admitted before this state existed (the plugin enabled, or
        its mode switched, while they ran) from the positions vLLM computed for them."""
        for req_state in list(runner.requests.values()):
            if req_state.mrope_positions is None or req_state.req_id in self.slot_of:
                continue
            try:
                self.admit_positions(req_state)
            except Exception as error:  # vLLM's path serves them all then
                self.deactivate(runner, f"request {req_state.req_id!r}, admitted before mrope: {error}")
                return

    def forget(self, req_id: str) -> None:
        slot = self.slot_of.pop(req_id, None)
        if slot is not None:
            self.table.remove(slot)
            self.free_slots.append(slot)
            STATS["removed"] += 1
            index = self.batch.req_id_to_index.get(req_id)
            if index is not None:
                self.batch_slots[index] = -1

    def deactivate(self, runner: Any, reason: str) -> None:
        """Hand this runner to vLLM's own path for good (a request mrope cannot serve)."""
        logger.warning("mrope: %s; this model runner uses vLLM's own M-RoPE path from now on", reason)
        self.release(runner, original(_init_mrope_positions))
        self.table = None

    def release(self, runner: Any, vllm_init: Callable[[Any, Any], None]) -> None:
        """Give every live request vLLM's own positions, so vLLM's path can serve it."""
        for req_state in runner.requests.values():
            if req_state.mrope_positions is None:
                vllm_init(runner, req_state)
        self.slot_of.clear()
        self.batch._mrope = None

    def _free_slot(self) -> int:
        if not self.free_slots:  # evict a preempted request; it is registered again when it resumes
            running = self.batch.req_id_to_index
            self.forget(next(r for r in self.slot_of if r not in running))
        return self.free_slots.pop()

    def _bind(self, req_id: str, slot: int) -> None:
        self.slot_of[req_id] = slot
        index = self.batch.req_id_to_index.get(req_id)
        if index is not None:
            self.batch_slots[index] = slot
        STATS["admitted"] += 1
        if self.family is None:
            STATS["positions_requests"] += 1


def _runner_state(runner: Any) -> _RunnerState:
    """The runner's state, created at its first admission."""
    state = runner.__dict__.get("_mrope")
    if state is not None and state.batch is runner.input_batch:
        return state
    if state is not None:  # vLLM rebuilt its persistent batch (before serving): start again
        state.release(runner, original(_init_mrope_positions))
    pruning = getattr(runner, "is_multimodal_pruning_enabled", False)
    reason = vllm_path_reason(runner.model_config, pruning=pruning)
    family, why = None, None
    if reason is not None:
        logger.warning("mrope: %s; vLLM's own M-RoPE path serves this model", reason)
    else:
        family, why = served_family(runner.model_config)
    state = _RunnerState(runner, family, active=reason is None)
    if state.positions_mode:
        note_positions_mode(why)
    runner._mrope = state
    SERVED_RUNNERS.add(runner)
    STATS["runner"] = "v1"
    note_runner("v1", family, why, served=state.active)
    if state.active:
        state.adopt(runner)
    return state


def _request_inputs(family: Family, req_state: Any) -> tuple[Any, dict[str, Any]]:
    """The prompt ids and the keyword inputs of :meth:`PositionTable.add` for a request."""
    features = [f for f in req_state.mm_features if f.modality != "prompt_embeds"]
    ids = req_state.prompt_token_ids
    if ids is None:  # embeddings only: text positions (-1 is no placeholder id)
        ids = np.full(req_state.prompt_embeds.shape[0], -1, dtype=np.int64)
    return ids, admission_inputs(family, features)


# -- the patched methods ------------------------------------------------------------------------------
def _init_mrope_positions(self: Any, req_state: Any) -> None:
    """Admission: register the request in the runner's table (vLLM's positions computed first in
    check mode, to compare, and in positions mode, to register)."""
    state = _runner_state(self)
    if not state.active or state.positions_mode or mode() == "check":
        original(_init_mrope_positions)(self, req_state)
        if not state.active:
            STATS["fallback_requests"] += 1
            return
    try:
        state.admit(req_state)
    except Exception as error:  # any exception: nothing mrope does may fail the engine
        if mode() == "check":
            raise MRopeError(f"mrope check: request {req_state.req_id!r} refused: {error}") from error
        STATS["fallback_requests"] += 1
        if state.positions_mode or not _admit_vllm_positions(self, state, req_state):
            state.deactivate(self, f"request {req_state.req_id!r}: {error}")
            return
        logger.warning("mrope: request %r: %s; serving vLLM's positions for it", req_state.req_id, error)


def _admit_vllm_positions(runner: Any, state: _RunnerState, req_state: Any) -> bool:
    """A request mrope's rule refused: vLLM's positions for it (computed now: a streaming request's
    prompt changed) registered in the table; False where the table refuses them too."""
    try:
        original(_init_mrope_positions)(runner, req_state)
        state.admit_positions(req_state)
    except Exception:
        return False
    return True


def _prepare_inputs(self: Any, scheduler_output: Any, num_scheduled_tokens: np.ndarray, *args: Any) -> Any:
    """Keep the step's scheduled counts (per persistent-batch index) for :func:`_calc_mrope_positions`."""
    state = self.__dict__.get("_mrope")
    if state is not None:
        state.num_scheduled = num_scheduled_tokens
    return original(_prepare_inputs)(self, scheduler_output, num_scheduled_tokens, *args)


def _calc_mrope_positions(self: Any, scheduler_output: Any) -> None:
    """Each step: one ``fill`` of the runner's position buffer."""
    state = self.__dict__.get("_mrope")
    if state is None or not state.active:
        STATS["fallback_steps"] += 1
        return original(_calc_mrope_positions)(self, scheduler_output)
    batch = self.input_batch
    num_reqs = batch.num_reqs
    state.step += 1
    if mode() == "check":
        return _check_step(self, state, scheduler_output, num_reqs)
    try:
        state.table.fill(
            self.mrope_positions.np,
            state.batch_slots[:num_reqs],
            batch.num_computed_tokens_cpu[:num_reqs],
            state.num_scheduled,
        )
    except Exception as error:  # vLLM's path serves this runner from now on; never a failed step
        state.deactivate(self, f"step {state.step}: {error}")
        STATS["fallback_steps"] += 1
        return original(_calc_mrope_positions)(self, scheduler_output)
    STATS["steps"] += 1


def _check_step(runner: Any, state: _RunnerState, scheduler_output: Any, num_reqs: int) -> None:
    """vLLM's own step, then mrope's into a scratch buffer; the first differing column raises."""
    original(_calc_mrope_positions)(runner, scheduler_output)
    expected = runner.mrope_positions.np
    computed = runner.input_batch.num_computed_tokens_cpu[:num_reqs]
    scheduled = state.num_scheduled
    ours = np.empty_like(expected)
    try:
        num = state.table.fill(ours, state.batch_slots[:num_reqs], computed, scheduled)
    except Exception as error:  # no positions to compare: only a difference fails the engine
        state.deactivate(runner, f"check mode, step {state.step}: {error}")
        STATS["fallback_steps"] += 1
        return
    differ = np.flatnonzero((ours[:, :num] != expected[:, :num]).any(axis=0))
    if differ.size:
        column = int(differ[0])
        ends = np.cumsum(scheduled)
        i = int(np.searchsorted(ends, column, side="right"))
        index = int(computed[i]) + column - int(ends[i] - scheduled[i])
        req_id = runner.input_batch.req_ids[i]
        raise MRopeError(
            f"mrope check: request {req_id!r}, step {state.step}: column {column} (sequence index {index}) "
            f"has t, h, w = {ours[:, column].tolist()} from mrope, {expected[:, column].tolist()} from vLLM"
        )
    STATS["checked_steps"] += 1
    STATS["steps"] += 1


def _on_request_state_removed(self: Any, req_id: str, req_state: Any) -> None:
    """A finished request frees its slot."""
    state = self.__dict__.get("_mrope")
    if state is not None and state.active:
        state.forget(req_id)
    return original(_on_request_state_removed)(self, req_id, req_state)


def _add_request(self: Any, request: Any) -> int:
    """Persistent batch: a request (new or resumed) took index ``index``."""
    index = original(_add_request)(self, request)
    state = self.__dict__.get("_mrope")
    if state is not None:
        slot = state.slot_of.get(request.req_id)
        if slot is None and state.active:  # resumed after its slot was evicted
            try:
                slot = state.readmit(request)
            except Exception as error:
                state.deactivate(state.runner(), f"request {request.req_id!r}: {error}")
        state.batch_slots[index] = -1 if slot is None else slot
    return index


def _swap_states(self: Any, i1: int, i2: int) -> None:
    original(_swap_states)(self, i1, i2)
    state = self.__dict__.get("_mrope")
    if state is not None:
        slots = state.batch_slots
        slots[i1], slots[i2] = slots[i2], slots[i1]


def _condense(self: Any) -> None:
    """Requests moved down into the indices freed this step: read their slots again."""
    state = self.__dict__.get("_mrope")
    if state is None:
        return original(_condense)(self)
    emptied = list(self.batch_update_builder.removed)
    original(_condense)(self)
    num_reqs = self.num_reqs
    for index in emptied:
        if index < num_reqs:
            state.batch_slots[index] = state.slot_of.get(self.req_ids[index], -1)
