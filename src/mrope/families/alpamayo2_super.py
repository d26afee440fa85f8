"""Alpamayo 2 Super (vLLM 0.34): the Qwen3-VL model of NVIDIA's driving policy, Qwen3-VL's rule.

vLLM serves it as a subclass of its Qwen3-VL model with Qwen3-VL's processor, and the position code is
its parent's. The checkpoint's config wraps a Qwen3-VL config in ``vlm_config``; vLLM's config class
(``vllm.transformers_utils.configs.alpamayo2_super``) exposes it at the top level, and
:meth:`Alpamayo2Super.unwrap_config` reads a config the same way: ``text_config`` and
``vision_config`` from ``vlm_config`` where it has them, the token ids from the top level, else from
``vlm_config``. A config vLLM hands over (the class's ``to_dict()``) has them at the top level already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .qwen3_vl import Qwen3VL

#: the sub-configs vLLM's config class takes from ``vlm_config`` (before the top level's)
WRAPPED_CONFIGS = ("text_config", "vision_config")
#: the token ids it takes from the top level, else from ``vlm_config``
WRAPPED_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


class Alpamayo2Super(Qwen3VL):
    model_types = ("alpamayo2_super",)
    default_mrope_sections = {}  # (its text config is Qwen3-VL's: qwen3_vl_text)

    @classmethod
    def unwrap_config(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """The config with the wrapped Qwen3-VL config's fields at the top level, as vLLM's
        ``Alpamayo2SuperConfig.__init__`` places them."""
        wrapped = config.get("vlm_config")
        if not isinstance(wrapped, Mapping):
            return dict(config)
        view = dict(config)
        view.update({key: wrapped[key] for key in WRAPPED_CONFIGS if key in wrapped})
        view.update({key: wrapped[key] for key in WRAPPED_IDS if key not in config and key in wrapped})
        return view
