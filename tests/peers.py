"""Call the peer implementations (transformers, SGLang) on mrope's inputs, for tests and benchmarks.

Tests and benchmarks (through ``benchmarks/_common.py``) import the peers from here so that they cannot
drift apart; it is test machinery, not part of the installed library. Needs torch and
transformers; SGLang's position module is loaded by path (it imports only torch), so its GPU stack
is not needed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import types
from typing import Any

import numpy as np

from mrope.families import Ernie4_5_VL, Family, Glm4V, Qwen2_5Omni, Qwen3Omni

OMNI_FAMILIES = (Qwen2_5Omni, Qwen3Omni)

# model_type -> (transformers module, class owning get_rope_index)
TRANSFORMERS_MODELS = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLModel"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeModel"),
    "glm4v": ("glm4v", "Glm4vModel"),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeModel"),
    "qwen3_5": ("qwen3_5", "Qwen3_5Model"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeModel"),
    "qwen4_exp": ("qwen4_exp", "Qwen4ExpModel"),
    "cosmos3_edge": ("cosmos3_edge", "Cosmos3EdgeModel"),
    "cosmos3_omni": ("cosmos3_omni", "Cosmos3OmniModel"),
    "cohere_compass": ("cohere_compass", "CohereCompassModel"),
    "paddleocr_vl": ("paddleocr_vl", "PaddleOCRVLModel"),
    "glm46v": ("glm46v", "Glm46VModel"),
    "glm_ocr": ("glm_ocr", "GlmOcrModel"),
    "ernie4_5_vl_moe": ("ernie4_5_vl_moe", "Ernie4_5_VLMoeModel"),
    "qwen2_5_omni": ("qwen2_5_omni", "Qwen2_5OmniPreTrainedModelForConditionalGeneration"),
    "qwen3_omni_moe": ("qwen3_omni_moe", "Qwen3OmniMoePreTrainedModelForConditionalGeneration"),
}
TRANSFORMERS_MODELS["qwen2_5_omni_thinker"] = TRANSFORMERS_MODELS["qwen2_5_omni"]
TRANSFORMERS_MODELS["qwen3_omni_moe_thinker"] = TRANSFORMERS_MODELS["qwen3_omni_moe"]


def transformers_config(model_type: str, **vision: Any) -> Any:
    """A default transformers config of ``model_type``; ``vision`` overrides vision_config fields."""
    from transformers import AutoConfig

    return (
        AutoConfig.for_model(model_type, vision_config=vision) if vision else AutoConfig.for_model(model_type)
    )


def transformers_omni_config(model_type: str, **thinker: Any) -> Any:
    """A default Omni config (``qwen2_5_omni``, ``qwen3_omni_moe``); ``thinker`` overrides thinker_config
    fields (e.g. ``position_id_per_seconds=13``, as Qwen3-Omni's checkpoints)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, thinker_config=thinker)


@functools.cache
def _transformers_owner(model_type: str) -> type:
    module_name, class_name = TRANSFORMERS_MODELS[model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    return getattr(module, class_name)


def mm_token_type_ids(family: Family, input_ids: Any) -> Any:
    """transformers' token types (0 text, 1 image, 2 video) of a (B, L) torch tensor of ids."""
    import torch

    ids = input_ids
    if isinstance(family, Glm4V):
        depth = torch.cumsum(
            (ids == family.video_start_token_id).long() - (ids == family.video_end_token_id).long(), dim=1
        )
        image = ids == family.image_token_id
        return (image & (depth <= 0)).int() + 2 * (image & (depth > 0)).int()
    return (ids == family.image_token_id).int() + 2 * (ids == family.video_token_id).int()


def transformers_rope_index(family: Family, config: Any, input_ids: Any, **kwargs: Any) -> tuple[Any, Any]:
    """transformers' own ``get_rope_index`` of ``family.model_type``, unbound, on a config object.

    ``kwargs``: image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask (torch or None).
    """
    owner = _transformers_owner(family.model_type)
    if isinstance(family, OMNI_FAMILIES):
        return _transformers_omni_rope_index(owner, family, config, input_ids, **kwargs)
    fake_self = types.SimpleNamespace(config=config)
    fake_self.get_vision_position_ids = types.MethodType(owner.get_vision_position_ids, fake_self)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return owner.get_rope_index(fake_self, input_ids, mm_token_type_ids(family, input_ids), **kwargs)


def _transformers_omni_rope_index(
    owner: type,
    family: Family,
    config: Any,
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    attention_mask: Any = None,
    audio_seqlens: Any = None,
    use_audio_in_video: bool = False,
) -> tuple[Any, Any]:
    """An Omni thinker's ``get_rope_index`` (its own signature: ``second_per_grids``, audio inputs).

    ``config``: the top-level or the thinker config; ``vision_start_token_id``, which the thinker config
    lacks by default, is set from the family. transformers needs ``attention_mask`` (it crashes without)."""
    import copy

    thinker = copy.copy(getattr(config, "thinker_config", config))
    thinker.vision_start_token_id = family.vision_start_token_id
    fake_self = types.SimpleNamespace(config=thinker, spatial_merge_size=family.spatial_merge_size)
    for name in ("get_llm_pos_ids_for_vision", "get_chunked_index"):
        if hasattr(owner, name):
            setattr(fake_self, name, types.MethodType(getattr(owner, name), fake_self))
    return owner.get_rope_index(
        fake_self,
        input_ids,
        image_grid_thw,
        video_grid_thw,
        attention_mask,
        use_audio_in_video,
        audio_seqlens,
        second_per_grid_ts,
    )


@functools.cache
def sglang_module() -> types.ModuleType:
    """SGLang's ``mrope_rope_index`` module, loaded by path."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sglang is not installed (pip install --no-deps sglang==0.5.23)")
    path = f"{spec.submodule_search_locations[0]}/srt/layers/rotary_embedding/mrope_rope_index.py"
    module_spec = importlib.util.spec_from_file_location("_sglang_mrope_rope_index", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def sglang_rope_index(
    family: Family,
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    audio_seqlens: Any = None,
    use_audio_in_video: bool = False,
) -> tuple[Any, Any]:
    """SGLang's ``get_rope_index`` (or ``get_rope_index_glm4v``, ``get_rope_index_ernie45``) for unpadded
    (B, L) torch ids.

    Ernie: SGLang reads the original Baidu token layout, where video tokens are the image token between
    the video markers; the ids are rewritten to that layout first. Qwen3-Omni takes the audio inputs
    (``audio_seqlens`` as feature lengths); SGLang has no Qwen2.5-Omni position code.
    """
    sg = sglang_module()
    if isinstance(family, OMNI_FAMILIES):
        if family.model_type not in ("qwen3_omni_moe", "qwen3_omni_moe_thinker"):
            raise NotImplementedError(f"SGLang has no position code for {family.model_type}")
        return sg.get_rope_index(
            family.spatial_merge_size,
            family.image_token_id,
            family.video_token_id,
            family.vision_start_token_id,
            "qwen3_omni_moe",
            None,
            input_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_token_id=family.audio_token_id,
            audio_start_token_id=family.audio_start_token_id,
            position_id_per_seconds=family.position_id_per_seconds,
            use_audio_in_video=use_audio_in_video,
            audio_seqlens=audio_seqlens,
        )
    if isinstance(family, Ernie4_5_VL):
        hf_config = types.SimpleNamespace(
            im_patch_id=family.image_token_id,
            video_start_token_id=family.config["video_start_token_id"],
            video_end_token_id=family.config["video_end_token_id"],
            spatial_conv_size=family.spatial_merge_size,
            temporal_conv_size=family.temporal_merge_size,
        )
        baidu_ids = input_ids.masked_fill(input_ids == family.video_token_id, family.image_token_id)
        return sg.get_rope_index_ernie45(baidu_ids, hf_config, image_grid_thw, video_grid_thw)
    if isinstance(family, Glm4V):
        hf_config = types.SimpleNamespace(
            image_token_id=family.image_token_id,
            video_start_token_id=family.video_start_token_id,
            video_end_token_id=family.video_end_token_id,
            vision_config=types.SimpleNamespace(spatial_merge_size=family.spatial_merge_size),
        )
        return sg.get_rope_index_glm4v(input_ids, hf_config, image_grid_thw, video_grid_thw, None)
    tokens_per_second = getattr(family, "tokens_per_second", None)
    if family.model_type == "paddleocr_vl":  # SGLang scales its time as Qwen2.5-VL's, images included (t * 0)
        tokens_per_second = (family.config.get("vision_config") or {}).get("tokens_per_second", 2)
    return sg.get_rope_index(
        family.spatial_merge_size,
        family.image_token_id,
        family.video_token_id,
        family.config.get("vision_start_token_id", 151652),
        family.model_type,
        tokens_per_second,
        input_ids,
        image_grid_thw,
        video_grid_thw,
        second_per_grid_ts,
    )


def as_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
