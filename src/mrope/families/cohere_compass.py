"""Cohere Compass: Qwen3-VL's rule (one block per video frame), its own token ids."""

from __future__ import annotations

from .qwen3_vl import Qwen3VL


class CohereCompass(Qwen3VL):
    model_types = ("cohere_compass",)
    default_mrope_sections = {}
