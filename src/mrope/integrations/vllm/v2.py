"""mrope's M-RoPE state for vLLM's V2-style model runners: ``RopeState``'s interface over a
:class:`mrope.PositionTable`, in Model Runner V2 (``vllm/v1/worker/gpu/``) and vLLM 0.34's CPU runner
(``vllm/v1/worker/cpu/``).

vLLM's ``RopeState`` stores every prompt token's positions in a ``(max_num_reqs * num_dims,
max_model_len)`` int32 buffer (3 GiB at 1024 requests of 262,144 tokens, in every worker: pinned host
memory read by the GPU, or a host tensor read by the CPU runner's C++ op) and fills it at admission from
the model's Python ``get_mrope_input_positions``. :class:`TableRopeState` keeps the placed segments instead
(O(images + frames) per request), admits from the prompt ids and the features' grids and offsets, and
writes each step's positions with one :meth:`PositionTable.fill_ragged` from the runner's own tensors:
one Triton launch on a GPU (no host synchronization, no host-to-device copy per step), the compiled or
numpy step on the host. Video token pruning's read renders a request's positions from the table, its
update registers the recomputed ones (:meth:`PositionTable.add_positions`).

Without a family (positions mode: a model mrope has no rule for, or does not serve as vLLM does) every
request's prompt positions are vLLM's own (``get_mrope_input_positions``, as vLLM's ``RopeState``
calls it) registered with :meth:`PositionTable.add_positions`; the steps are the table's all the same.

What the state does when it cannot serve (the engine never fails because of mrope, check mode aside):

- a request whose inputs mrope refuses (any exception) gets vLLM's positions for it
  (``get_mrope_input_positions``) registered in the table, logged and counted;
- positions the table cannot hold, or :func:`~mrope.integrations.vllm.disable`: the state *hands over*:
  vLLM's ``RopeState`` is built, every live request's positions written into it (through its own
  ``update_prefill_positions``), and from then on every call goes to it.

``mode() == "check"``: vLLM's ``RopeState`` runs beside the table (admission, step, pruning); after each
step and at each pruning read the two are compared and a difference raises :class:`MRopeError` naming the
request, the step, the column and both values. vLLM's positions are the ones used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np

from ..._errors import MRopeError
from ...families import Family
from ...serving import PositionTable
from .features import admission_inputs
from .models import RUNNER_NAMES, note_positions_mode, served_family, vllm_path_reason
from .report import note_runner
from .state import STATS, mode, original

logger = logging.getLogger("mrope.integrations.vllm")
#: the table's initial pool, entries per request slot (a Qwen2.5-VL video of 64 frames takes 35): the
#: pool then grows geometrically and keeps each slot's room for its largest request, so that admissions
#: stop compacting or growing it once each slot has held its largest (see PositionTable)
SEGMENTS_PER_REQUEST = 16


class TableRopeState:
    """vLLM's ``RopeState`` interface over a :class:`PositionTable` keyed by vLLM's request index.

    Parameters
    ----------
    family : the model's family (``from_config(hf_config, **VLLM_SETTINGS)``), or None: positions mode
        (each request registered from vLLM's own positions)
    vllm_state : builds vLLM's own ``RopeState`` (for check mode and a hand-over), called with no argument
    mode : returns the integration's current mode: ``"mrope"``, ``"check"`` or None (disabled)
    stats : the integration's counters, updated in place
    num_dims, max_num_reqs, max_num_tokens, max_model_len, device : as vLLM's ``RopeState``
    """

    def __init__(
        self,
        family: Family | None,
        vllm_state: Callable[[], Any],
        mode: Callable[[], str | None],
        stats: MutableMapping[str, Any],
        *,
        num_dims: int,
        max_num_reqs: int,
        max_num_tokens: int,
        max_model_len: int,
        device: Any,
    ) -> None:
        import torch

        self.family = family
        self.num_dims = num_dims
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.max_model_len = max_model_len
        self.device = torch.device(device)
        self.make_vllm_state = vllm_state
        self._mode = mode
        self._stats = stats
        on_host = self.device.type == "cpu"
        capacity = SEGMENTS_PER_REQUEST * max_num_reqs
        self.table = PositionTable(
            max_num_reqs, device="cpu" if on_host else self.device, pool_capacity=capacity
        )
        # the buffer the model reads, whoever writes it (CUDA graphs captured on it stay right): one
        # dummy column past max_num_tokens, as vLLM's (a non-contiguous slice for torch.compile)
        self.positions = torch.zeros((num_dims, max_num_tokens + 1), dtype=torch.int64, device=self.device)
        self._on_host = on_host
        self._out = self.positions.numpy() if on_host else self.positions
        self._check_out: Any = None  # check mode: mrope's step goes here, vLLM's into ``positions``
        self.vllm: Any = None  # vLLM's RopeState: check mode, or everything after a hand-over
        self.handed_over = False
        self.req_ids: dict[int, str] = {}  # request index -> vLLM's request id (for messages)
        self.step = 0
        self._staged = False  # check mode: vLLM's state has writes to apply
        if on_host:  # compile (or load) the step for vLLM's array types now, not at the first step
            none = np.zeros(0, dtype=np.int32)
            self.table.fill(self._out, none, none, none)

    # -- vLLM's RopeState interface ---------------------------------------------------------------
    def init_prefill_positions(
        self, req_idx: int, model: Any, prefill_token_ids: list[int], mm_features: list
    ) -> None:
        """Admission (also of a preempted request, whose prefill ids are prompt + generated)."""
        if self._follow_mode():
            return self.vllm.init_prefill_positions(req_idx, model, prefill_token_ids, mm_features)
        if self.vllm is not None:  # check mode: vLLM's positions too
            self.vllm.init_prefill_positions(req_idx, model, prefill_token_ids, mm_features)
            self._staged = True
        try:  # vLLM has no remove hook: an admission overwrites the slot (replace)
            if self.family is None:
                self._add_vllm_positions(req_idx, model, prefill_token_ids, mm_features)
            else:
                inputs = admission_inputs(self.family, mm_features)
                self.table.add(req_idx, self.family, prefill_token_ids, replace=True, **inputs)
        except Exception as error:
            if req_idx in self.table:  # the refused request's slot still holds the one before it
                self.table.remove(req_idx)
            if self.vllm is not None:
                raise MRopeError(f"mrope check: request {self._name(req_idx)} refused: {error}") from error
            if self.family is None:  # vLLM's own positions refused: nothing else to try
                self._stats["fallback_requests"] += 1
                self.hand_over(f"request {self._name(req_idx)}: {error}")
                self.vllm.init_prefill_positions(req_idx, model, prefill_token_ids, mm_features)
                return
            self._admit_vllm_positions(req_idx, model, prefill_token_ids, mm_features, error)
            return
        self._stats["admitted"] += 1
        if self.family is None:
            self._stats["positions_requests"] += 1

    def apply_staged_writes(self) -> None:
        """GPU runner: vLLM's staged admissions (check mode, hand-over); the table stages its own."""
        if self.vllm is not None and (self.handed_over or self._staged):
            _apply_staged_writes(self.vllm)
            self._staged = False

    def get_positions(self, num_tokens: int) -> Any:
        return self.positions[:, :num_tokens]

    def prepare_positions(
        self, idx_mapping: Any, query_start_loc: Any, prefill_lens: Any, num_computed_tokens: Any
    ) -> None:
        """Each step: the positions of every scheduled token in ``positions[:, :N]``, one call."""
        step = (idx_mapping, query_start_loc, prefill_lens, num_computed_tokens)
        if self._follow_mode():
            self._stats["fallback_steps"] += 1
            return self.vllm.prepare_positions(*step)
        self.step += 1
        out = self._out if self.vllm is None else self._scratch()
        try:
            self.table.fill_ragged(out, idx_mapping, query_start_loc, num_computed_tokens)
        except Exception as error:
            if self._dummy_batch(idx_mapping):  # warm-up and capture: any positions will do
                self.positions.zero_()
                return
            if self.vllm is not None:
                raise MRopeError(f"mrope check: step {self.step}: {error}") from error
            self.hand_over(f"step {self.step}: {error}")
            self._stats["fallback_steps"] += 1
            return self.vllm.prepare_positions(*step)
        self._stats["steps"] += 1
        if self.vllm is not None:
            self.vllm.prepare_positions(*step)
            self._compare(idx_mapping, query_start_loc, num_computed_tokens)

    def read_prefill_positions(self, req_idx: int, length: int) -> Any:
        """Video token pruning's read: the request's first ``length`` prompt positions, (num_dims,
        length) int32 on the state's device, rendered from the table (check mode: compared with vLLM's)."""
        if self._follow_mode():
            return self.vllm.read_prefill_positions(req_idx, length)
        try:
            ours = self._render(req_idx, length)
        except Exception as error:
            if self.vllm is not None:
                raise MRopeError(
                    f"mrope check: request {self._name(req_idx)}: pruning's read: {error}"
                ) from error
            self.hand_over(f"request {self._name(req_idx)}: pruning's read: {error}")
            return self.vllm.read_prefill_positions(req_idx, length)
        self._stats["pruning_reads"] += 1
        if self.vllm is None:
            return ours
        theirs = self.vllm.read_prefill_positions(req_idx, length)
        self._compare_columns(ours.cpu().numpy(), theirs.cpu().numpy(), req_idx, "pruning's read")
        return theirs

    def update_prefill_positions(self, req_idx: int, positions: Any, delta: int) -> None:
        """Video token pruning's write: the request's recomputed prompt positions (num_dims, L) and delta,
        registered in the table as :meth:`PositionTable.add_positions` holds them."""
        if self._follow_mode():
            return self.vllm.update_prefill_positions(req_idx, positions, delta)
        if self.vllm is not None:  # check mode: vLLM's state takes the update too (GPU runner: staged)
            self.vllm.update_prefill_positions(req_idx, positions, delta)
            self._staged = True
        try:
            host = positions.cpu().numpy() if hasattr(positions, "cpu") else np.asarray(positions)
            if req_idx in self.table:
                self.table.remove(req_idx)
            self.table.add_positions(req_idx, host, int(delta))
        except Exception as error:
            if self.vllm is not None:
                raise MRopeError(
                    f"mrope check: request {self._name(req_idx)}: pruning's update: {error}"
                ) from error
            self.hand_over(f"request {self._name(req_idx)}: pruning's update: {error}")
            self.vllm.update_prefill_positions(req_idx, positions, delta)
            return
        self._stats["pruning_updates"] += 1

    # -- the integration's side -------------------------------------------------------------------
    def name_request(self, req_idx: int, req_id: str) -> None:
        """Remember vLLM's request id of a request index (for check mode's messages)."""
        self.req_ids[req_idx] = req_id

    def hand_over(self, reason: str) -> None:
        """vLLM's own ``RopeState`` from now on, holding every live request's positions (rendered from
        the table, which equal vLLM's)."""
        if self.handed_over:
            return
        logger.warning("mrope: %s; this model runner uses vLLM's own M-RoPE path from now on", reason)
        if self.vllm is None:
            self.vllm = self._vllm_with_live_requests()
        self.handed_over = True
        self.table = None

    def nbytes(self) -> int:
        """Bytes of position state this object holds (the table's pool and per-slot info, the step's
        output buffer; vLLM's state where it holds one)."""
        return tensor_bytes(self)

    # -- internals --------------------------------------------------------------------------------
    def _follow_mode(self) -> bool:
        """Bring the state in line with the integration's mode; True when vLLM's state serves."""
        if self.handed_over:
            return True
        mode = self._mode()
        if mode is None:
            self.hand_over("mrope's vLLM integration was disabled")
            return True
        if mode == "check" and self.vllm is None:
            self.vllm = self._vllm_with_live_requests()
        elif mode == "mrope" and self.vllm is not None:
            self.vllm = self._check_out = None  # their buffers go; check mode builds them again
        return False

    def _admit_vllm_positions(
        self, req_idx: int, model: Any, ids: list[int], mm_features: list, error: Exception
    ) -> None:
        """A request mrope refused: vLLM's positions for it, held by the table (or a hand-over)."""
        self._stats["fallback_requests"] += 1
        try:
            self._add_vllm_positions(req_idx, model, ids, mm_features)
        except Exception as second:
            self.hand_over(f"request {self._name(req_idx)}: {error}; its vLLM positions: {second}")
            self.vllm.init_prefill_positions(req_idx, model, ids, mm_features)
            return
        logger.warning("mrope: request %s: %s; serving vLLM's positions for it", self._name(req_idx), error)

    def _add_vllm_positions(self, req_idx: int, model: Any, ids: list[int], mm_features: list) -> None:
        """Register the positions and delta vLLM's model computes for a request (as ``RopeState`` does)."""
        positions, delta = model.get_mrope_input_positions(ids, mm_features)
        if req_idx in self.table:  # an admission overwrites the slot
            self.table.remove(req_idx)
        self.table.add_positions(req_idx, positions, int(delta))

    def _vllm_with_live_requests(self) -> Any:
        """vLLM's ``RopeState`` holding the positions and deltas of every request in the table, written
        through its own ``update_prefill_positions`` (the same in the GPU and the CPU state)."""
        import torch

        state = self.make_vllm_state()
        state.positions = self.positions  # one buffer: CUDA graphs captured on it read what serves
        table = self.table
        for slot in range(self.max_num_reqs):
            if slot in table:
                rows = self._render(slot, table.prompt_length(slot)).to(torch.int32)
                state.update_prefill_positions(slot, rows, int(table.delta(slot)))
        _apply_staged_writes(state)
        return state

    def _render(self, slot: int, length: int) -> Any:
        """The first ``length`` positions of the request in ``slot`` from the table: (num_dims, length)
        int32 on the state's device (vLLM's stored dtype)."""
        import torch

        rows = np.empty((self.num_dims, length), dtype=np.int64)
        self.table.fill(rows, np.array([slot]), np.zeros(1, dtype=np.int64), np.array([length]))
        return torch.from_numpy(rows.astype(np.int32)).to(self.device)

    def _compare(self, idx_mapping: Any, query_start_loc: Any, num_computed_tokens: Any) -> None:
        """Check mode: mrope's step against vLLM's (synchronizes); the first differing column raises."""
        num_reqs = int(idx_mapping.shape[0])
        starts = query_start_loc[: num_reqs + 1].cpu().numpy().astype(np.int64)
        num = int(starts[-1])
        ours = np.asarray(self._check_out[:, :num].cpu() if not self._on_host else self._check_out[:, :num])
        theirs = self.positions[:, :num].cpu().numpy()
        self._stats["checked_steps"] += 1
        differ = np.flatnonzero((ours != theirs).any(axis=0))
        if differ.size:
            column = int(differ[0])
            i = int(np.searchsorted(starts, column, side="right")) - 1
            slot = int(idx_mapping[i])
            index = int(num_computed_tokens[slot]) + column - int(starts[i])
            self._report(
                slot, f"step {self.step}: column {column} (sequence index {index})", ours, theirs, column
            )

    def _compare_columns(self, ours: np.ndarray, theirs: np.ndarray, slot: int, what: str) -> None:
        """Check mode: one request's positions from mrope and vLLM; the first differing column raises."""
        differ = np.flatnonzero((ours != theirs).any(axis=0)) if ours.shape == theirs.shape else [0]
        if len(differ):
            column = int(differ[0])
            self._report(slot, f"{what}: sequence index {column}", ours, theirs, column)

    def _report(self, slot: int, where: str, ours: np.ndarray, theirs: np.ndarray, column: int) -> None:
        ours_at = ours[:, column].tolist() if column < ours.shape[1] else "nothing"
        theirs_at = theirs[:, column].tolist() if column < theirs.shape[1] else "nothing"
        raise MRopeError(
            f"mrope check: request {self._name(slot)}, {where} has positions {ours_at} from mrope, "
            f"{theirs_at} from vLLM"
        )

    def _scratch(self) -> Any:
        """Check mode's buffer for mrope's step (vLLM's step writes the one the model reads)."""
        if self._check_out is None:
            scratch = self.positions.clone()
            self._check_out = scratch.numpy() if self._on_host else scratch
        return self._check_out

    def _dummy_batch(self, idx_mapping: Any) -> bool:
        """Whether a step names a request index that holds no request: vLLM's dummy runs (warm-up,
        profiling, CUDA graph capture) take ``arange(num_reqs)`` whatever is admitted. (The device
        path writes 0 for such indices without failing.)"""
        return any(int(slot) not in self.table for slot in idx_mapping.tolist())

    def _name(self, req_idx: int) -> str:
        req_id = self.req_ids.get(req_idx)
        return f"{req_id!r} (index {req_idx})" if req_id is not None else f"at index {req_idx}"


def _apply_staged_writes(vllm_state: Any) -> None:
    """Apply a vLLM ``RopeState``'s staged writes (the GPU runner's; the CPU runner's writes at once)."""
    apply = getattr(vllm_state, "apply_staged_writes", None)
    if apply is not None:
        apply()


def tensor_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of the distinct torch tensors and numpy arrays an object holds: its attributes and, through
    attributes, the mrope and vLLM objects it holds (not functions), each storage counted once."""
    import torch

    seen = set() if seen is None else seen
    total = 0
    for value in vars(obj).values():
        if isinstance(value, torch.Tensor):
            key = value.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += value.untyped_storage().nbytes()
        elif isinstance(value, np.ndarray):
            base = value if value.base is None else value.base
            if isinstance(base, np.ndarray) and id(base) not in seen:
                seen.add(id(base))
                total += base.nbytes
        elif _holds_state(value) and id(value) not in seen:
            seen.add(id(value))
            total += tensor_bytes(value, seen)
    return total


def _holds_state(value: Any) -> bool:
    """An instance of an mrope or vLLM class (not a function, class or module) with attributes."""
    module = type(value).__module__
    return (
        module.split(".")[0] in ("mrope", "vllm")
        and hasattr(value, "__dict__")
        and not callable(value)
        and not isinstance(value, type)
    )


# -- the patches: each V2-style runner's model-state module builds mrope's state --------------------
#: runner -> the module whose ``get_rope_state`` its ``DefaultModelState`` calls (rebound there)
MODEL_STATE_MODULES = {
    "v2": "vllm.v1.worker.gpu.model_states.default",
    "v2-cpu": "vllm.v1.worker.cpu.model_states.default",
}


def patch_targets(runner: str) -> dict[tuple[Any, str], Callable[..., Any]]:
    """What a V2-style runner's patches replace, ``(owner, name) -> mrope's replacement``; empty where its
    model-state module does not import on this platform (the runner cannot run here either)."""
    import importlib

    try:
        module = importlib.import_module(MODEL_STATE_MODULES[runner])
    except Exception as error:
        logger.info("mrope: %s does not import here (%s); it is not served", RUNNER_NAMES[runner], error)
        return {}
    return {
        (module, "get_rope_state"): _rope_state_builder(runner),
        (module.DefaultModelState, "add_request"): _model_state_add_request(runner),
    }


def _rope_state_builder(runner: str) -> Callable[..., Any]:
    """The runner's ``get_rope_state`` replacement: mrope's :class:`TableRopeState` (by the model's rule,
    or in positions mode from vLLM's positions), vLLM's ``RopeState`` where a table cannot serve the
    model (logged, counted in ``fallback_runners``)."""

    def get_rope_state(
        model_config: Any, model: Any, max_num_reqs: int, max_num_tokens: int, max_model_len: int, device: Any
    ) -> Any:
        vllm_get_rope_state = original(get_rope_state)

        def vllm_state() -> Any:
            return vllm_get_rope_state(
                model_config, model, max_num_reqs, max_num_tokens, max_model_len, device
            )

        if not getattr(model_config, "uses_mrope", False):
            return vllm_state()
        STATS["runner"] = runner
        try:
            reason = vllm_path_reason(model_config, pruning=False)
            if reason is None:
                family, why = served_family(model_config)
                state = TableRopeState(
                    family,
                    vllm_state,
                    mode,
                    STATS,
                    num_dims=model_config.mrope_num_dims,
                    max_num_reqs=max_num_reqs,
                    max_num_tokens=max_num_tokens,
                    max_model_len=max_model_len,
                    device=device,
                )
                if family is None:
                    note_positions_mode(why)
                note_runner(runner, family, why, served=True)
                return state
        except Exception as error:  # nothing mrope does may fail the engine
            reason = str(error)
        logger.warning("mrope: %s; vLLM's own M-RoPE state serves %s", reason, RUNNER_NAMES[runner])
        STATS["fallback_runners"] += 1
        note_runner(runner, None, reason, served=False)
        return vllm_state()

    return get_rope_state


def _model_state_add_request(runner: str) -> Callable[..., Any]:
    """The runner's ``DefaultModelState.add_request`` replacement: names the request index for check
    mode's messages."""

    def add_request(self: Any, req_index: int, new_req_data: Any) -> None:
        state = getattr(self, "rope_state", None)
        if isinstance(state, TableRopeState):
            state.name_request(req_index, new_req_data.req_id)
        return original(add_request)(self, req_index, new_req_data)

    return add_request
