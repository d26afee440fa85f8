"""The peers for the tests: the family table (every supported model type with its transformers config
and what its peers cover), its mrope families under both conventions, and calls into transformers' and
SGLang's own ``get_rope_index`` (through :mod:`peers`) with the inputs their processors produce
(int64 grids and audio lengths, float32 times).

The peers are installed by ``make test``. :func:`require` skips a test where one is missing, except
under ``CI``, where a missing peer fails the test. This module imports only numpy, pytest and mrope at
its top, so that a numpy-only environment collects the suite.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import mrope
from mrope.families import Family

OMNI_TYPES = ("qwen2_5_omni", "qwen3_omni_moe")  # configs whose settings are thinker_config fields


@dataclass(frozen=True)
class FamilySetup:
    """One row of the family table: a model type, the settings of its transformers config
    (vision_config fields; thinker_config fields for the Omni families) and what its peers cover.

    ``sglang``: ``"all"`` (SGLang computes every prompt), ``"images"`` (SGLang agrees on single-frame
    images only: PaddleOCR-VL, whose time SGLang scales) or ``"none"`` (SGLang has no position code).
    ``edge_layouts``: the hand-picked layouts of :data:`strategies.EDGE_LAYOUTS` apply (videos of any T).
    ``markers_optional``: transformers finds blocks without their markers (Qwen2/2.5-VL).
    ``sglang_image_frames``: the most frames of an image on which SGLang agrees (processors give images
    one frame; SGLang scales Qwen2.5-VL's image time as its video time, with 0 seconds per grid).
    """

    model_type: str
    settings: dict[str, Any] = field(default_factory=dict)
    sglang: str = "all"
    edge_layouts: bool = True
    markers_optional: bool = False
    sglang_image_frames: int = 2

    @property
    def omni(self) -> bool:
        return self.model_type in OMNI_TYPES


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

        import peers

        kwargs = torch_grids(grids)
        if attention_mask is None and self.setup.omni:
            attention_mask = [[1] * len(row) for row in input_ids]
        if attention_mask is not None:
            kwargs["attention_mask"] = torch.tensor(attention_mask, dtype=torch.int64)
        family = self.family("transformers")
        pos, delta = peers.transformers_rope_index(family, self.config, as_torch_ids(input_ids), **kwargs)
        return peers.as_numpy(pos), peers.as_numpy(delta).reshape(-1)

    def sglang(self, input_ids: list[int], grids: dict[str, Any]):
        """SGLang's ``get_rope_index`` (or its GLM, Ernie variant) on one unpadded prompt:
        (positions (3, L), delta) as numpy and a Python number.

        SGLang's Qwen3-Omni text path (no image, no video) returns int64 where its vision path returns
        float32: the text path's answer is given as float32, the dtype of mrope's Qwen3-Omni positions."""

        import peers

        family = self.family("vllm")
        kwargs = torch_grids(grids)
        pos, delta = peers.sglang_rope_index(family, as_torch_ids([input_ids]), **kwargs)
        pos, delta = peers.as_numpy(pos)[:, 0], peers.as_numpy(delta).reshape(-1)[0]
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
        for r, prompt in enumerate(batch.prompts):
            alone, alone_delta = family.positions(prompt.input_ids, **prompt.kwargs())
            real = batch.real(r)
            np.testing.assert_array_equal(alone, positions[:, r, real], err_msg=f"row {r} alone, {context}")
            assert alone_delta == deltas[r, 0], (
                f"row {r} alone: delta {alone_delta} != {deltas[r, 0]}: {context}"
            )

    def check_sglang(self, prompt: Any) -> None:
        """mrope (compat="vllm") equals SGLang on ``prompt``: every element and the delta."""
        expected, expected_delta = self.sglang(prompt.input_ids, prompt.kwargs())
        positions, delta = self.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
        context = f"{self.name}, compat=vllm vs SGLang: {prompt.describe()}"
        np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"


def transformers_config(setup: FamilySetup) -> Any:
    """The transformers config of a table row (an Omni config with its thinker settings)."""
    import peers

    if setup.omni:
        return peers.transformers_omni_config(setup.model_type, **setup.settings)
    return peers.transformers_config(setup.model_type, **setup.settings)


@functools.cache
def peer_setup(name: str) -> PeerSetup:
    """The :class:`PeerSetup` called ``name`` (a key of ``FAMILY_SETUPS``), built once."""
    setup = FAMILY_SETUPS[name]
    config = transformers_config(setup)
    families = {compat: mrope.from_config(config, compat=compat) for compat in ("vllm", "transformers")}
    return PeerSetup(name, config, families, setup)
