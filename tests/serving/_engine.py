"""Shared helpers of the serving tests: families of every supported model type, the plain reference,
and a random engine driven by hypothesis (admission, chunked prefill, decode, speculative steps,
preemption and re-add, removal)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

import mrope

CONFIGS = {
    "qwen2_vl": {
        "model_type": "qwen2_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2},
    },
    "qwen2_5_vl": {
        "model_type": "qwen2_5_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    },
    "qwen3_vl": {
        "model_type": "qwen3_vl",
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_config": {"spatial_merge_size": 2},
    },
    "glm4v": {
        "model_type": "glm4v",
        "image_token_id": 151343,
        "video_start_token_id": 151341,
        "video_end_token_id": 151342,
        "vision_config": {"spatial_merge_size": 2},
    },
}


def family(name: str, compat: str = "vllm") -> Any:
    return mrope.from_config(CONFIGS[name], compat=compat)


def reference(positions: np.ndarray, delta: int, start: int, count: int) -> np.ndarray:
    """Positions (3, count) of indices ``start ...``: the prompt's own, then ``index + delta``."""
    out = np.empty((3, count), dtype=np.int64)
    for k in range(count):
        j = start + k
        out[:, k] = positions[:, j] if j < positions.shape[1] else j + delta
    return out


@dataclass
class Live:
    """A running request as the test engine sees it."""

    fam: Any
    ids: list[int]
    kwargs: dict[str, Any]
    positions: np.ndarray
    delta: int
    computed: int = 0
    generated: list[int] = field(default_factory=list)


def register(
    table: Any, row: int, fam: Any, ids: list[int], kwargs: dict[str, Any], precomputed: bool
) -> Live:
    positions, delta = fam.positions(ids, **kwargs)
    if precomputed:
        table.add_positions(row, positions, delta)
    else:
        table.add(row, fam, ids, **kwargs)
    return Live(fam, ids, kwargs, positions, delta)
