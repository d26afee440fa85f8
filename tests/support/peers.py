"""The peers for the tests and benchmarks: the family table (every supported model type with its
transformers config and what its peers cover), its mrope families under both conventions, and calls into
transformers' and SGLang's own ``get_rope_index`` with the inputs their processors produce (int64 grids
and audio lengths, float32 times).

The peers are installed by ``make test``. :func:`require` skips a test where one is missing, except
under ``CI``, where a missing peer fails the test. This module imports only numpy, pytest and mrope at
its top, so that a numpy-only environment collects the suite; the peer calls import torch and
transformers when they run (SGLang's position module is loaded by path: it imports only torch). Tests and
benchmarks (through ``benchmarks/_common.py``) import the peers from here so that they cannot drift apart.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import mrope
from mrope.families import Ernie4_5_VL, Family, Glm4V, Qwen2_5Omni, Qwen3Omni

OMNI_FAMILIES = (Qwen2_5Omni, Qwen3Omni)

# model_type -> (transformers module, class owning get_rope_index)
TRANSFORMERS_MODELS = {
    "qwen2_vl": ("qwen2_vl", "Qwen2VLModel"),
    "qwen2_5_vl": ("qwen2_5_vl", "Qwen2_5_VLModel"),
    "qwen3_vl": ("qwen3_vl", "Qwen3VLModel"),
    "qwen3_vl_moe": ("qwen3_vl_moe", "Qwen3VLMoeModel"),
    "glm4v": ("glm4v", "Glm4vModel"),
    "glm4v_moe": ("glm4v_moe", "Glm4vMoeModel"),
    "qwen3_5": ("qwen3_5", "Qwen3_5Model"),
    "qwen3_5_moe": ("qwen3_5_moe", "Qwen3_5MoeModel"),
    "qwen4_exp": ("qwen4_exp", "Qwen4ExpModel"),
    "cosmos3_edge": ("cosmos3_edge", "Cosmos3EdgeModel"),
    "cosmos3_omni": ("cosmos3_omni", "Cosmos3OmniModel"),
    "cohere_compass": ("cohere_compass", "CohereCompassModel"),
    "paddleocr_vl": ("paddleocr_vl", "PaddleOCRVLModel"),
    "glm46v": ("glm46v", "Glm46VModel"),
    "glm_ocr": ("glm_ocr", "GlmOcrModel"),
    "ernie4_5_vl_moe": ("ernie4_5_vl_moe", "Ernie4_5_VLMoeModel"),
    "hy_v4_vl": ("hy_v4_vl", "HYV4VLModel"),
    "hunyuan_vl": ("hunyuan_vl", "HunYuanVLModel"),
    "glm_image": ("glm_image", "GlmImageModel"),
    "minicpmv4_7": ("minicpmv4_7", "MiniCPMV4_7Model"),
    "qwen2_5_omni": ("qwen2_5_omni", "Qwen2_5OmniPreTrainedModelForConditionalGeneration"),
    "qwen3_omni_moe": ("qwen3_omni_moe", "Qwen3OmniMoePreTrainedModelForConditionalGeneration"),
}
TRANSFORMERS_MODELS["qwen2_5_omni_thinker"] = TRANSFORMERS_MODELS["qwen2_5_omni"]
TRANSFORMERS_MODELS["qwen3_omni_moe_thinker"] = TRANSFORMERS_MODELS["qwen3_omni_moe"]


def transformers_config(model_type: str, text: dict[str, Any] | None = None, **vision: Any) -> Any:
    """A default transformers config of ``model_type``; ``vision`` overrides vision_config fields,
    ``text`` text_config fields."""
    from transformers import AutoConfig

    given = {"vision_config": vision} if vision else {}
    if text:
        given["text_config"] = text
    return AutoConfig.for_model(model_type, **given)


def transformers_omni_config(model_type: str, **thinker: Any) -> Any:
    """A default Omni config (``qwen2_5_omni``, ``qwen3_omni_moe``); ``thinker`` overrides thinker_config
    fields (e.g. ``position_id_per_seconds=13``, as Qwen3-Omni's checkpoints)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, thinker_config=thinker)


@functools.cache
def _transformers_owner(model_type: str) -> type:
    module_name, class_name = TRANSFORMERS_MODELS[model_type]
    module = importlib.import_module(f"transformers.models.{module_name}.modeling_{module_name}")
    return getattr(module, class_name)


def mm_token_type_ids(family: Family, input_ids: Any) -> Any:
    """transformers' token types (0 text, 1 image, 2 video) of a (B, L) torch tensor of ids."""
    import torch

    ids = input_ids
    if isinstance(family, Glm4V):
        depth = torch.cumsum(
            (ids == family.video_start_token_id).long() - (ids == family.video_end_token_id).long(), dim=1
        )
        image = ids == family.image_token_id
        return (image & (depth <= 0)).int() + 2 * (image & (depth > 0)).int()
    image = (ids == family.image_token_id).int()
    video_token_id = getattr(family, "video_token_id", None)  # (HunYuan-VL has images only)
    return image if video_token_id is None else image + 2 * (ids == video_token_id).int()


def stand_in_self(owner: type, methods: tuple[str, ...], **fields: Any) -> types.SimpleNamespace:
    """A ``self`` for calling ``owner``'s methods unbound: ``fields`` (its config, ...) and ``methods`` of
    ``owner`` bound to it (those ``get_rope_index`` calls on ``self``)."""
    fake_self = types.SimpleNamespace(**fields)
    for name in methods:
        setattr(fake_self, name, types.MethodType(getattr(owner, name), fake_self))
    return fake_self


def transformers_rope_index(family: Family, config: Any, input_ids: Any, **kwargs: Any) -> tuple[Any, Any]:
    """transformers' own ``get_rope_index`` of ``family.model_type``, unbound, on a config object.

    ``kwargs``: image_grid_thw, video_grid_thw, second_per_grid_ts, attention_mask (torch or None).
    """
    owner = _transformers_owner(family.model_type)
    if isinstance(family, OMNI_FAMILIES):
        return _transformers_omni_rope_index(owner, family, config, input_ids, **kwargs)
    fake_self = stand_in_self(owner, ("get_vision_position_ids",), config=config)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return owner.get_rope_index(fake_self, input_ids, mm_token_type_ids(family, input_ids), **kwargs)


def transformers_glm_image_rope_index(
    config: Any,
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    images_per_sample: Any = None,
    attention_mask: Any = None,
) -> tuple[Any, Any, Any]:
    """GLM-Image's ``get_rope_index`` (its own signature), unbound on a config object: positions, deltas
    and the decode positions it caches at prefill (``_cached_decode_position_ids``, (B, 3, n) padded by
    repeating each row's last column; None without grids)."""
    owner = _transformers_owner("glm_image")
    fake_self = stand_in_self(owner, ("get_vision_position_ids",), config=config)
    positions, deltas = owner.get_rope_index(
        fake_self, input_ids, image_grid_thw, images_per_sample, attention_mask
    )
    return positions, deltas, fake_self._cached_decode_position_ids


def transformers_minicpmv4_7_rope_index(
    family: Family,
    config: Any,
    input_ids: Any,
    *,
    target_sizes: Any = None,
    target_sizes_videos: Any = None,
    downsample_mode: str | None = None,
    attention_mask: Any = None,
) -> tuple[Any, Any]:
    """MiniCPM-V 4.7's ``get_rope_index`` (its own signature: per-crop target sizes, the token types the
    processor gives), unbound on a config object."""
    owner = _transformers_owner("minicpmv4_7")
    methods = ("get_vision_position_ids", "_group_visual_frames")
    fake_self = stand_in_self(owner, methods, config=config, _frame_end_idx=owner._frame_end_idx)
    return owner.get_rope_index(
        fake_self,
        input_ids,
        mm_token_type_ids(family, input_ids),
        target_sizes,
        target_sizes_videos,
        downsample_mode,
        attention_mask,
    )


def _transformers_omni_rope_index(
    owner: type,
    family: Family,
    config: Any,
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    attention_mask: Any = None,
    audio_seqlens: Any = None,
    use_audio_in_video: bool = False,
) -> tuple[Any, Any]:
    """An Omni thinker's ``get_rope_index`` (its own signature: ``second_per_grids``, audio inputs).

    ``config``: the top-level or the thinker config; ``vision_start_token_id``, which the thinker config
    lacks by default, is set from the family. transformers needs ``attention_mask`` (it crashes without)."""
    import copy

    thinker = copy.copy(getattr(config, "thinker_config", config))
    thinker.vision_start_token_id = family.vision_start_token_id
    methods = tuple(n for n in ("get_llm_pos_ids_for_vision", "get_chunked_index") if hasattr(owner, n))
    fake_self = stand_in_self(owner, methods, config=thinker, spatial_merge_size=family.spatial_merge_size)
    return owner.get_rope_index(
        fake_self,
        input_ids,
        image_grid_thw,
        video_grid_thw,
        attention_mask,
        use_audio_in_video,
        audio_seqlens,
        second_per_grid_ts,
    )


@functools.cache
def sglang_module() -> types.ModuleType:
    """SGLang's ``mrope_rope_index`` module, loaded by path."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sglang is not installed (pip install --no-deps sglang==0.5.23)")
    path = f"{spec.submodule_search_locations[0]}/srt/layers/rotary_embedding/mrope_rope_index.py"
    module_spec = importlib.util.spec_from_file_location("_sglang_mrope_rope_index", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def sglang_rope_index(
    family: Family,
    input_ids: Any,
    *,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    second_per_grid_ts: Any = None,
    audio_seqlens: Any = None,
    use_audio_in_video: bool = False,
) -> tuple[Any, Any]:
    """SGLang's ``get_rope_index`` (or ``get_rope_index_glm4v``, ``get_rope_index_ernie45``) for unpadded
    (B, L) torch ids.

    Ernie: SGLang reads the original Baidu token layout, where video tokens are the image token between
    the video markers; the ids are rewritten to that layout first. Qwen3-Omni takes the audio inputs
    (``audio_seqlens`` as feature lengths); SGLang has no Qwen2.5-Omni position code.
    """
    sg = sglang_module()
    if isinstance(family, OMNI_FAMILIES):
        if family.model_type not in ("qwen3_omni_moe", "qwen3_omni_moe_thinker"):
            raise NotImplementedError(f"SGLang has no position code for {family.model_type}")
        return sg.get_rope_index(
            family.spatial_merge_size,
            family.image_token_id,
            family.video_token_id,
            family.vision_start_token_id,
            "qwen3_omni_moe",
            None,
            input_ids,
            image_grid_thw,
            video_grid_thw,
            second_per_grid_ts,
            audio_token_id=family.audio_token_id,
            audio_start_token_id=family.audio_start_token_id,
            position_id_per_seconds=family.position_id_per_seconds,
            use_audio_in_video=use_audio_in_video,
            audio_seqlens=audio_seqlens,
        )
    if isinstance(family, Ernie4_5_VL):
        hf_config = types.SimpleNamespace(
            im_patch_id=family.image_token_id,
            video_start_token_id=family.config["video_start_token_id"],
            video_end_token_id=family.config["video_end_token_id"],
            spatial_conv_size=family.spatial_merge_size,
            temporal_conv_size=family.temporal_merge_size,
        )
        baidu_ids = input_ids.masked_fill(input_ids == family.video_token_id, family.image_token_id)
        return sg.get_rope_index_ernie45(baidu_ids, hf_config, image_grid_thw, video_grid_thw)
    if isinstance(family, Glm4V):
        hf_config = types.SimpleNamespace(
            image_token_id=family.image_token_id,
            video_start_token_id=family.video_start_token_id,
            video_end_token_id=family.video_end_token_id,
            vision_config=types.SimpleNamespace(spatial_merge_size=family.spatial_merge_size),
        )
        return sg.get_rope_index_glm4v(input_ids, hf_config, image_grid_thw, video_grid_thw, None)
    tokens_per_second = getattr(family, "tokens_per_second", None)
    if family.model_type == "paddleocr_vl":  # SGLang scales its time as Qwen2.5-VL's, images included (t * 0)
        tokens_per_second = (family.config.get("vision_config") or {}).get("tokens_per_second", 2)
    return sg.get_rope_index(
        family.spatial_merge_size,
        family.image_token_id,
        family.video_token_id,
        family.config.get("vision_start_token_id", 151652),
        family.model_type,
        tokens_per_second,
        input_ids,
        image_grid_thw,
        video_grid_thw,
        second_per_grid_ts,
    )


def as_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


OMNI_TYPES = ("qwen2_5_omni", "qwen3_omni_moe")  # configs whose settings are thinker_config fields


@dataclass(frozen=True)
class FamilySetup:
    """One row of the family table: a model type, the settings of its transformers config
    (vision_config fields; thinker_config fields for the Omni families) and what its peers cover.

    ``sglang``: ``"all"`` (SGLang computes every prompt), ``"images"`` (SGLang agrees on single-frame
    images only: PaddleOCR-VL, whose time SGLang scales) or ``"none"`` (SGLang has no position code).
    ``edge_layouts``: the hand-picked layouts of :data:`.strategies.EDGE_LAYOUTS` apply (videos of any T).
    ``markers_optional``: transformers finds blocks without their markers (Qwen2/2.5-VL).
    ``sglang_image_frames``: the most frames of an image on which SGLang agrees (processors give images
    one frame; SGLang scales Qwen2.5-VL's image time as its video time, with 0 seconds per grid).
    ``text``: text_config fields (HunYuan-VL's ``rope_parameters``, whose ``mrope_section`` sets its rows).
    ``batch_counts_images``: the last row numbers the images across a batch's rows (HunYuan-VL, as
    transformers counts them), so a row alone differs from its row of the batch there.
    ``segment_rows``: the positions are the segment model's rows (t, h, w), which the integrations take
    (False: HunYuan-VL, which they refuse; ``show`` and a table of its rows apply ``Family.segment_rows``).
    """

    model_type: str
    settings: dict[str, Any] = field(default_factory=dict)
    sglang: str = "all"
    edge_layouts: bool = True
    markers_optional: bool = False
    sglang_image_frames: int = 2
    text: dict[str, Any] = field(default_factory=dict)
    batch_counts_images: bool = False
    segment_rows: bool = True

    @property
    def omni(self) -> bool:
        return self.model_type in OMNI_TYPES


#: HunYuan-VL's rope parameters (head_dim 128: the sections sum to 64); transformers' default has no
#: mrope_section, and its get_rope_index needs one
HUNYUAN_ROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 16, 16, 16]}

# name -> setup: every supported model type (test_coverage checks that none is missing)
FAMILY_SETUPS = {
    "qwen2_vl": FamilySetup("qwen2_vl", markers_optional=True),
    # tokens_per_second 2 as the released checkpoints; 4 is transformers' class default
    "qwen2_5_vl": FamilySetup(
        "qwen2_5_vl", {"tokens_per_second": 2}, markers_optional=True, sglang_image_frames=1
    ),
    "qwen2_5_vl-tps4": FamilySetup("qwen2_5_vl", markers_optional=True, sglang_image_frames=1),
    "qwen3_vl": FamilySetup("qwen3_vl"),
    "qwen3_vl_moe": FamilySetup("qwen3_vl_moe"),
    "glm4v": FamilySetup("glm4v"),
    "glm4v_moe": FamilySetup("glm4v_moe"),
    "qwen3_5": FamilySetup("qwen3_5"),
    "qwen3_5_moe": FamilySetup("qwen3_5_moe"),
    "qwen4_exp": FamilySetup("qwen4_exp"),
    "cosmos3_edge": FamilySetup("cosmos3_edge"),
    "cosmos3_omni": FamilySetup("cosmos3_omni"),
    "cohere_compass": FamilySetup("cohere_compass", sglang="none"),
    "glm46v": FamilySetup("glm46v"),
    "glm_ocr": FamilySetup("glm_ocr"),
    "paddleocr_vl": FamilySetup("paddleocr_vl", sglang="images"),
    # videos of T a multiple of temporal_merge_size 2 only
    "ernie4_5_vl_moe": FamilySetup("ernie4_5_vl_moe", edge_layouts=False),
    # a newline token ends every merged row; SGLang has no position code for it
    "hy_v4_vl": FamilySetup("hy_v4_vl", sglang="none"),
    # four rows (the checkpoints' mrope_section) and three; images do not shift text; no SGLang code
    "hunyuan_vl": FamilySetup(
        "hunyuan_vl",
        sglang="none",
        edge_layouts=False,
        text={"rope_parameters": HUNYUAN_ROPE},
        batch_counts_images=True,
        segment_rows=False,
    ),
    "hunyuan_vl-3rows": FamilySetup(
        "hunyuan_vl",
        sglang="none",
        edge_layouts=False,
        text={"rope_parameters": {**HUNYUAN_ROPE, "mrope_section": [32, 16, 16]}},
        batch_counts_images=True,
        segment_rows=False,
    ),
    "qwen2_5_omni": FamilySetup("qwen2_5_omni", sglang="none", edge_layouts=False),
    # position_id_per_seconds 25 (the class default) and 13 (the checkpoints)
    "qwen3_omni_moe": FamilySetup("qwen3_omni_moe", edge_layouts=False),
    "qwen3_omni_moe-pps13": FamilySetup(
        "qwen3_omni_moe", {"position_id_per_seconds": 13}, edge_layouts=False
    ),
}
# the Qwen-VL and GLM setups that test_batch's padded-batch checks run over
PEER_SETUPS = {
    name: FAMILY_SETUPS[name]
    for name in (
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen2_5_vl-tps4",
        "qwen3_vl",
        "qwen3_vl_moe",
        "glm4v",
        "glm4v_moe",
    )
}


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def require(*modules: str) -> None:
    """Skip the calling test if a peer is missing (fail under CI, where ``make test`` installs them)."""
    missing = [m for m in modules if not _installed(m)]
    if missing:
        message = f"peer not installed: {', '.join(missing)} (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def require_module(name: str) -> Any:
    """The module ``name``, for a test module's top level: skips the whole module if it is missing,
    fails under CI (where ``make test`` installs every peer)."""
    if not _installed(name):
        message = f"{name} is not installed (make test installs it)"
        if os.environ.get("CI"):
            raise RuntimeError(message)
        pytest.skip(message, allow_module_level=True)
    return importlib.import_module(name)


def torch_grids(grids: dict[str, Any]) -> dict[str, Any]:
    """List-valued grids as the processors give them to the peers: int64 grids and audio lengths (None
    when empty), float32 ``second_per_grid_ts`` (left out when None); ``use_audio_in_video`` as is."""
    import torch

    kwargs = {
        name: torch.tensor(grids[name]) if grids.get(name) else None
        for name in ("image_grid_thw", "video_grid_thw")
    }
    if grids.get("second_per_grid_ts") is not None:
        kwargs["second_per_grid_ts"] = torch.tensor(grids["second_per_grid_ts"], dtype=torch.float32)
    if "audio_seqlens" in grids:
        seqlens = grids["audio_seqlens"]
        kwargs["audio_seqlens"] = torch.tensor(seqlens, dtype=torch.int64) if seqlens else None
        kwargs["use_audio_in_video"] = bool(grids.get("use_audio_in_video", False))
    return kwargs


def as_torch_ids(rows: list[list[int]]) -> Any:
    import torch

    return torch.tensor(rows, dtype=torch.int64).reshape(len(rows), -1)


@dataclass(frozen=True)
class PeerSetup:
    """One model type's transformers config, its mrope families, and the peers' answers for it."""

    name: str
    config: Any  # a transformers config object
    families: dict[str, Family]  # compat -> family
    setup: FamilySetup

    def family(self, compat: str) -> Family:
        return self.families[compat]

    def transformers(self, input_ids: list[list[int]], grids: dict[str, Any], attention_mask: Any = None):
        """transformers' ``get_rope_index`` on (B, L) ids: (positions (3, B, L), deltas (B,)) as numpy.

        ``grids``: list-valued image_grid_thw, video_grid_thw, second_per_grid_ts (or None), Omni's
        audio_seqlens and use_audio_in_video, given to transformers as its processor makes them (the
        Omni thinkers need an attention_mask: all ones when None)."""
        import torch

        kwargs = torch_grids(grids)
        if attention_mask is None and self.setup.omni:
            attention_mask = [[1] * len(row) for row in input_ids]
        if attention_mask is not None:
            kwargs["attention_mask"] = torch.tensor(attention_mask, dtype=torch.int64)
        family = self.family("transformers")
        pos, delta = transformers_rope_index(family, self.config, as_torch_ids(input_ids), **kwargs)
        return as_numpy(pos), as_numpy(delta).reshape(-1)

    def sglang(self, input_ids: list[int], grids: dict[str, Any]):
        """SGLang's ``get_rope_index`` (or its GLM, Ernie variant) on one unpadded prompt:
        (positions (3, L), delta) as numpy and a Python number.

        SGLang's Qwen3-Omni text path (no image, no video) returns int64 where its vision path returns
        float32: the text path's answer is given as float32, the dtype of mrope's Qwen3-Omni positions."""

        family = self.family("vllm")
        kwargs = torch_grids(grids)
        pos, delta = sglang_rope_index(family, as_torch_ids([input_ids]), **kwargs)
        pos, delta = as_numpy(pos)[:, 0], as_numpy(delta).reshape(-1)[0]
        if self.setup.model_type == "qwen3_omni_moe" and not (
            grids.get("image_grid_thw") or grids.get("video_grid_thw")
        ):
            pos, delta = pos.astype(np.float32), np.float32(delta)
        return pos, delta.item()

    # -- checks shared by the family tests ------------------------------------------------------------
    def check_transformers(self, prompt: Any) -> None:
        """mrope (compat="transformers") equals transformers on ``prompt``: every element and the delta."""
        expected, expected_delta = self.transformers([prompt.input_ids], prompt.kwargs())
        positions, delta = self.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
        context = f"{self.name}, compat=transformers vs transformers: {prompt.describe()}"
        np.testing.assert_array_equal(positions, expected[:, 0], err_msg=context, strict=True)
        assert delta == expected_delta[0], f"delta {delta} != {expected_delta[0]}: {context}"

    def check_transformers_batch(self, batch: Any) -> None:
        """``mrope.get_rope_index`` (compat="transformers") equals transformers on a padded ``batch``,
        every element and delta, and ``family.positions`` of each row equals its row of the batch.

        Omni: padded slots are not compared (transformers leaves 1 in them, mrope 0), nor the deltas of
        padded rows of a batch without images and videos (transformers' text path takes the maximum over
        the padded slots too); README convention table."""
        family = self.family("transformers")
        expected, expected_delta = self.transformers(batch.input_ids, batch.kwargs(), batch.attention_mask)
        ids, mask = np.array(batch.input_ids), np.array(batch.attention_mask)
        positions, deltas = mrope.get_rope_index(family, ids, attention_mask=mask, **batch.kwargs("numpy"))
        context = f"{self.name}, compat=transformers vs transformers: {batch.describe()}"
        assert positions.dtype == expected.dtype, f"dtype {positions.dtype} != {expected.dtype}: {context}"
        compared = mask.astype(bool) if self.setup.omni else np.ones_like(mask, dtype=bool)
        np.testing.assert_array_equal(positions[:, compared], expected[:, compared], err_msg=context)
        rows = np.ones(len(batch.input_ids), dtype=bool)
        if self.setup.omni and not batch.image_grid_thw and not batch.video_grid_thw:
            rows = mask.astype(bool).all(axis=1)
        np.testing.assert_array_equal(
            deltas[rows, 0],
            expected_delta[rows].astype(deltas.dtype),
            err_msg=f"deltas, {context}",
            strict=True,
        )
        # (HunYuan-VL numbers its images across the batch, on its last row: a row alone differs there)
        rows_alone = slice(0, -1) if self.setup.batch_counts_images else slice(None)
        for r, prompt in enumerate(batch.prompts):
            alone, alone_delta = family.positions(prompt.input_ids, **prompt.kwargs())
            real = batch.real(r)
            np.testing.assert_array_equal(
                alone[rows_alone], positions[rows_alone, r, real], err_msg=f"row {r} alone, {context}"
            )
            assert self.setup.batch_counts_images or alone_delta == deltas[r, 0], (
                f"row {r} alone: delta {alone_delta} != {deltas[r, 0]}: {context}"
            )

    def check_sglang(self, prompt: Any) -> None:
        """mrope (compat="vllm") equals SGLang on ``prompt``: every element and the delta."""
        expected, expected_delta = self.sglang(prompt.input_ids, prompt.kwargs())
        positions, delta = self.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
        context = f"{self.name}, compat=vllm vs SGLang: {prompt.describe()}"
        np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"


def setup_config(setup: FamilySetup) -> Any:
    """The transformers config of a table row (an Omni config with its thinker settings)."""
    if setup.omni:
        return transformers_omni_config(setup.model_type, **setup.settings)
    return transformers_config(setup.model_type, setup.text, **setup.settings)


@functools.cache
def peer_setup(name: str) -> PeerSetup:
    """The :class:`PeerSetup` called ``name`` (a key of ``FAMILY_SETUPS``), built once."""
    setup = FAMILY_SETUPS[name]
    config = setup_config(setup)
    families = {compat: mrope.from_config(config, compat=compat) for compat in ("vllm", "transformers")}
    return PeerSetup(name, config, families, setup)
