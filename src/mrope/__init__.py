"""mrope: exact, vectorized multimodal rotary position embeddings (M-RoPE) for vision-language models.

``import mrope`` needs only numpy; torch and triton are imported by the parts that use them.
"""

from ._errors import MRopeError  # first: every submodule raises it
from .batch import get_rope_index
from .core import Compat
from .families import Family, MultimodalInputs, RequestInputs, from_config, supported_model_types
from .serving import PositionTable
from .show import show  # matplotlib is imported when it draws

__all__ = [
    "Compat",
    "Family",
    "MRopeError",
    "MRotaryEmbedding",
    "MultimodalInputs",
    "PositionTable",
    "RequestInputs",
    "from_config",
    "get_rope_index",
    "show",
    "supported_model_types",
]
__version__ = "0.1.0"

_LAZY = {"MRotaryEmbedding": "rotary"}  # names whose modules import torch: loaded on first use


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'mrope' has no attribute {name!r}")
