"""mrope inside vLLM: the M-RoPE positions of both of vLLM's model runners served by a
:class:`mrope.PositionTable`.

vLLM computes a request's (3, P) prompt positions at admission with a per-model Python function. Its
V1 runner then loops over the batch in Python every step to copy them (and ``index + delta`` past the
prompt) into its position buffer; its Model Runner V2 (the default where Triton runs) keeps them in a
``(max_num_reqs * 3, max_model_len)`` pinned buffer (GBs) read by a Triton kernel. :func:`enable` acts
on whichever runner vLLM builds, in this process:

- V1 (``GPUModelRunner``, which the CPU runner inherits, and its persistent ``InputBatch``):
  ``_init_mrope_positions`` (admission, resumption of a streaming request) becomes
  ``PositionTable.add``; ``_prepare_inputs`` keeps the step's scheduled counts; ``_calc_mrope_positions``
  (each step) is one ``fill`` into ``mrope_positions.np``; ``_on_request_state_removed`` frees the
  request's slot (a preempted request keeps it: resumption and prefix-cache hits need nothing);
  ``InputBatch.add_request``, ``swap_states``, ``condense`` keep the map from persistent-batch index to
  table slot current.
- V2 (``vllm/v1/worker/gpu/``): the ``RopeState`` that ``get_rope_state`` builds is replaced by
  :class:`mrope.integrations._vllm_v2.TableRopeState`: no per-token buffer, admission from the ids and
  the features' offsets, and each step one :meth:`PositionTable.fill_ragged` from the runner's tensors
  (one Triton launch on a GPU: no host synchronization); ``DefaultModelState.add_request`` names the
  request index for check mode's messages.

vLLM versions are accepted by what was audited, not by a version string: the source of everything of
vLLM's the integration patches, replaces or relies on is digested (:mod:`._vllm_audit`) and must equal
an audited release's; each model's own position code is checked the same way when a runner serves it
by mrope's rule.

*Positions mode*: a model mrope has no rule for, or does not serve the way vLLM does (no family,
:func:`._vllm_inputs.unsupported_reason`), or whose vLLM position code was not audited, is still
served from a table: each request's prompt positions are the ones vLLM's own function computes at
admission (V1: ``_init_mrope_positions``, kept in ``req_state``; V2: the model's
``get_mrope_input_positions``), registered with :meth:`PositionTable.add_positions`, and every step is
the table's (``index + delta`` past the prompt, as vLLM). vLLM's function computes the positions, so
the model's own position code need not be audited in this mode. Logged once per runner, counted in
``positions_runners`` and ``positions_requests``.

What falls back to vLLM's own path (logged once, counted in :func:`stats`): multimodal pruning (video
token pruning rewrites positions after the encoder); a model with other than 3 position rows; a request
whose positions the table cannot hold (mrope's rule refused: vLLM's positions are registered instead;
where even that fails the runner hands every request to vLLM's path for good). A vLLM whose runner
code was not audited is never patched (:func:`enable` raises). Speculative tokens are ordinary
scheduled tokens past the prompt (``index + delta``). The engine never fails because of the
integration, check mode aside.

``mode="check"`` runs vLLM's own code too and compares every step, raising :class:`MRopeError` at the
first differing column: a way to validate a model or a vLLM version before serving with mrope.
"""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._backends import env_mode
from .._errors import MRopeError
from ..families import Family, from_config
from ..serving import PositionTable
from ._vllm_audit import AUDITED, RUNNER_TARGETS, family_differences, installed_digests, match
from ._vllm_inputs import VLLM_SETTINGS, admission_inputs, unsupported_reason
from ._vllm_v2 import TableRopeState

#: vLLM releases whose internals this module was audited against and tested with (by source digest:
#: :data:`mrope.integrations._vllm_audit.AUDITED`)
AUDITED_RELEASES = tuple(AUDITED)
MODES = ("mrope", "check")
#: the environment variable the entry point reads: ``1`` (or ``mrope``), ``check``; anything else: off
ENV_VAR = "MROPE_VLLM"

logger = logging.getLogger(__name__)

_STAT_NAMES = (
    "admitted",  # requests registered in a table
    "removed",  # requests whose slot was freed (finished)
    "steps",  # steps whose positions mrope wrote
    "checked_steps",  # check mode: steps compared with vLLM's own path
    "fallback_requests",  # requests mrope refused (served from vLLM's positions, or by vLLM's path)
    "fallback_steps",  # steps written by vLLM's own path in a patched runner
    "fallback_runners",  # V2 model runners kept on vLLM's path (vLLM's RopeState)
    "positions_runners",  # model runners in positions mode (vLLM's prompt positions, mrope's steps)
    "positions_requests",  # requests registered from vLLM's positions by a runner in positions mode
)
_stats: dict[str, Any] = dict.fromkeys(_STAT_NAMES, 0)
_stats["runner"] = None  # the model runner served last: "v1", "v2" (None before any)
_enabled: dict[str, Any] = {}  # "mode"


