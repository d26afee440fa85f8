"""mrope inside SGLang: SGLang's M-RoPE prompt positions and every step's positions served by mrope.

SGLang computes a request's prompt positions in its tokenizer process with a torch loop per item
(``MRotaryEmbedding.get_rope_index``) and keeps them as a (3, L) tensor per request; each step its
``ForwardBatch._compute_mrope_positions`` loops over the batch in Python (extend: slices of each
request's positions, a concatenation, a copy to the device; decode: each delta read with ``.item()``,
a tensor built from the list). :func:`enable` replaces, in this process:

- ``MRotaryEmbedding.get_rope_index`` and ``get_rope_index_glm4v`` (prompt positions, tokenizer
  process): :func:`mrope.get_rope_index` for the model types of :data:`PROMPT_MODEL_TYPES`, the same
  tensors; SGLang's own function for anything else (audio, other models);
- ``GlmImageProcessor._compute_glm_image_mrope_positions`` (GLM-Image's processor, tokenizer process):
  the prompt's positions (:meth:`GlmImage.positions`), then those of the tokens the request generates
  (:meth:`GlmImage.generation_positions`; none where every grid is a complete image of the prompt, as
  SGLang's), delta 0: SGLang's stored positions, which its steps read by index;
- the Qwen-VL and GLM-4.1V processors' ``process_mm_data_async`` (tokenizer process): the positions
  they return are shipped packed (:class:`mrope.serving.PackedPrompt`: the prompt's segments, bytes per
  item, not per token) in the first item's ``model_specific_data``, not as SGLang's (3, L) tensor; in
  the scheduler ``MultimodalInputs.from_processor_output`` moves it onto the request,
  ``Scheduler._maybe_compute_mrope_positions`` computes nothing for it, and
  ``MultimodalInputs.mrope_positions`` renders the positions the first time SGLang's own code reads
  them (a step it serves, sessions, retraction);
- ``ForwardBatch._compute_mrope_positions`` (extend and decode) and ``compute_spec_mrope_positions``
  (speculative decoding), scheduler process: one :class:`mrope.PositionTable` per model runner keyed by
  SGLang's request slot (``req_pool_idx``). A slot is registered when its request first appears in a
  batch (a new generation of the slot in SGLang's request pool: slots are reused after a request ends)
  by copying its packed prompt (text-only prompts: one segment), or, shipped without one, from its
  prompt, grids and offsets (images; videos from SGLang's stored prompt positions), kept as segments
  (O(images + frames)); then every step is one
  table call from the batch's own tensors: extend ``fill`` from its slot, prefix and extend-length
  tensors, decode ``seq_lens - 1 + delta[req_pool_indices]``. On a GPU it runs on the device with the
  table's deltas there (no host synchronization, no host-to-device copy, shapes fixed by the batch);
  on a CPU device on the tensors' numpy views (the compiled step where numba is installed).
  GLM-Image requests are registered from SGLang's stored positions (they cover the tokens generated:
  the scheduler holds no target grids) and decode by ``fill`` of each last token (SGLang reads the
  stored column ``seq_len - 1``, then ``index``); their speculative steps keep SGLang's path, which
  reads no stored positions.

SGLang versions are accepted by the digest of the source of what the integration patches and relies
on (:mod:`._sglang_audit`), never by the version string; any other release keeps SGLang's own path,
with a warning. Nothing mrope does fails the engine: any exception hands the prompt, or the step's
batch, to SGLang's own path (logged once per kind, counted in :func:`stats`); a request mrope cannot
register keeps every batch it is in on SGLang's path. What always takes SGLang's path: models outside
:data:`STEP_MODEL_TYPES`, sessions (multi-turn requests whose history outgrows the stored positions),
``rl_on_policy_target``, request pools without a generation counter, GLM-Image's speculative steps.

``mode="check"`` computes SGLang's positions too and compares them at every prompt and every step:
a difference raises :class:`MRopeError` naming the request, the column and both values. It also
times both paths (:func:`timings`; the benchmark ``benchmarks/sglang_engine.py`` reads them).
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._env import env_mode
from .._errors import MRopeError, note_once
from ..batch import get_rope_index as mrope_get_rope_index
from ..families import Family, find_image_positions, from_config
from ..render.choose import compiled_kernel
from ..serving import PackedPrompt
from ._report import CountersLog
from ._sglang_audit import AUDITED, installed_release
from ._sglang_step import PACKED_ATTRIBUTE, RunnerTable, packed_prompt, runner_table

MODES = ("mrope", "check")
#: the environment variable the entry point reads: ``1`` (or ``mrope``), ``check``; anything else: off
ENV_VAR = "MROPE_SGLANG"
#: the scheduler method :func:`enable` adds: ``engine.collective_rpc(STATS_RPC, path=...)`` writes the
#: scheduler process's counters to ``path`` (JSON)
STATS_RPC = "mrope_write_stats"
#: SGLang releases whose code the integration was audited against (by source digest)
AUDITED_RELEASES = tuple(AUDITED)
#: model types whose SGLang prompt positions mrope reproduces (compared with SGLang's own functions)
PROMPT_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v", "glm_image")
#: model types whose step positions mrope serves (``index + delta`` past the prompt, or GLM-Image's
#: stored positions over its generation)
STEP_MODEL_TYPES = PROMPT_MODEL_TYPES
#: the model types SGLang's ``get_rope_index`` computes (GLM-4.1V and GLM-Image have their own functions)
_ROPE_INDEX_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
#: the settings under which mrope's positions are SGLang's: text after a block at ``max(block) + 1``,
#: Qwen2.5-VL's scaled video time in float32
SGLANG_SETTINGS: dict[str, Any] = {"compat": "vllm", "video_time": "float32"}

logger = logging.getLogger(__name__)

_STAT_NAMES = (
    "prompts",  # prompt positions mrope computed (tokenizer process)
    "admitted",  # requests registered in a table (scheduler process)
    "reused_slots",  # registrations in a slot that held an earlier request
    "from_positions",  # registrations from SGLang's stored prompt positions (not from grids)
    "packed",  # prompts whose positions the tokenizer process shipped packed (segments, not (3, L))
    "from_packed",  # registrations by copying a packed prompt (or a text-only prompt's one segment)
    "materialized",  # packed prompts rendered to (3, L) for a reader of SGLang's stored positions
    "extend_steps",  # extend steps whose positions mrope wrote
    "decode_steps",  # decode steps whose positions mrope wrote
    "spec_steps",  # speculative steps whose positions mrope wrote
    "checked_prompts",  # check mode: prompts compared with SGLang's
    "checked_steps",  # check mode: steps compared with SGLang's
    "fallback_prompts",  # prompts SGLang's own function computed (not served, or an exception)
    "fallback_packs",  # prompts shipped as SGLang's (3, L) tensor: packing them raised
    "fallback_requests",  # requests mrope could not register (their batches take SGLang's path)
    "fallback_steps",  # steps SGLang's own path wrote in a patched process
)
_stats: dict[str, int] = dict.fromkeys(_STAT_NAMES, 0)
#: this process's counters as log lines (:mod:`mrope.integrations._report`), started where mrope first
#: serves: the tokenizer process's prompts, the scheduler process's steps
COUNTERS = CountersLog(logger, lambda: dict(_stats))
_noted: set[tuple[int, str, str | None]] = set()  # (pid, what, model type) _note_serving has seen
_enabled: dict[str, Any] = {}  # "mode"
#: the most check-mode timings kept per process (:func:`timings`)
MAX_TIMINGS = 100_000
_timings: collections.deque[tuple[str, int, int, int]] = collections.deque(maxlen=MAX_TIMINGS)
_patches: list[tuple[Any, str, Any]] = []  # (owner, name, original attribute as stored in the class)
_ADDED = object()  # the "original" of an attribute enable() adds (disable() deletes it)
#: multimodal inputs (scheduler process) whose stored positions are a packed prompt, not yet rendered
_packed_inputs: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # by id (unhashable)
#: model types whose prompt positions the tokenizer process ships packed (GLM-Image's cover its
#: generation: they stay SGLang's tensor)
PACKED_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "glm4v")
#: the key of a request's first item's ``model_specific_data`` that carries its packed prompt from the
#: tokenizer process to the scheduler (:meth:`mrope.serving.PackedPrompt.to_array`)
PACKED_KEY = "mrope_packed_prompt"
_warned: set[str] = set()


def enable(mode: str = "mrope") -> None:
    """Serve SGLang's M-RoPE positions from mrope in this process (prompts and steps).

    Parameters
    ----------
    mode : ``"mrope"`` (mrope's positions are used) or ``"check"`` (SGLang's are used; mrope's are
        computed beside them and compared; a difference raises :class:`MRopeError`).

    Raises
    ------
    MRopeError
        An unknown mode, SGLang not installed, or an SGLang whose patched code differs from every
        audited release (the message names what differs).
    """
    if mode not in MODES:
        raise MRopeError(f"mode must be one of {MODES}, got {mode!r}")
    release, differing = installed_release()
    if release is None:
        named = ", ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
        raise MRopeError(
            f"SGLang: the code mrope's integration patches differs from every audited release "
            f"({', '.join(AUDITED_RELEASES)}) or is missing: {named}; SGLang's own M-RoPE path stays"
        )
    if _enabled:
        if _enabled["mode"] == mode:
            return
        disable()
    from sglang.srt.layers.rotary_embedding.mrope import MRotaryEmbedding
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    replacements = {
        (MRotaryEmbedding, "get_rope_index"): staticmethod(_get_rope_index),
        (MRotaryEmbedding, "get_rope_index_glm4v"): staticmethod(_get_rope_index_glm4v),
        (ForwardBatch, "_compute_mrope_positions"): _compute_mrope_positions,
        (ForwardBatch, "compute_spec_mrope_positions"): _compute_spec_mrope_positions,
        (Scheduler, STATS_RPC): _write_stats,  # added: no original
    }
    try:  # GLM-Image's processor (imports its model's module): without it, the rest is served
        from sglang.srt.multimodal.processors.glm_image import GlmImageProcessor

        replacements[(GlmImageProcessor, _GLM_IMAGE)] = _compute_glm_image_mrope_positions
    except Exception as error:
        _fall_back("GLM-Image's processor", error)
    try:  # prompts shipped packed: without these, SGLang's (3, L) tensors are shipped as before
        replacements.update(_packing_replacements())
    except Exception as error:
        _fall_back("packed prompts", error)
    _enabled["mode"] = mode
    _enabled["release"] = release
    for (owner, name), replacement in replacements.items():
        _patches.append((owner, name, vars(owner).get(name, _ADDED)))
        setattr(owner, name, replacement)
    _load_compiled_backend()


def _load_compiled_backend() -> None:
    """Load mrope's compiled backend now (numba's import, the prompt pass from numba's cache), so that
    prompts of images take it (:func:`mrope.families.find_image_positions`) and no request pays the
    load; where it fails, the numpy path serves."""
    try:
        compiled_kernel("image_positions_int64")
    except Exception as error:  # nothing mrope does may fail the engine
        _fall_back("the compiled prompt pass", error)


def disable() -> None:
    """Restore SGLang's own M-RoPE path in this process (SGLang's stored positions are never removed,
    so running requests go on with it)."""
    for inputs in list(_packed_inputs.values()):  # SGLang's own path reads their stored positions from now on
        _materialize(inputs)
    for owner, name, original in reversed(_patches):
        if original is _ADDED:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    _patches.clear()
    _enabled.clear()


def is_enabled() -> str | None:
    """The mode enabled in this process, or None."""
    return _enabled.get("mode")


def stats() -> dict[str, int]:
    """This process's counters (prompts in the tokenizer process, steps in the scheduler process):
    prompts, admitted, reused_slots, from_positions, extend_steps, decode_steps, spec_steps,
    checked_prompts, checked_steps, fallback_prompts, fallback_requests, fallback_steps."""
    return dict(_stats)


def timings() -> list[tuple[str, int, int, int]]:
    """Check mode's timings in this process, oldest first (the last :data:`MAX_TIMINGS`): ``(kind,
    size, mrope_ns, sglang_ns)`` per prompt (``"prompt"``, size: its tokens) and per step (``"extend"``,
    ``"decode"``, size: its requests), each path's host time (device work is queued, not waited for)."""
    return list(_timings)


