"""The peers for the tests: a model type's transformers config, its mrope families under both
conventions, and calls into transformers' and SGLang's own ``get_rope_index`` (through
:mod:`peers`) with the inputs their processors produce (int64 grids, float32 times).

The peers are installed by ``make test``. :func:`require` skips a test where one is missing, except
under ``CI``, where a missing peer fails the test.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import mrope
from mrope.families import Family

# peer set-up name -> (model_type, vision_config overrides)
PEER_SETUPS = {
    "qwen2_vl": ("qwen2_vl", {}),
    "qwen2_5_vl": ("qwen2_5_vl", {"tokens_per_second": 2}),  # as the released checkpoints
    "qwen2_5_vl-tps4": ("qwen2_5_vl", {}),  # transformers' class default, tokens_per_second 4
    "qwen3_vl": ("qwen3_vl", {}),
    "qwen3_vl_moe": ("qwen3_vl_moe", {}),
    "glm4v": ("glm4v", {}),
    "glm4v_moe": ("glm4v_moe", {}),
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
    """List-valued grids as the processors give them to the peers: int64 grids (None when empty),
    float32 ``second_per_grid_ts`` (left out when None)."""
    import torch

    kwargs = {
        name: torch.tensor(grids[name]) if grids.get(name) else None
        for name in ("image_grid_thw", "video_grid_thw")
    }
    if grids.get("second_per_grid_ts") is not None:
        kwargs["second_per_grid_ts"] = torch.tensor(grids["second_per_grid_ts"], dtype=torch.float32)
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

    def family(self, compat: str) -> Family:
        return self.families[compat]

    def transformers(self, input_ids: list[list[int]], grids: dict[str, Any], attention_mask: Any = None):
        """transformers' ``get_rope_index`` on (B, L) ids: (positions (3, B, L), deltas (B,)) as numpy.

        ``grids``: list-valued image_grid_thw, video_grid_thw, second_per_grid_ts (or None), given to
        transformers as int64 / float32 tensors as its processor makes them."""
        import torch

        import peers

        kwargs = torch_grids(grids)
        if attention_mask is not None:
            kwargs["attention_mask"] = torch.tensor(attention_mask, dtype=torch.int64)
        family = self.family("transformers")
        pos, delta = peers.transformers_rope_index(family, self.config, as_torch_ids(input_ids), **kwargs)
        return peers.as_numpy(pos), peers.as_numpy(delta).reshape(-1)

    def sglang(self, input_ids: list[int], grids: dict[str, Any]):
        """SGLang's ``get_rope_index`` (or ``get_rope_index_glm4v``) on one unpadded prompt:
        (positions (3, L), delta) as numpy and int."""

        import peers

        family = self.family("vllm")
        kwargs = torch_grids(grids)
        pos, delta = peers.sglang_rope_index(family, as_torch_ids([input_ids]), **kwargs)
        return peers.as_numpy(pos)[:, 0], int(peers.as_numpy(delta).reshape(-1)[0])

    # -- checks shared by the family tests ------------------------------------------------------------
    def check_transformers(self, prompt: Any) -> None:
        """mrope (compat="transformers") equals transformers on ``prompt``: every element and the delta."""
        expected, expected_delta = self.transformers([prompt.input_ids], prompt.kwargs())
        positions, delta = self.family("transformers").positions(prompt.input_ids, **prompt.kwargs())
        context = f"{self.name}, compat=transformers vs transformers: {prompt.describe()}"
        np.testing.assert_array_equal(positions, expected[:, 0], err_msg=context, strict=True)
        assert delta == expected_delta[0], f"delta {delta} != {expected_delta[0]}: {context}"

    def check_sglang(self, prompt: Any) -> None:
        """mrope (compat="vllm") equals SGLang on ``prompt``: every element and the delta."""
        expected, expected_delta = self.sglang(prompt.input_ids, prompt.kwargs())
        positions, delta = self.family("vllm").positions(prompt.input_ids, **prompt.kwargs())
        context = f"{self.name}, compat=vllm vs SGLang: {prompt.describe()}"
        np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"


@functools.cache
def peer_setup(name: str) -> PeerSetup:
    """The :class:`PeerSetup` called ``name`` (a key of ``PEER_SETUPS``), built once."""
    import peers

    model_type, vision = PEER_SETUPS[name]
    config = peers.transformers_config(model_type, **vision)
    families = {compat: mrope.from_config(config, compat=compat) for compat in ("vllm", "transformers")}
    return PeerSetup(name, config, families)
