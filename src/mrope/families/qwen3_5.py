"""Qwen3.5, Qwen3.5-MoE and Qwen4-Exp: Qwen3-VL's rule (one block per video frame), their own token ids."""

from __future__ import annotations

from .qwen3_vl import Qwen3VL


class Qwen3_5(Qwen3VL):
    model_types = ("qwen3_5", "qwen3_5_moe", "qwen4_exp")
    default_mrope_sections = {
        "qwen3_5_text": (11, 11, 10),
        "qwen3_5_moe_text": (11, 11, 10),
        "qwen4_exp_text": (11, 11, 10),
    }