def _record(kind: str, size: int, mrope_ns: int, sglang_ns: int) -> None:
    _timings.append((kind, size, mrope_ns, sglang_ns))


def _write_stats(scheduler: Any, path: str) -> None:
    """``Scheduler.mrope_write_stats(path)``: this scheduler process's :func:`stats` and :func:`timings`
    as JSON (``{"stats": ..., "timings": ...}``) in ``path``; from an offline engine:
    ``engine.collective_rpc("mrope_write_stats", path=...)``."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump({"stats": stats(), "timings": timings()}, file)


def reset_stats() -> None:
    """Zero this process's counters and drop its timings."""
    for name in _STAT_NAMES:
        _stats[name] = 0
    _timings.clear()


def register() -> None:
    """The ``sglang.srt.plugins`` entry point (``mrope``), which SGLang calls in every process: enables
    the integration when ``MROPE_SGLANG`` is ``1``/``mrope`` or ``check``, does nothing otherwise. Never
    raises: on an unaudited SGLang it logs a warning and leaves SGLang alone."""
    mode = env_mode(ENV_VAR)
    if mode is None:
        return
    try:
        enable(mode)
    except Exception as error:  # never fails SGLang: on any error, SGLang runs unchanged
        logger.warning("mrope: %s; SGLang's own M-RoPE path stays", error)


