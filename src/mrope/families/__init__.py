"""The model families, one small module each, and :func:`from_config` to pick one from a config."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from .._errors import MRopeError
from ..core import Compat
from ._base import Family
from ._items import find_image_positions
from .alpamayo2_super import Alpamayo2Super
from .bailing_moe_v3_vl import BailingMoeV3VL
from .cohere_compass import CohereCompass
from .cosmos3 import Cosmos3
from .ernie4_5_vl import Ernie4_5_VL
from .glm4v import Glm4V
from .glm46v import Glm46V
from .glm_image import GlmImage
from .hunyuan_vl import HunYuanVL
from .hy_v4_vl import HYV4VL
from .inputs import ArrayLike, MultimodalInputs, PromptItem, RequestInputs
from .isaac import Isaac
from .keye import Keye
from .minicpmv4_7 import MiniCPMV4_7
from .openpangu_vl import OpenPanguVL
from .paddleocr_vl import PaddleOCRVL
from .qwen2_5_omni import Qwen2_5Omni
from .qwen2_5_vl import Qwen2_5_VL
from .qwen2_vl import Qwen2VL
from .qwen3_5 import Qwen3_5
from .qwen3_omni import Qwen3Omni
from .qwen3_vl import Qwen3VL
from .sequential import Sequential

FAMILIES: tuple[type[Family], ...] = (
    Qwen2VL,
    Qwen2_5_VL,
    Qwen3VL,
    Glm4V,
    Qwen3_5,
    Cosmos3,
    CohereCompass,
    Alpamayo2Super,
    PaddleOCRVL,
    Glm46V,
    Ernie4_5_VL,
    Qwen2_5Omni,
    Qwen3Omni,
    Keye,
    OpenPanguVL,
    BailingMoeV3VL,
    Isaac,
    HYV4VL,
    HunYuanVL,
    GlmImage,
    MiniCPMV4_7,
    Sequential,
)
REGISTRY: dict[str, type[Family]] = {t: cls for cls in FAMILIES for t in cls.model_types}
#: remote-code configs (whose ``model_type`` varies) by architecture: the model type mrope gives them
ARCHITECTURES: dict[str, str] = {arch: t for cls in FAMILIES for arch, t in cls.architectures.items()}
# sub-configs that from_config descends into, in order, when the config has them
NESTED_CONFIGS = ("thinker_config",)


def supported_model_types() -> list[str]:
    """The ``model_type`` values :func:`from_config` accepts, sorted."""
    return sorted(REGISTRY)


def config_to_dict(config: Any) -> dict[str, Any]:
    """A transformers config (object or ``to_dict()`` output) as a plain dict, sub-configs included."""
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "to_dict"):
        return config.to_dict()
    raise MRopeError(f"config must be a transformers config or its to_dict(), got {type(config).__name__}")


def from_config(
    config: Any, *, compat: Compat = "vllm", video_time: str = "float32", **overrides: Any
) -> Family:
    """The family of a transformers config, with its token ids and merge sizes.

    Parameters
    ----------
    config : transformers ``PretrainedConfig`` or its ``to_dict()``; a config that nests a
        ``thinker_config`` (Qwen2.5-Omni, Qwen3-Omni, Qwen3-ASR) is read from its thinker. A remote-code
        config whose ``model_type`` is not registered is found by its ``architectures``
        (:data:`ARCHITECTURES`: Keye-VL, Keye-VL-1.5, OpenPangu-VL). A config that wraps its model's
        config is read as the family's :meth:`Family.unwrap_config` places it (Alpamayo 2 Super's
        ``vlm_config``).
    compat : ``"vllm"`` (default) or ``"transformers"``: where text resumes after a vision block
        (see the README's conventions) and, for Qwen2.5-VL, the arithmetic of its scaled video time.
    video_time : ``"float32"`` (default) or ``"float64"``: the arithmetic of scaled video time
        ``trunc(k * second_per_grid_ts * tokens_per_second)`` (Qwen2.5-VL) under ``compat="vllm"``,
        whatever the dtype of the seconds: float32 as SGLang computes it, float64 as vLLM does. Under
        ``compat="transformers"`` the seconds' own dtype decides, as in transformers (bfloat16, float16,
        float32 or float64 tensors; :mod:`mrope.families.qwen2_5_vl`), and ``video_time`` is not read.
        Every family takes it; those that do not scale video time give the same positions either way.
    **overrides : settings that win over the config's (e.g. ``tokens_per_second=2``).

    Notes
    -----
    A setting the config leaves out takes the family's default, which is the one transformers' config
    class fills in (Qwen2.5-VL's ``tokens_per_second``: 4, ``Qwen2_5_VLVisionConfig``'s), so that a
    ``config.json`` read as a dict means what it means through ``AutoConfig``; where transformers' class
    has no such field, the default of the peer that reads it (Qwen2.5-Omni's vLLM rate, 25); a setting
    without a default is refused by name.

    Raises
    ------
    MRopeError
        Unknown ``model_type`` (the message lists the supported ones), a setting the config lacks,
        an override the family does not take.
    """
    cfg = config_to_dict(config)
    for key in NESTED_CONFIGS:  # Omni: the thinker holds the token ids and the position rule
        if isinstance(cfg.get(key), Mapping):
            cfg = dict(cfg[key])
    model_type = cfg.get("model_type")
    if model_type not in REGISTRY:  # a remote-code config: its architecture names the family
        architectures = cfg.get("architectures") or ()
        model_type = next((ARCHITECTURES[a] for a in architectures if a in ARCHITECTURES), model_type)
    cls = REGISTRY.get(model_type) if isinstance(model_type, str) else None
    if cls is None or not isinstance(model_type, str):
        raise MRopeError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(supported_model_types())}"
        )
    cfg = cls.unwrap_config(cfg)
    settings = {**cls.read_settings(cfg), **overrides}
    names = cls.setting_names()
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise MRopeError(f"{model_type} takes no setting {unknown}; its settings are {sorted(names)}")
    missing = next((name for name in cls.required_settings() if settings.get(name) is None), None)
    if missing is not None:
        where = cls.setting_sources.get(missing, "the config")
        raise MRopeError(f"{model_type} needs the setting {missing!r} (not found in {where})")
    return cls(model_type, compat=compat, video_time=video_time, config=cfg, **settings)


__all__ = [
    "ARCHITECTURES",
    "FAMILIES",
    "REGISTRY",
    "ArrayLike",
    "Family",
    "MultimodalInputs",
    "PromptItem",
    "RequestInputs",
    "family_for",
    "find_image_positions",
    "family_of",
    "from_config",
    "supported_model_types",
]


# families of config objects already read, by id and compat: serializing a transformers config costs
# more than computing the positions, and a model's config does not change once it is loaded
_FAMILIES: dict[tuple[int, str], Family] = {}


def family_of(config: Any, compat: Compat) -> Family:
    """``from_config(config, compat=compat)``, read once per config object (dicts are read each time):
    for callers that get a model's config on every call (``get_rope_index``, a data pipeline)."""
    if isinstance(config, Mapping):
        return from_config(config, compat=compat)
    key = (id(config), compat)
    family = _FAMILIES.get(key)
    if family is None:
        family = from_config(config, compat=compat)
        try:
            weakref.finalize(config, _FAMILIES.pop, key, None)
        except TypeError:  # not weak-referenceable: cannot tell when the id is reused, so do not cache
            return family
        _FAMILIES[key] = family
    return family


def family_for(config: Any, compat: Compat | None = None, *, default: Compat = "vllm") -> Family:
    """The family a call computes with; the one meaning of ``compat=None``: the family's own.

    A :class:`Family` keeps its ``compat`` (a ``compat`` given: the family under it); a config is read
    once (:func:`family_of`) under ``compat``, else under ``default`` (:func:`from_config`'s ``"vllm"``;
    the transformers integration reads a model's config under the installed transformers')."""
    if isinstance(config, Family):
        return config if compat in (None, config.compat) else config.with_compat(compat)
    return family_of(config, default if compat is None else compat)
