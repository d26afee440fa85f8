"""MiniCPM-V 4.6, MiniCPM-OCR and Qwen3-ASR: every token in order, the three rows equal.

Their vision or audio placeholders carry embeddings but no spatial position: each token, placeholder
or text, has position ``i`` on all three rows (delta 0), as vLLM 0.32 computes it (MiniCPM-V 4.6 feeds
a Qwen3.5 backbone three equal rows; Qwen3-ASR positions each audio run as the text it continues).
MiniCPM-OCR (``minicpm_ocr`` configs; vLLM 0.34) is MiniCPM-V 4.6's model with other image geometry:
vLLM's class for it inherits MiniCPM-V 4.6's position code.
Grids and offsets are refused: the family has no block to place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from .._errors import MRopeError
from ..core import Blocks
from ..core.blocks import empty_blocks
from ._base import Family
from .inputs import RequestInputs, Seconds


@dataclass(eq=False, repr=False, kw_only=True)
class Sequential(Family):
    model_types = ("minicpmv4_6", "minicpm_ocr", "qwen3_asr", "qwen3_asr_thinker")
    places_items = False
    takes_offsets = False
    #: no spatial merge: there is no block (the shared checks read it)
    spatial_merge_size: ClassVar[int] = 1  # type: ignore[misc]

    def parse(self, inputs: RequestInputs) -> Blocks:
        return empty_blocks()

    def check_vision_inputs(
        self, image_grid_thw: Any, video_grid_thw: Any, second_per_grid_ts: Any, length: int
    ) -> tuple[np.ndarray, np.ndarray, Seconds | None]:
        """No grids: every token, placeholders included, is positioned as text."""
        for name, grids in (("image_grid_thw", image_grid_thw), ("video_grid_thw", video_grid_thw)):
            if grids is not None:
                raise MRopeError(
                    f"{self.model_type} positions every token in order (its placeholders as text): it "
                    f"takes no {name}"
                )
        return super().check_vision_inputs(None, None, second_per_grid_ts, length)

    def no_offsets_message(self) -> str:
        return f"{self.model_type} positions every token in order: it takes no image_offsets or video_offsets"