def _original(name: str) -> Callable[..., Any]:
    """SGLang's own function or method replaced under ``name`` (a staticmethod unwrapped)."""
    for _owner, patched, original in _patches:
        if patched == name and original is not _ADDED:
            return original.__func__ if isinstance(original, staticmethod) else original
    raise MRopeError(f"mrope's SGLang integration has not patched {name}")


def _fall_back(kind: str, error: BaseException) -> None:
    """Log (once per kind of failure) why SGLang's own path serves this prompt or step."""
    key = f"{kind}: {type(error).__name__}"
    if key not in _warned:
        _warned.add(key)
        logger.warning("mrope: %s: %s; SGLang's own M-RoPE path serves it", kind, error)


# -- prompt positions (tokenizer process) -----------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _prompt_family(
    model_type: str, merge: int, image_id: int, video_id: int, tokens_per_second: float | None
) -> Family:
    config: dict[str, Any] = {
        "model_type": model_type,
        "image_token_id": image_id,
        "video_token_id": video_id,
        "vision_config": {"spatial_merge_size": merge},
    }
    if tokens_per_second is not None:
        config["vision_config"]["tokens_per_second"] = tokens_per_second
    return from_config(config, **SGLANG_SETTINGS)


def _served_prompt(family: Family | None, input_ids: Any, kwargs: dict[str, Any]) -> bool:
    return (
        family is not None
        and input_ids is not None
        and getattr(input_ids, "ndim", 0) == 2
        and not kwargs.get("use_audio_in_video")
        and kwargs.get("audio_seqlens") is None
    )


