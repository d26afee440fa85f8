"""Call the peer implementations (transformers, SGLang) on mrope's inputs, for tests and benchmarks.

Tests and benchmarks import the peers from here so that they cannot drift apart. Needs torch and
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

from .families import Family

# model_type -> (transformers module, class owning get_rope_index)
TRANSFORMERS_MODELS = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLModel"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeModel"),
    "glm4v": ("glm4v", "Glm4vModel"),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeModel"),
}


def transformers_config(model_type: str, **vision: Any) -> Any:
    """A default transformers config of ``model_type``; ``vision`` overrides vision_config fields."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, vision_config=vision) if vision else AutoConfig.for_model(model_type)


@functools.cache
def _transformers_owner(model_type: str) -> type:
    module_name, class_name = TRANSFORMERS_MODELS[model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    return getattr(module, class_name)


def mm_token_type_ids(family: Family, input_ids: Any) -> Any:
    """transformers' token types (0 text, 1 image, 2 video) of a (B, L) torch tensor of ids."""
    import torch

    ids = input_ids
    if family.model_type.startswith("glm4v"):
        depth = torch.cumsum((ids == family.video_start_token_id).long() - (ids == family.video_end_token_id).long(),
                             dim=1)
        image = ids == family.image_token_id
        return (image & (depth <= 0)).int() + 2 * (image & (depth > 0)).int()
    return (ids == family.image_token_id).int() + 2 * (ids == family.video_token_id).int()


def transformers_rope_index(family: Family, config: Any, input_ids: Any, **kwargs: Any) -> tuple[Any, Any]:
    """transformers' own ``get_rope_index`` of ``family.model_type``, unbound, on a config object.

    ``kwargs``: image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask (torch or None).
    """
    owner = _transformers_owner(family.model_type)
    fake_self = types.SimpleNamespace(config=config)
    fake_self.get_vision_position_ids = types.MethodType(owner.get_vision_position_ids, fake_self)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return owner.get_rope_index(fake_self, input_ids, mm_token_type_ids(family, input_ids), **kwargs)


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


def sglang_rope_index(family: Family, input_ids: Any, *, image_grid_thw: Any = None, video_grid_thw: Any = None,
                      second_per_grid_ts: Any = None) -> tuple[Any, Any]:
    """SGLang's ``get_rope_index`` (or ``get_rope_index_glm4v``) for unpadded (B, L) torch ids."""
    sg = sglang_module()
    if family.model_type.startswith("glm4v"):
        hf_config = types.SimpleNamespace(
            image_token_id=family.image_token_id, video_start_token_id=family.video_start_token_id,
            video_end_token_id=family.video_end_token_id,
            vision_config=types.SimpleNamespace(spatial_merge_size=family.spatial_merge_size))
        return sg.get_rope_index_glm4v(input_ids, hf_config, image_grid_thw, video_grid_thw, None)
    return sg.get_rope_index(
        family.spatial_merge_size, family.image_token_id, family.video_token_id,
        family.config.get("vision_start_token_id", 151652), family.model_type,
        getattr(family, "tokens_per_second", None), input_ids, image_grid_thw, video_grid_thw, second_per_grid_ts)


def as_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)
