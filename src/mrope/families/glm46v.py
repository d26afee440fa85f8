"""GLM-4.6V and GLM-OCR: GLM-4.1V's rule (frames are image-token blocks between the video markers)."""

from __future__ import annotations

from .glm4v import Glm4V


class Glm46V(Glm4V):
    model_types = ("glm46v", "glm_ocr")
    default_mrope_sections = {"glm_ocr_text": (8, 12, 12)}

    @property
    def rotary_is_neox_style(self) -> bool:
        """GLM-OCR and a GLM-4.1V text model rotate GPT-J pairs, a GLM-4.5V (MoE) text model NeoX halves."""
        text_type = (self.config.get("text_config") or {}).get("model_type", "")
        return self.model_type == "glm46v" and text_type == "glm4v_moe_text"