def _get_rope_index(
    spatial_merge_size: int,
    image_token_id: int,
    video_token_id: int,
    vision_start_token_id: int,
    model_type: str,
    tokens_per_second: float | None = None,
    input_ids: Any = None,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """``MRotaryEmbedding.get_rope_index``: mrope's positions for :data:`PROMPT_MODEL_TYPES`."""
    args = (spatial_merge_size, image_token_id, video_token_id, vision_start_token_id, model_type)
    args += (tokens_per_second, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)

    def sglang() -> tuple[Any, Any]:
        return _original("get_rope_index")(*args, **kwargs)

    qwen2_5 = model_type == "qwen2_5_vl"
    family = None
    # SGLang's Qwen2.5-VL video time needs tokens_per_second: without it, SGLang's own path (and error)
    if model_type in _ROPE_INDEX_TYPES and (
        not qwen2_5 or tokens_per_second is not None or video_grid_thw is None
    ):
        tps = float(tokens_per_second) if qwen2_5 and tokens_per_second is not None else None
        try:
            family = _prompt_family(model_type, int(spatial_merge_size), image_token_id, video_token_id, tps)
        except Exception as error:
            _fall_back(f"{model_type} settings", error)
    if not _served_prompt(family, input_ids, kwargs):
        _stats["fallback_prompts"] += 1
        return sglang()
    return _serve_prompt(family, sglang, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)


def _get_rope_index_glm4v(
    input_ids: Any,
    hf_config: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    attention_mask: Any,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """``MRotaryEmbedding.get_rope_index_glm4v``: mrope's positions for GLM-4.1V prompts."""

    def sglang() -> tuple[Any, Any]:
        return _original("get_rope_index_glm4v")(
            input_ids, hf_config, image_grid_thw, video_grid_thw, attention_mask, **kwargs
        )

    family = None
    try:
        if getattr(hf_config, "model_type", None) == "glm4v" and (
            attention_mask is None or bool(attention_mask.all())
        ):
            family = from_config(hf_config, **SGLANG_SETTINGS)
    except Exception as error:
        _fall_back("GLM-4.1V config", error)
    if not _served_prompt(family, input_ids, kwargs):
        _stats["fallback_prompts"] += 1
        return sglang()
    return _serve_prompt(family, sglang, input_ids, image_grid_thw, video_grid_thw, None)


def _positions(
    family: Family, input_ids: Any, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any
) -> tuple[Any, Any]:
    """mrope's (position_ids (3, B, L), deltas (B, 1)) as SGLang returns them (int64, on the ids' device);
    one prompt (SGLang's processors pass one) through :meth:`Family.positions` on numpy views; a prompt of
    images only by :func:`mrope.families.find_image_positions` (one compiled pass where it can)."""
    import torch

    try:  # (a CPU tensor's numpy view: its shape read there costs less than torch's)
        batch = input_ids.numpy()
    except (RuntimeError, TypeError, NotImplementedError):  # a device or meta tensor, one that needs grad
        batch = None
    if batch is None or batch.shape[0] != 1:
        positions, deltas = mrope_get_rope_index(
            family,
            input_ids,
            image_grid_thw=image_grid_thw,
            video_grid_thw=video_grid_thw,
            second_per_grid_ts=second_per_grid_ts,
        )
        return positions.to(input_ids.dtype), deltas
    ids = batch[0]
    found = None
    if video_grid_thw is None and second_per_grid_ts is None and image_grid_thw is not None:
        images = image_grid_thw.tolist() if hasattr(image_grid_thw, "tolist") else image_grid_thw
        found = find_image_positions(family, ids, images)
    if found is not None:
        positions, delta = found
    else:
        positions, delta = family.positions(
            ids,
            image_grid_thw=_host(image_grid_thw),
            video_grid_thw=_host(video_grid_thw),
            second_per_grid_ts=second_per_grid_ts,
        )
    # a numpy view, then one tensor each (every torch call costs microseconds in the tokenizer's cold cache)
    position_ids = torch.from_numpy(positions[:, None])
    if input_ids.dtype != position_ids.dtype:
        position_ids = position_ids.to(input_ids.dtype)
    return position_ids, torch.from_numpy(np.array([[delta]], dtype=np.int64))


def _host(grid: Any) -> Any:
    """A grid tensor's numpy view (lists and None as they are)."""
    return grid.numpy() if hasattr(grid, "numpy") and grid.device.type == "cpu" else grid


def _serve_prompt(
    family: Family,
    sglang: Callable[[], tuple[Any, Any]],
    input_ids: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    second_per_grid_ts: Any,
) -> tuple[Any, Any]:
    """mrope's (position_ids (3, B, L), deltas (B, 1)) in SGLang's dtypes; SGLang's on any exception,
    and compared with SGLang's in check mode."""
    start = time.perf_counter_ns()
    try:
        positions, deltas = _positions(family, input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)
    except Exception as error:  # nothing mrope does may fail the engine
        if _enabled.get("mode") == "check":
            raise MRopeError(f"mrope check: {family.model_type} prompt refused: {error}") from error
        _fall_back(f"{family.model_type} prompt positions", error)
        _stats["fallback_prompts"] += 1
        return sglang()
    _stats["prompts"] += 1
    _note_serving("prompt positions", family)
    if _enabled.get("mode") != "check":
        return positions, deltas
    middle = time.perf_counter_ns()
    expected, expected_deltas = sglang()
    _record("prompt", int(input_ids.shape[1]), middle - start, time.perf_counter_ns() - middle)
    differ = (positions != expected).any(dim=0).nonzero()
    if differ.numel():
        row, column = (int(v) for v in differ[0])
        ours, theirs = positions[:, row, column].tolist(), expected[:, row, column].tolist()
        raise MRopeError(
            f"mrope check: {family.model_type} prompt (row {row} of the batch), column {column}: "
            f"t, h, w = {ours} from mrope, {theirs} from SGLang"
        )
    if not bool((deltas.reshape(-1) == expected_deltas.reshape(-1).to(deltas.dtype)).all()):
        raise MRopeError(
            f"mrope check: {family.model_type} prompt deltas {deltas.reshape(-1).tolist()} from mrope, "
            f"{expected_deltas.reshape(-1).tolist()} from SGLang"
        )
    _stats["checked_prompts"] += 1
    return expected, expected_deltas


_GLM_IMAGE = "_compute_glm_image_mrope_positions"


@functools.lru_cache(maxsize=8)
def _glm_image_family(image_id: int, start_id: int, end_id: int) -> Family:
    config = {
        "model_type": "glm_image",
        "image_token_id": image_id,
        "image_start_token_id": start_id,
        "image_end_token_id": end_id,
    }
    return from_config(config, **SGLANG_SETTINGS)


def _compute_glm_image_mrope_positions(
    processor: Any, input_ids: Any, image_grid_thw: Any
) -> tuple[Any, Any]:
    """``GlmImageProcessor._compute_glm_image_mrope_positions``: mrope's (3, L + n) positions of the
    prompt and of the n tokens it generates, and delta 0 (SGLang's dtypes and device)."""

    def sglang() -> tuple[Any, Any]:
        return _original(_GLM_IMAGE)(processor, input_ids, image_grid_thw)

    family = None
    try:
        if getattr(input_ids, "ndim", 0) == 1:
            ids = (processor.IM_TOKEN_ID, processor.IMAGE_START_TOKEN_ID, processor.IMAGE_END_TOKEN_ID)
            family = _glm_image_family(*(int(i) for i in ids))
    except Exception as error:
        _fall_back("GLM-Image token ids", error)
    if family is None:
        _stats["fallback_prompts"] += 1
        return sglang()
    start = time.perf_counter_ns()
    try:
        positions = _glm_image_positions(family, input_ids, image_grid_thw)
    except Exception as error:  # nothing mrope does may fail the engine
        if _enabled.get("mode") == "check":
            raise MRopeError(f"mrope check: glm_image prompt refused: {error}") from error
        _fall_back("glm_image prompt positions", error)
        _stats["fallback_prompts"] += 1
        return sglang()
    _stats["prompts"] += 1
    import torch

    delta = torch.zeros([1], dtype=torch.long, device=input_ids.device)
    if _enabled.get("mode") != "check":
        return positions, delta
    middle = time.perf_counter_ns()
    expected, expected_delta = sglang()
    _record("prompt", int(input_ids.shape[0]), middle - start, time.perf_counter_ns() - middle)
    _compare_glm_image(positions, expected, int(input_ids.shape[0]))
    if not bool((expected_delta == 0).all()):
        raise MRopeError(f"mrope check: glm_image delta 0 from mrope, {expected_delta.tolist()} from SGLang")
    _stats["checked_prompts"] += 1
    return expected, expected_delta


def _glm_image_positions(family: Family, input_ids: Any, image_grid_thw: Any) -> Any:
    """The (3, L + n) int64 tensor SGLang's processor stores: the prompt's positions, then, where grids
    remain past its complete images, the generation's (SGLang adds no end marker's position without)."""
    import torch

    ids = input_ids.numpy() if input_ids.device.type == "cpu" else input_ids.cpu().numpy()
    grids = _host(image_grid_thw)
    positions, _ = family.positions(ids, image_grid_thw=grids)
    complete = int(np.count_nonzero(ids == family.image_end_token_id))
    if grids is not None and len(grids) > complete:
        made = family.generation_positions(ids, image_grid_thw=grids)
        positions = np.concatenate([positions, made], axis=1)
    return torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)).to(input_ids.device)


