"""The vLLM integration's life in a process: :func:`enable`, :func:`disable`, the entry point
:func:`register` and the counters (:func:`stats`).

:func:`enable` patches each runner the installed vLLM has and was audited for (:mod:`.models`,
:mod:`.audit`): V1 (:mod:`.v1`), Model Runner V2 on GPUs and vLLM 0.34's CPU runner (:mod:`.v2`). A
runner whose code differs from every audited release is left to vLLM with a warning naming the
targets; the others are still served.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from ..._env import env_mode
from ..._errors import MRopeError
from .._on_import import cancel, when_imported
from . import v1, v2
from .audit import AUDITED
from .models import accepted_runners, installed_version
from .report import show_in_vllm_log
from .state import MODES, PATCHES, STATS, logger, mode, set_mode
from .state import reset_stats as _zero_stats

#: vLLM releases whose internals the integration was audited against and tested with (by source
#: digest: :data:`mrope.integrations.vllm.audit.AUDITED`)
AUDITED_RELEASES = tuple(AUDITED)
#: the environment variable the entry point reads: ``1`` (or ``mrope``), ``check``; anything else: off
ENV_VAR = "MROPE_VLLM"


def enable(mode: str = "mrope") -> None:
    """Serve vLLM's M-RoPE positions from mrope in this process: every model runner of the installed
    vLLM that was audited (V1 runners existing ones included, from their next admission; V2-style
    runners from their next model state).

    Parameters
    ----------
    mode : ``"mrope"`` (mrope's positions are used) or ``"check"`` (vLLM's are used, mrope's are
        computed beside them and compared at every step; a difference raises :class:`MRopeError`).

    Raises
    ------
    MRopeError
        An unknown mode, vLLM not installed, or a vLLM none of whose runners mrope serves (absent, or
        their code differs from every audited release, :data:`AUDITED_RELEASES`; the message names what
        differs).
    """
    if mode not in MODES:
        raise MRopeError(f"mode must be one of {MODES}, got {mode!r}")
    runners = accepted_runners(installed_version())
    if is_enabled() is not None:
        if is_enabled() == mode:
            return
        disable()
    set_mode(mode)
    for runner in runners:
        when_imported(RUNNER_MODULES[runner], functools.partial(_patch_runner, runner))
    guard_engine_start()


#: per runner, the vLLM module whose import defines what its patches replace (the runner's classes are
#: patched when that module is imported, in the processes that run one: not in vLLM's API server)
RUNNER_MODULES = {"v1": "vllm.v1.worker.gpu_model_runner", **v2.MODEL_STATE_MODULES}


def _patch_runner(runner: str, module: ModuleType | None = None) -> None:
    """Apply ``runner``'s patches (its module is imported); the V1 runner's compiled step loaded with them."""
    if is_enabled() is None:
        return
    if runner == "v1":
        from vllm.v1.worker.gpu_input_batch import InputBatch
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        replacements = v1.patch_targets(GPUModelRunner, InputBatch)
    else:
        replacements = v2.patch_targets(runner)
    for (owner, name), replacement in replacements.items():
        PATCHES.apply(owner, name, replacement)
    if runner == "v1":
        _load_compiled_step()


def _load_compiled_step() -> None:
    """Load the table's compiled step for the V1 runner's arrays with the runner's patches, at the start
    of a process that runs one (numba's import and its cached code: ~0.3 s), so that no request waits
    for it at a runner's first admission (it did: 425 ms for the first request after a server's start).
    Where it fails, the numpy step serves."""
    import numpy as np

    from ...serving import PositionTable

    try:
        slots, counts = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        PositionTable(1).fill(np.empty((3, 0), dtype=np.int64), slots, counts, counts)
    except Exception as error:  # nothing mrope does may fail vLLM: the first admission loads it instead
        logger.warning("mrope: the compiled step could not be loaded at start (%s); it loads at use", error)


def disable() -> None:
    """Restore vLLM's own M-RoPE path in this process. Requests admitted while enabled get vLLM's
    positions now, so they go on with vLLM's path (V2-style runners hand their live requests over at
    their next call)."""
    if is_enabled() is None:
        return
    for module in RUNNER_MODULES.values():
        cancel(module)
    vllm_init = v1.vllm_init_positions()
    PATCHES.restore()
    if vllm_init is not None:
        v1.release_runners(vllm_init)
    set_mode(None)


def is_enabled() -> str | None:
    """The mode enabled in this process, or None."""
    return mode()


def stats() -> dict[str, Any]:
    """This process's counters: admitted, removed, steps, checked_steps, fallback_requests,
    fallback_steps, fallback_runners, positions_runners and positions_requests (positions mode's
    runners and registrations, which ``admitted`` counts too), pruning_reads and pruning_updates
    (video token pruning served from the table), and ``runner``: the model runner served last
    (``"v1"``, ``"v2"``, ``"v2-cpu"``, None before any). In vLLM's default multiprocessing the runner
    lives in the engine-core process: read them there (e.g. ``llm.collective_rpc``), not in the caller; a
    server logs them there (``mrope: counters of ...``, every ``MROPE_STATS_INTERVAL`` seconds)."""
    return dict(STATS)


def reset_stats() -> None:
    """Zero this process's counters (``runner`` stays)."""
    _zero_stats()


def register() -> None:
    """The ``vllm.general_plugins`` entry point (``mrope``): vLLM calls it in every process it starts.
    Enables the plugin when ``MROPE_VLLM`` is ``1``/``mrope`` or ``check``; does nothing otherwise.
    Never raises: on an unsupported vLLM it logs a warning and leaves vLLM alone. mrope's lines go to
    vLLM's log (:func:`.report.show_in_vllm_log`): in the process that runs a model runner, one line
    says what serves it and the counters follow at an interval and at exit (:mod:`.report`)."""
    requested = env_mode(ENV_VAR)
    if requested is None:
        return
    show_in_vllm_log()
    try:
        enable(requested)
    except Exception as error:  # never fails vLLM: on any error, vLLM runs unchanged
        logger.warning("mrope: %s; vLLM's own M-RoPE path stays", error)


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

    rebind = getattr(dispatcher, "_rebind_kernels", None)
    if rebind is None or getattr(rebind, "_mrope_guard", False):  # vLLM 0.34 scans no module's objects
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
