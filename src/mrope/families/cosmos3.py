"""Cosmos3-Edge and Cosmos3-Omni: Qwen3-VL's rule (one block per video frame), their own token ids."""

from __future__ import annotations

from .qwen3_vl import Qwen3VL


class Cosmos3(Qwen3VL):
    model_types = ("cosmos3_edge", "cosmos3_omni")
    default_mrope_sections = {"cosmos3_edge_text": (24, 20, 20)}