def _compare_glm_image(ours: Any, sglang: Any, prompt_length: int) -> None:
    """Check mode: GLM-Image's stored positions from mrope against SGLang's; a difference of shape or
    the first differing column raises :class:`MRopeError` (the column's part: prompt or generation)."""
    if tuple(ours.shape) != tuple(sglang.shape) or ours.dtype != sglang.dtype:
        raise MRopeError(
            f"mrope check: glm_image positions {tuple(ours.shape)} {ours.dtype} from mrope, "
            f"{tuple(sglang.shape)} {sglang.dtype} from SGLang (a prompt of {prompt_length} tokens)"
        )
    differ = (ours != sglang).any(dim=0).nonzero()
    if differ.numel():
        column = int(differ[0, 0])
        part = "prompt" if column < prompt_length else f"generation, token {column - prompt_length}"
        raise MRopeError(
            f"mrope check: glm_image column {column} ({part}): t, h, w = {ours[:, column].tolist()} from "
            f"mrope, {sglang[:, column].tolist()} from SGLang"
        )


# -- packed prompts: made in the tokenizer process, registered in the scheduler by copying ----------------
def _packing_replacements() -> dict[tuple[Any, str], Any]:
    """What ships a served prompt packed: the tokenizer's Qwen-VL and GLM-4.1V processors pack the
    positions they return (:func:`_packing`); the scheduler's multimodal inputs carry the packed prompt
    (:func:`_carrying`) and render SGLang's stored positions only where SGLang's own code reads them
    (:func:`_stored_positions`); the scheduler computes no positions for a request that has them."""
    from sglang.srt.managers.schedule_batch import MultimodalInputs
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.multimodal.processors.glm4v import Glm4vImageProcessor
    from sglang.srt.multimodal.processors.qwen_vl import QwenVLImageProcessor

    from_output = vars(MultimodalInputs)["from_processor_output"].__func__  # a staticmethod
    compute = vars(Scheduler)["_maybe_compute_mrope_positions"]
    return {
        (processor, "process_mm_data_async"): _packing(vars(processor)["process_mm_data_async"])
        for processor in (QwenVLImageProcessor, Glm4vImageProcessor)
    } | {
        (MultimodalInputs, "from_processor_output"): staticmethod(_carrying(from_output)),
        (MultimodalInputs, "mrope_positions"): property(_stored_positions, _store_positions),
        (Scheduler, "_maybe_compute_mrope_positions"): _computing_unless_packed(compute),
    }


