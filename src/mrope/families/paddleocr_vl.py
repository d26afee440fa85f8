"""PaddleOCR-VL: Qwen2-VL's rule in transformers (video time index ``k``, not scaled).

SGLang scales its video time like Qwen2.5-VL; see the README's convention table.
"""

from __future__ import annotations

from .qwen2_vl import Qwen2VL


class PaddleOCRVL(Qwen2VL):
    model_types = ("paddleocr_vl",)
    default_mrope_sections = {"paddleocr_vl_text": (16, 24, 24)}
