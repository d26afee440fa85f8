"""MiniCPM-V 4.7 (``mrope.families.minicpmv4_7``) against vLLM 0.32's own ``get_mrope_input_positions``, in
vLLM's env: over hypothesis prompts in the processor's layout (``support.minicpmv4_7``; crop sizes
multiples of the merge, as the processor makes them: vLLM derives a crop's grid from its token count and
positions one it cannot derive in order) its positions and delta equal vLLM's where the config sets
``uses_mrope_canvas`` (vLLM's canvas rule); without it vLLM positions every token in order, which mrope
does not (transformers' rule is the canvas). mrope's vLLM
integration serves the model in positions mode (its admission does not read the crops from mm_features).

Each request's items are ``MultiModalFeatureSpec`` with vLLM's fields (an image's ``tgt_sizes``, a video's
``video_tgt_sizes``: its crops' (H, W)), called on a stand-in ``self`` holding the config."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.minicpmv4_7 import IDS, config, prompts
from support.peers import require_module
from support.vllm_models import stand_in

vllm = require_module("vllm")
torch = require_module("torch")
if not vllm.__version__.startswith("0.32."):
    pytest.skip(f"written for vLLM 0.32, found {vllm.__version__}", allow_module_level=True)

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.integrations.vllm.features import (  # noqa: E402
    VLLM_SETTINGS,
    feature_spec,
    inputs_from_mm_features,
    unsupported_reason,
)


def vllm_model(canvas: bool):
    """vLLM's model class on a stand-in ``self``: the config, and its canvas set-up from it (the marker
    ids are the config's: no tokenizer is read)."""
    model = stand_in("minicpmv4_7", "MiniCPMV4_7ForConditionalGeneration", config(uses_mrope_canvas=canvas))
    model._init_canvas_mrope(None)
    return model


def features(items, seed: int) -> list:
    """The request's features, as vLLM's processor gives them, in a random order (vLLM sorts them)."""
    found = []
    for item in items:
        key = "tgt_sizes" if item.modality == "image" else "video_tgt_sizes"
        sizes = torch.tensor(item.sizes, dtype=torch.int32)
        found.append(feature_spec(item.modality, item.offset, 1, {key: sizes}))
    random.Random(seed).shuffle(found)
    return found


@given(prompt=prompts(remainders=False), seed=st.integers(0, 2**16))
def test_positions_and_delta_equal_vllms_canvas(prompt, seed):
    ids, found = prompt
    model = vllm_model(canvas=True)
    expected, delta = type(model).get_mrope_input_positions(model, ids, features(found["items"], seed))
    family = mrope.from_config(config(uses_mrope_canvas=True), **VLLM_SETTINGS)
    positions, mine = family.positions(
        ids, target_sizes=found["target_sizes"], target_sizes_videos=found["target_sizes_videos"]
    )
    np.testing.assert_array_equal(positions, np.asarray(expected), strict=False)
    assert mine == delta


def test_without_uses_mrope_canvas_vllm_positions_every_token_in_order():
    ids, found = [5, IDS["image_start_id"], *[IDS["image_token_id"]] * 4, IDS["image_end_id"], 6], [[8, 8]]
    item = feature_spec("image", 1, 6, {"tgt_sizes": torch.tensor(found, dtype=torch.int32)})
    model = vllm_model(canvas=False)
    expected, delta = type(model).get_mrope_input_positions(model, ids, [item])
    assert np.asarray(expected).tolist() == [list(range(len(ids)))] * 3 and delta == 0
    positions, _ = mrope.from_config(config()).positions(ids, target_sizes=found)
    assert positions[1].tolist() != list(range(len(ids)))  # (the canvas: transformers' rule)


def test_the_vllm_integration_serves_it_from_vllms_positions():
    """Its rule is not the plugin's (the admission does not read its crops from vLLM's mm_features):
    positions mode serves it, from vLLM's own positions."""
    family = mrope.from_config(config(uses_mrope_canvas=True), **VLLM_SETTINGS)
    reason = unsupported_reason(family)
    assert reason is not None and "does not read from vLLM's mm_features" in reason
    with pytest.raises(MRopeError, match="target_sizes"):
        inputs_from_mm_features(family, [])
