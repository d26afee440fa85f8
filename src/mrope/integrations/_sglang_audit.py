"""Which SGLang releases mrope's SGLang integration was audited against, by the source of what it touches.

The same rule as the vLLM integration's (:mod:`.vllm.audit`, whose source digests this module reuses):
a release is accepted when the source of every target (:data:`TARGETS`) equals, byte for byte, the
source in a release that was read and tested (:data:`AUDITED`), whatever its version string. Nothing
of SGLang is imported to compute the digests.
"""

from __future__ import annotations

from collections.abc import Mapping

from .vllm.audit import installed_digests

_FB = "sglang.srt.model_executor.forward_batch_info:ForwardBatch."
_ROPE = "sglang.srt.layers.rotary_embedding."
_POOL = "sglang.srt.mem_cache.memory_pool:ReqToTokenPool."
_GLM_IMAGE = "sglang.srt.multimodal.processors.glm_image:GlmImageProcessor."
_QWEN_VL = "sglang.srt.multimodal.processors.qwen_vl:QwenVLImageProcessor."

#: What the integration patches (the step's two position methods, the prompt functions, GLM-Image's
#: processor's positions), the rules it reproduces (SGLang's prompt positions and its
#: extend/decode/speculative positions), what calls them, and what it reads (the request pool's
#: generation counter, the multimodal inputs).
TARGETS: tuple[str, ...] = (
    _FB + "_compute_mrope_positions",
    _FB + "_compute_mrope_positions_extend",
    _FB + "_compute_mrope_positions_decode",
    _FB + "_expand_mrope_from_input",
    _FB + "compute_spec_mrope_positions",
    _FB + "init_new",
    _ROPE + "mrope:MRotaryEmbedding.get_rope_index",
    _ROPE + "mrope:MRotaryEmbedding.get_rope_index_glm4v",
    _ROPE + "mrope_rope_index:get_rope_index",
    _ROPE + "mrope_rope_index:get_rope_index_glm4v",
    _POOL + "__init__",
    _POOL + "alloc",
    _POOL + "alloc_rows",
    _POOL + "free",
    "sglang.srt.managers.schedule_batch:MultimodalInputs",
    _GLM_IMAGE + "_compute_glm_image_mrope_positions",
    _GLM_IMAGE + "process_mm_data_async",
    # packed prompts: the processors whose outputs are packed, the output the packed prompt rides on,
    # what computes positions in the scheduler, and the readers of the stored positions
    _QWEN_VL + "process_mm_data_async",
    _QWEN_VL + "_process_mm_data_uncached",
    _QWEN_VL + "compose_image_artifacts",
    "sglang.srt.multimodal.processors.glm4v:Glm4vImageProcessor.process_mm_data_async",
    "sglang.srt.managers.schedule_batch:MultimodalProcessorOutput",
    "sglang.srt.managers.schedule_batch:Req.init_next_round_input",
    "sglang.srt.managers.scheduler:Scheduler._maybe_compute_mrope_positions",
    "sglang.srt.managers.mm_utils:extend_mrope_positions_for_retracted_request",
)

#: release -> {target: digest}: the SGLang releases read and tested
AUDITED: dict[str, dict[str, str | None]] = {
    "0.5.23": dict(
        zip(
            TARGETS,
            (
                "c191fda68402c26709b995e4c9732b14b4e98f46a2ad6cc7c7c0b484bfe917a2",
                "f42e7ffe1390684a83b162c8834e605470a56a1c678f252d7a19fab483215fbe",
                "b221e7d63966055ea6b21921a0b5f789bdc9c96a496fbe733817773f120eda2a",
                "57e7a94e7d7579ecfbc42fdd3b4c47fc9f56a36fbc18ffe10fd88cfd7cc32eb0",
                "174afde2f5121691d5c8d5ab973545a5a5266e242c1dc692200be64500088f74",
                "6fc2f0774c23e2b0397a70213c7d883f1a51694aa7fac8f12e05fc07b4e6fdc4",
                "221778535f6373ea22e645a61cc0406d4747619bd3d88577ffafb7dffcbbb6be",
                "a21dcd6c555a690e27512e5e872740044082a065a41d69a9efd4ca966ae5b798",
                "4cb4cd60db87b93eb5709e3eee595070dc80fe7e0e88867b04fb737820d48d90",
                "cf1b02a0a8e8b278093c2406addc3e0cf7fe2f3784fcf4f1726c31b29c918258",
                "b5ab6f73d64acd0b948dd196e57b49c33836b656f32f18c8ee6ce971b37bba40",
                "c0f8ede712f2ea203aa33cbd99554293dd19e28882cf51eb381048f1ebd1af10",
                "39f7b669e6e69d08e75aa3b8188f3f770af6945e6929a5e8912b1c802afc151b",
                "aad8eaac57a32edd3b9890816fef5c261096edfb7a03f3ebf0187aa8256cc65d",
                "6a3816ef6c631b8683d7fe51fb978c78868f7a4c119388a7b29a4658d684a189",
                "8d76dac92e5732ded76c7ef1ceda4784e6587c53ad06063c9da363561589b353",
                "8df4ca993a8e00385c5ddcbe6f92716ced0f959c392e0848a4d8859b8aa8cb2d",
                "82c6975c56f575fd958ef9d421130d4a9bb86861a66db6019d88b9b14c98db40",
                "f4445eabbf2d4e3d319f2be74efdb771df3ef384a53c024a42cc4849e3b20292",
                "6409c4028f6291abda3c488e32d41fc94b0d56ded7cda2f26c0ce00315c2e88a",
                "16218c2408571d0688d893dce21cbd39e75a8381d9488386ef7d52ca5f505db2",
                "297cda5c98ec026b8919540b38f0d4a950b4b93d2a1a25bd700a837c6a8ffcb9",
                "8ebc0c19f63da29077b95e6ef1b4debc97b4ef687938ead13ebe99ff5c9d6f41",
                "8ad5f994584d31a2bfcb3b813f8f2731e3fd9e246a95943123a8a642bcf1012d",
                "b7c29517e8d7c1d44fecad8c100b7b28b51be5ff7550082524309e1edee838e8",
            ),
            strict=True,
        )
    ),
}


def differences(digests: Mapping[str, str | None]) -> tuple[str | None, list[str]]:
    """The audited release whose digests equal these (and ``[]``), or ``(None, the targets that differ
    from the closest audited release)``."""
    closest: list[str] = list(digests)
    for release, audited in AUDITED.items():
        differ = [t for t, d in digests.items() if audited.get(t, "absent") != d]
        if not differ:
            return release, []
        if len(differ) <= len(closest):
            closest = differ
    return None, closest


def installed_release() -> tuple[str | None, list[str]]:
    """:func:`differences` of the installed SGLang (its files read, not imported)."""
    return differences(installed_digests(TARGETS))