def _packing(original: Callable[..., Any]) -> Callable[..., Any]:
    """A processor's ``process_mm_data_async`` whose output carries its prompt packed
    (:func:`_pack_output`)."""

    @functools.wraps(original)
    async def process_mm_data_async(processor: Any, *args: Any, **kwargs: Any) -> Any:
        output = await original(processor, *args, **kwargs)
        _pack_output(processor, output)
        return output

    return process_mm_data_async


def _pack_output(processor: Any, output: Any) -> None:
    """Pack the (3, L) positions of a processor's output (:class:`mrope.serving.PackedPrompt`, whatever
    path of SGLang or mrope computed them: the packed prompt renders them exactly) and ship that instead,
    in its first item's ``model_specific_data`` (:data:`PACKED_KEY`: SGLang's transport carries arrays
    there), the tensor dropped (check mode ships both: SGLang's path reads the tensor). On any exception
    the output is left as it is (SGLang's tensor, today's path)."""
    model_type = getattr(getattr(processor, "hf_config", None), "model_type", None)
    positions = getattr(output, "mrope_positions", None)
    delta = getattr(output, "mrope_position_delta", None)
    items = getattr(output, "mm_items", None)
    if model_type not in PACKED_MODEL_TYPES or positions is None or delta is None or not items:
        return
    start = time.perf_counter_ns()
    try:
        if positions.ndim == 3:
            positions = positions.squeeze(1)
        packed = PackedPrompt.from_positions(positions, int(delta.reshape(-1)[0]))
        # a new dict: the item's may be shared with a processor cache
        items[0].model_specific_data = {**items[0].model_specific_data, PACKED_KEY: packed.to_array()}
    except Exception as error:  # nothing mrope does may fail the engine
        _fall_back("packing a prompt", error)
        _stats["fallback_packs"] += 1
        return
    if _enabled.get("mode") == "check":
        _record("pack", packed.length, time.perf_counter_ns() - start, 0)
    else:
        output.mrope_positions = None
    _stats["packed"] += 1


