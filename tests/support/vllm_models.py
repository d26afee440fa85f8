"""vLLM's M-RoPE models outside an engine, as the tests and the benchmarks call them: the remote-code
configs (:func:`remote_config`), a stand-in ``self`` for a model class's ``get_mrope_input_positions``
(:func:`stand_in`), a request as the runner receives it (:class:`Request`) and the prompt layouts of
vLLM's processors that both build (:func:`openpangu_video`). Imports vLLM and transformers only when
called."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

# token ids of the remote-code configs (Qwen2-VL's, as their checkpoints use)
IMAGE, VIDEO, START, END = 151655, 151656, 151652, 151653


def remote_config(architecture: str) -> Any:
    """A remote-code config (Keye-VL, Keye-VL-1.5, OpenPangu-VL): the fields vLLM and mrope read."""
    from transformers import PretrainedConfig

    return PretrainedConfig(
        architectures=[architecture],
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=START,
        vision_end_token_id=END,
        vision_config=PretrainedConfig(spatial_merge_size=2),
    )


def stand_in(module: str, cls: str, config: Any) -> Any:
    """An instance of ``vllm.model_executor.models.<module>.<cls>`` made without ``__init__`` that holds
    only ``config``: all that the class's ``get_mrope_input_positions`` reads of ``self``."""
    model = object.__new__(getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), cls))
    model.__dict__["config"] = config
    return model


def openpangu_video(config: Any, frames: int, plane: int) -> list[int]:
    """An OpenPangu-VL video's placeholders as vLLM 0.32's processor writes them inside the prompt's
    outer ``vision_start`` and ``vision_end``: each frame's ``plane`` pads (merged tokens per frame),
    consecutive frames joined by ``vision_end, vision_start``. The video's feature starts at its first
    token (a pad) and spans them all; its ``is_embed`` marks the pads."""
    tokens: list[int] = []
    for k in range(frames):
        tokens += [config.vision_end_token_id, config.vision_start_token_id] * (k > 0)
        tokens += [config.video_token_id] * plane
    return tokens


@dataclass
class Request:
    """A request as vLLM's runner receives it: the prompt ids and its ``MultiModalFeatureSpec`` list (in a
    random order: vLLM sorts them by offset itself)."""

    ids: list[int]
    features: list[Any]

    def describe(self) -> str:
        items = [
            (f.modality, f.mm_position.offset, {k: e.data.tolist() for k, e in f.data.items()})
            for f in self.features
        ]
        return f"L={len(self.ids)}, items {sorted(items, key=lambda x: x[1])}"