@dataclass(frozen=True)
class _Patch:
    """One patched attribute: ``owner.name`` was ``original`` (a class's method or a module's function)."""

    owner: Any
    name: str
    original: Callable[..., Any]


class _Patches:
    """mrope's patches as records keyed by (owner's qualified name, attribute name), each found again from
    mrope's replacement: two owners with a method of the same name never share a record."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], _Patch] = {}
        self._keys: dict[Callable[..., Any], tuple[str, str]] = {}  # mrope's replacement -> its record

    def apply(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        """Set ``owner.name`` to ``replacement`` (with the original's name and docstring), recording it."""
        key = (_qualified_name(owner), name)
        if key in self._records or replacement in self._keys:
            raise MRopeError(f"mrope patches {key[0]}.{name} twice, or one replacement in two places")
        original = vars(owner)[name]
        self._records[key] = _Patch(owner, name, original)
        self._keys[replacement] = key
        setattr(owner, name, functools.wraps(original)(replacement))

    def original(self, replacement: Callable[..., Any]) -> Callable[..., Any]:
        """vLLM's original of one of mrope's replacements."""
        return self._records[self._keys[replacement]].original

    def restore(self) -> None:
        """Put every original back (the last patched first) and forget the records."""
        for patch in reversed(self._records.values()):
            setattr(patch.owner, patch.name, patch.original)
        self._records.clear()
        self._keys.clear()


def _qualified_name(owner: Any) -> str:
    """``module.Class`` of a class, the name of a module."""
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return owner.__name__


_patches = _Patches()


def _original(patched: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's original of one of mrope's replacements."""
    return _patches.original(patched)


_runners: weakref.WeakSet[Any] = weakref.WeakSet()  # runners holding mrope state


def enable(mode: str = "mrope") -> None:
    """Serve vLLM's M-RoPE positions from mrope in this process (every V1 model runner, existing
    ones included from their next admission).

    Parameters
    ----------
    mode : ``"mrope"`` (mrope's positions are used) or ``"check"`` (vLLM's are used, mrope's are
        computed beside them and compared at every step; a difference raises :class:`MRopeError`).

    Raises
    ------
    MRopeError
        An unknown mode, vLLM not installed, or a vLLM whose code the integration patches differs
        from every audited release (:data:`AUDITED_RELEASES`; the message names what differs).
    """
    if mode not in MODES:
        raise MRopeError(f"mode must be one of {MODES}, got {mode!r}")
    runner_cls, batch_cls = _vllm_classes()
    if _enabled:
        if _enabled["mode"] != mode:
            disable()
        else:
            return
    originals = {
        (runner_cls, "_init_mrope_positions"): _init_mrope_positions,
        (runner_cls, "_prepare_inputs"): _prepare_inputs,
        (runner_cls, "_calc_mrope_positions"): _calc_mrope_positions,
        (runner_cls, "_on_request_state_removed"): _on_request_state_removed,
        (batch_cls, "add_request"): _add_request,
        (batch_cls, "swap_states"): _swap_states,
        (batch_cls, "condense"): _condense,
    }
    v2 = _v2_targets()
    if v2 is not None:
        default_module, model_state_cls = v2
        originals[(default_module, "get_rope_state")] = _get_rope_state
        originals[(model_state_cls, "add_request")] = _model_state_add_request
    _enabled["mode"] = mode
    for (owner, name), patched in originals.items():
        _patches.apply(owner, name, patched)
    guard_engine_start()


def disable() -> None:
    """Restore vLLM's own M-RoPE path in this process. Requests admitted while enabled get vLLM's
    positions now, so they go on with vLLM's path."""
    if not _enabled:
        return
    init = _original(_init_mrope_positions)
    _patches.restore()
    for runner in list(_runners):
        state = runner.__dict__.pop("_mrope", None)
        if state is not None:
            state.release(runner, init)
    _enabled.clear()


def is_enabled() -> str | None:
    """The mode enabled in this process, or None."""
    return _enabled.get("mode")


def stats() -> dict[str, Any]:
    """This process's counters (see the module docstring): admitted, removed, steps, checked_steps,
    fallback_requests, fallback_steps, fallback_runners, positions_runners and positions_requests
    (positions mode's runners and registrations, which ``admitted`` counts too), and ``runner``: the
    model runner served last (``"v1"``, ``"v2"``, None before any). In vLLM's default multiprocessing
    the runner lives in the engine-core process: read them there (e.g. ``llm.collective_rpc``), not in
    the caller."""
    return dict(_stats)


def reset_stats() -> None:
    """Zero this process's counters (``runner`` stays)."""
    for name in _STAT_NAMES:
        _stats[name] = 0


def register() -> None:
    """The ``vllm.general_plugins`` entry point (``mrope``): vLLM calls it in every process it starts.
    Enables the plugin when ``MROPE_VLLM`` is ``1``/``mrope`` or ``check``; does nothing otherwise.
    Never raises: on an unsupported vLLM it logs a warning and leaves vLLM alone."""
    mode = env_mode(ENV_VAR)
    if mode is None:
        return
    try:
        enable(mode)
    except Exception as error:  # never fails vLLM: on any error, vLLM runs unchanged
        logger.warning("mrope: %s; vLLM's own M-RoPE path stays", error)


# -- vLLM's classes and version ---------------------------------------------------------------------
def _vllm_classes() -> tuple[type, type]:
    """vLLM's V1 ``GPUModelRunner`` and ``InputBatch``, after the audit of the installed vLLM."""
    try:
        import vllm
    except ImportError as error:
        raise MRopeError("vLLM is not installed") from error
    audited_release(str(getattr(vllm, "__version__", "unknown")))
    from vllm.v1.worker.gpu_input_batch import InputBatch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner, InputBatch


@functools.cache
def audited_release(version: str) -> str:
    """The audited release whose code the installed vLLM has (the source of every target of
    :data:`mrope.integrations._vllm_audit.RUNNER_TARGETS`, byte for byte), whatever its version
    string; logged once per process. Raises :class:`MRopeError` naming what differs otherwise."""
    release, differing = match(installed_digests(RUNNER_TARGETS), version)
    if release is None:
        named = ", ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
        raise MRopeError(
            f"vLLM {version}: the code mrope's integration patches differs from every audited release "
            f"({', '.join(AUDITED)}): {named}; vLLM's own M-RoPE path stays"
        )
    if version.split("+")[0] != release:
        logger.info("mrope: vLLM %s has the code of the audited release %s", version, release)
    return release


def _family_reason(family: Family) -> str | None:
    """Why mrope's rule does not serve a runner of this model (positions mode serves it): the rule
    differs from vLLM's, or vLLM's code for the model is not the audited code (None: the rule serves it)."""
    reason = unsupported_reason(family)
    if reason is not None:
        return reason
    import vllm

    release = audited_release(str(getattr(vllm, "__version__", "unknown")))
    differing = family_differences(family.model_type, release)
    if differing is None:
        return f"vLLM's {family.model_type} position code was not audited for mrope"
    if differing:
        return f"vLLM's {family.model_type} code differs from the audited {release}: {', '.join(differing)}"
    return None


def _vllm_path_reason(model_config: Any, *, pruning: bool) -> str | None:
    """Why a runner's positions stay on vLLM's own path whatever its model (None: a table serves it):
    position rows other than 3, video token pruning (it reads and rewrites stored positions). One rule
    for both runners; never raises."""
    num_dims = getattr(model_config, "mrope_num_dims", 3)
    if num_dims != 3:
        return f"the model has {num_dims} M-RoPE position rows (mrope's vLLM integration serves 3)"
    if pruning:
        return "video token pruning (EVS) reads and rewrites the stored positions"
    return None


def _served_family(model_config: Any) -> tuple[Family | None, str | None]:
    """The family whose rule mrope serves a runner's model with, or why positions mode serves it: no
    family, a model mrope does not serve as vLLM does, or whose vLLM code was not audited. One rule
    for both runners; never raises."""
    try:
        family = from_config(model_config.hf_config, **VLLM_SETTINGS)
        reason = _family_reason(family)
    except Exception as error:
        return None, str(error)
    return (family, None) if reason is None else (None, reason)


def _v2_targets() -> tuple[Any, type] | None:
    """Model Runner V2's model-state module (whose ``get_rope_state`` builds the M-RoPE state) and its
    ``DefaultModelState``; None where this platform cannot import them (V2 cannot run there either)."""
    try:
        from vllm.v1.worker.gpu.model_states import default
    except Exception as error:
        logger.info("mrope: vLLM's Model Runner V2 does not import here (%s); only V1 is served", error)
        return None
    return default, default.DefaultModelState


def guard_engine_start() -> None:
    """Keep vLLM's engine start working once numba is loaded (mrope's compiled step and render use
    it); :func:`enable` calls it, and a process that uses :class:`PositionTable` or
    :func:`mrope.get_rope_index` beside vLLM without the plugin can call it too (idempotent).

    At every engine start vLLM 0.32 rebinds Triton kernels by scanning every module's objects with
    ``vars(obj).get("kernel")``; llvmlite's ``ffi.lib`` (loaded with numba) answers ``vars()`` with a
    C function wrapper, so the next engine started in the process fails with AttributeError (vLLM's
    own numba users, ngram speculative decoding, hit it too). The scan skips that one module. The
    guard stays after :func:`disable`: numba stays loaded.
    """
    from vllm.triton_utils import dispatcher

    rebind = dispatcher._rebind_kernels
    if getattr(rebind, "_mrope_guard", False):
        return

    @functools.wraps(rebind)
    def rebind_kernels(*args: Any, **kwargs: Any) -> Any:
        hidden = sys.modules.pop(_LLVMLITE_FFI, None)
        try:
            return rebind(*args, **kwargs)
        finally:
            if hidden is not None:
                sys.modules[_LLVMLITE_FFI] = hidden

    rebind_kernels._mrope_guard = True
    dispatcher._rebind_kernels = rebind_kernels


_LLVMLITE_FFI = "llvmlite.binding.ffi"


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
            _stats["removed"] += 1
            index = self.batch.req_id_to_index.get(req_id)
            if index is not None:
                self.batch_slots[index] = -1

    def deactivate(self, runner: Any, reason: str) -> None:
        """Hand this runner to vLLM's own path for good (a request mrope cannot serve)."""
        logger.warning("mrope: %s; this model runner uses vLLM's own M-RoPE path from now on", reason)
        self.release(runner, _original(_init_mrope_positions))
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
        _stats["admitted"] += 1
        if self.family is None:
            _stats["positions_requests"] += 1


def _runner_state(runner: Any) -> _RunnerState:
    """The runner's state, created at its first admission."""
    state = runner.__dict__.get("_mrope")
    if state is not None and state.batch is runner.input_batch:
        return state
    if state is not None:  # vLLM rebuilt its persistent batch (before serving): start again
        state.release(runner, _original(_init_mrope_positions))
    pruning = getattr(runner, "is_multimodal_pruning_enabled", False)
    reason = _vllm_path_reason(runner.model_config, pruning=pruning)
    family, why = None, None
    if reason is not None:
        logger.warning("mrope: %s; vLLM's own M-RoPE path serves this model", reason)
    else:
        family, why = _served_family(runner.model_config)
    state = _RunnerState(runner, family, active=reason is None)
    if state.positions_mode:
        _note_positions_mode(why)
    runner._mrope = state
    _runners.add(runner)
    _stats["runner"] = "v1"
    if state.active:
        state.adopt(runner)
    return state


def _note_positions_mode(reason: str | None) -> None:
    """Log and count a runner served in positions mode (``reason``: why mrope's rule does not serve it)."""
    logger.warning("mrope: %s; mrope serves this model's steps from vLLM's own prompt positions", reason)
    _stats["positions_runners"] += 1


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
    if not state.active or state.positions_mode or _enabled["mode"] == "check":
        _original(_init_mrope_positions)(self, req_state)
        if not state.active:
            _stats["fallback_requests"] += 1
            return
    try:
        state.admit(req_state)
    except Exception as error:  # any exception: nothing mrope does may fail the engine
        if _enabled["mode"] == "check":
            raise MRopeError(f"mrope check: request {req_state.req_id!r} refused: {error}") from error
        _stats["fallback_requests"] += 1
        if state.positions_mode or not _admit_vllm_positions(self, state, req_state):
            state.deactivate(self, f"request {req_state.req_id!r}: {error}")
            return
        logger.warning("mrope: request %r: %s; serving vLLM's positions for it", req_state.req_id, error)


def _admit_vllm_positions(runner: Any, state: _RunnerState, req_state: Any) -> bool:
    """A request mrope's rule refused: vLLM's positions for it (computed now: a streaming request's
    prompt changed) registered in the table; False where the table refuses them too."""
    try:
        _original(_init_mrope_positions)(runner, req_state)
        state.admit_positions(req_state)
    except Exception:
        return False
    return True


def _prepare_inputs(self: Any, scheduler_output: Any, num_scheduled_tokens: np.ndarray, *args: Any) -> Any:
    """Keep the step's scheduled counts (per persistent-batch index) for :func:`_calc_mrope_positions`."""
    state = self.__dict__.get("_mrope")
    if state is not None:
        state.num_scheduled = num_scheduled_tokens
    return _original(_prepare_inputs)(self, scheduler_output, num_scheduled_tokens, *args)


def _calc_mrope_positions(self: Any, scheduler_output: Any) -> None:
    """Each step: one ``fill`` of the runner's position buffer."""
    state = self.__dict__.get("_mrope")
    if state is None or not state.active:
        _stats["fallback_steps"] += 1
        return _original(_calc_mrope_positions)(self, scheduler_output)
    batch = self.input_batch
    num_reqs = batch.num_reqs
    state.step += 1
    if _enabled["mode"] == "check":
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
        _stats["fallback_steps"] += 1
        return _original(_calc_mrope_positions)(self, scheduler_output)
    _stats["steps"] += 1


def _check_step(runner: Any, state: _RunnerState, scheduler_output: Any, num_reqs: int) -> None:
    """vLLM's own step, then mrope's into a scratch buffer; the first differing column raises."""
    _original(_calc_mrope_positions)(runner, scheduler_output)
    expected = runner.mrope_positions.np
    computed = runner.input_batch.num_computed_tokens_cpu[:num_reqs]
    scheduled = state.num_scheduled
    ours = np.empty_like(expected)
    try:
        num = state.table.fill(ours, state.batch_slots[:num_reqs], computed, scheduled)
    except Exception as error:  # no positions to compare: only a difference fails the engine
        state.deactivate(runner, f"check mode, step {state.step}: {error}")
        _stats["fallback_steps"] += 1
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
    _stats["checked_steps"] += 1
    _stats["steps"] += 1


def _on_request_state_removed(self: Any, req_id: str, req_state: Any) -> None:
    """A finished request frees its slot."""
    state = self.__dict__.get("_mrope")
    if state is not None and state.active:
        state.forget(req_id)
    return _original(_on_request_state_removed)(self, req_id, req_state)


def _add_request(self: Any, request: Any) -> int:
    """Persistent batch: a request (new or resumed) took index ``index``."""
    index = _original(_add_request)(self, request)
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
    _original(_swap_states)(self, i1, i2)
    state = self.__dict__.get("_mrope")
    if state is not None:
        slots = state.batch_slots
        slots[i1], slots[i2] = slots[i2], slots[i1]


def _condense(self: Any) -> None:
    """Requests moved down into the indices freed this step: read their slots again."""
    state = self.__dict__.get("_mrope")
    if state is None:
        return _original(_condense)(self)
    emptied = list(self.batch_update_builder.removed)
    _original(_condense)(self)
    num_reqs = self.num_reqs
    for index in emptied:
        if index < num_reqs:
            state.batch_slots[index] = state.slot_of.get(self.req_ids[index], -1)


# -- Model Runner V2 ---------------------------------------------------------------------------------
def _get_rope_state(
    model_config: Any, model: Any, max_num_reqs: int, max_num_tokens: int, max_model_len: int, device: Any
) -> Any:
    """V2's ``get_rope_state``: mrope's :class:`TableRopeState` (by the model's rule, or in positions
    mode from vLLM's positions), vLLM's ``RopeState`` where a table cannot serve the model (logged,
    counted in ``fallback_runners``)."""
    original = _original(_get_rope_state)

    def vllm_state() -> Any:
        return original(model_config, model, max_num_reqs, max_num_tokens, max_model_len, device)

    if not getattr(model_config, "uses_mrope", False):
        return vllm_state()
    _stats["runner"] = "v2"
    multimodal = getattr(model_config, "multimodal_config", None)
    try:
        pruning = multimodal is not None and multimodal.is_multimodal_pruning_enabled()
        reason = _vllm_path_reason(model_config, pruning=pruning)
        if reason is None:
            family, why = _served_family(model_config)
            state = TableRopeState(
                family,
                vllm_state,
                is_enabled,
                _stats,
                num_dims=model_config.mrope_num_dims,
                max_num_reqs=max_num_reqs,
                max_num_tokens=max_num_tokens,
                max_model_len=max_model_len,
                device=device,
            )
            if family is None:
                _note_positions_mode(why)
            return state
    except Exception as error:  # nothing mrope does may fail the engine
        reason = str(error)
    logger.warning("mrope: %s; vLLM's own M-RoPE state serves this model runner (V2)", reason)
    _stats["fallback_runners"] += 1
    return vllm_state()


def _model_state_add_request(self: Any, req_index: int, new_req_data: Any) -> None:
    """V2's ``DefaultModelState.add_request``: names the request index for check mode's messages."""
    state = getattr(self, "rope_state", None)
    if isinstance(state, TableRopeState):
        state.name_request(req_index, new_req_data.req_id)
    return _original(_model_state_add_request)(self, req_index, new_req_data)