def _carrying(original: Callable[..., Any]) -> Callable[..., Any]:
    """``MultimodalInputs.from_processor_output`` that takes the packed prompt out of the items (nothing
    downstream sees it) onto the multimodal inputs; a packed prompt it cannot read is dropped (logged),
    and SGLang computes the positions in the scheduler, as for any request shipped without them."""

    @functools.wraps(original)
    def from_processor_output(obj: Any, *args: Any, **kwargs: Any) -> Any:
        inputs = original(obj, *args, **kwargs)
        array = None
        for item in getattr(inputs, "mm_items", None) or ():
            data = item.model_specific_data
            if PACKED_KEY in data:
                data = dict(data)
                array = data.pop(PACKED_KEY)
                item.model_specific_data = data
        if array is None:
            return inputs
        try:
            vars(inputs)[PACKED_ATTRIBUTE] = PackedPrompt.from_array(array)
        except Exception as error:  # nothing mrope does may fail the engine
            _fall_back("a packed prompt", error)
            return inputs
        if vars(inputs).get("mrope_positions") is None:
            _packed_inputs[id(inputs)] = inputs
        return inputs

    return from_processor_output


def _stored_positions(inputs: Any) -> Any:
    """``MultimodalInputs.mrope_positions`` as SGLang's code reads it: the stored tensor, or, for a
    prompt shipped packed, its positions rendered once (:func:`_materialize`)."""
    values = vars(inputs)
    stored = values.get("mrope_positions")
    if stored is None and PACKED_ATTRIBUTE in values:
        return _materialize(inputs)
    return stored


def _store_positions(inputs: Any, value: Any) -> None:
    vars(inputs)["mrope_positions"] = value


def _materialize(inputs: Any) -> Any:
    """Render a packed prompt's (3, L) int64 positions into ``inputs.mrope_positions`` (SGLang's own
    path reads them: a step it serves, sessions, retraction); returns them."""
    import torch

    values = vars(inputs)
    if values.get("mrope_positions") is None:
        values["mrope_positions"] = torch.from_numpy(values[PACKED_ATTRIBUTE].positions())
        _stats["materialized"] += 1
    _packed_inputs.pop(id(inputs), None)
    return values["mrope_positions"]


def _computing_unless_packed(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Scheduler._maybe_compute_mrope_positions``, which computes a request's positions where none
    were shipped: nothing to compute for a request whose prompt came packed."""

    @functools.wraps(original)
    def _maybe_compute_mrope_positions(scheduler: Any, req: Any) -> None:
        mm = getattr(req, "multimodal_inputs", None)
        if mm is not None and packed_prompt(mm) is not None:
            return None
        return original(scheduler, req)

    return _maybe_compute_mrope_positions


# -- step positions (scheduler process) ----------------------------------------------------------------
def _count(name: str) -> None:
    _stats[name] += 1


def _step_family(hf_config: Any) -> Family | None:
    """The family a model runner's steps are served with (None: SGLang's path, logged)."""
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in STEP_MODEL_TYPES:
        _fall_back("model", MRopeError(f"SGLang's {model_type} positions are not served by mrope"))
        return None
    return from_config(hf_config, **SGLANG_SETTINGS)


def _table(model_runner: Any) -> RunnerTable | None:
    table = runner_table(model_runner, _step_family, _count, _fall_back)
    _note_serving("step positions", table.family if table is not None else None)
    return table


def _note_serving(what: str, family: Family | None) -> None:
    """Start this process's counters lines and say once what mrope serves here (``family``; None: SGLang's
    path serves it, its warning already logged). Never raises; after the first call per process and
    kind, one set lookup."""
    key = (os.getpid(), what, None if family is None else family.model_type)
    if key in _noted:
        return
    _noted.add(key)
    try:
        COUNTERS.start(f"SGLang's {what}")
        if family is None:
            return
        note_once(
            f"serving {what} {family.model_type}",
            "mrope: serves SGLang's M-RoPE %s by mrope's %s rule, mode %s; SGLang's code is the audited "
            "release %s",
            what,
            family.model_type,
            _enabled.get("mode"),
            _enabled.get("release"),
            log=logger,
            level=logging.INFO,
        )
    except Exception as error:  # a missing line, never a failed engine
        logger.debug("mrope: no serving line: %s", error)


def _compute_mrope_positions(self: Any, model_runner: Any, batch: Any) -> None:
    """``ForwardBatch._compute_mrope_positions``: extend and decode positions in one table call."""
    sglang = _original("_compute_mrope_positions")
    decode = self.forward_mode.is_decode()
    if not decode and not self.forward_mode.is_extend(include_draft_extend_v2=True):
        return sglang(self, model_runner, batch)  # SGLang's error for a mode it does not serve here
    table = _table(model_runner)
    if table is None or not table.serves(batch):
        _stats["fallback_steps"] += 1
        return sglang(self, model_runner, batch)
    start = time.perf_counter_ns()
    try:
        positions = table.decode(self, batch) if decode else table.extend(self, batch)
    except Exception as error:  # SGLang's path writes this step; never a failed step
        if _enabled.get("mode") == "check":
            raise MRopeError(f"mrope check: step refused: {error}") from error
        _fall_back("step", error)
        _stats["fallback_steps"] += 1
        return sglang(self, model_runner, batch)
    if _enabled.get("mode") == "check":
        middle = time.perf_counter_ns()
        sglang(self, model_runner, batch)
        kind = "decode" if decode else "extend"
        _record(kind, len(batch.reqs), middle - start, time.perf_counter_ns() - middle)
        RunnerTable.compare(positions, self.mrope_positions, batch, 1 if decode else None)
        _stats["checked_steps"] += 1
    else:
        self.mrope_positions = positions
    _stats["decode_steps" if decode else "extend_steps"] += 1


def _compute_spec_mrope_positions(
    self: Any, model_runner: Any, batch: Any, seq_positions: Any = None
) -> None:
    """``ForwardBatch.compute_spec_mrope_positions``: ``positions + delta[req_pool_indices]``."""
    sglang = _original("compute_spec_mrope_positions")
    table = _table(model_runner)
    if table is None or not table.serves_speculative or not table.serves(batch):
        _stats["fallback_steps"] += 1
        return sglang(self, model_runner, batch, seq_positions)
    try:
        positions = table.speculative(self, batch, seq_positions)
    except Exception as error:
        if _enabled.get("mode") == "check":
            raise MRopeError(f"mrope check: speculative step refused: {error}") from error
        _fall_back("speculative step", error)
        _stats["fallback_steps"] += 1
        return sglang(self, model_runner, batch, seq_positions)
    if _enabled.get("mode") == "check":
        sglang(self, model_runner, batch, seq_positions)
        RunnerTable.compare(positions, self.mrope_positions, batch, positions.shape[1] // len(batch.reqs))
        _stats["checked_steps"] += 1
    else:
        self.mrope_positions = positions
    _stats["spec_steps"] += 1
