"""Every model transformers ships with a ``get_rope_index`` is supported, or listed here with the reason.

A new transformers release that adds a model with M-RoPE positions fails this test until the model is
supported or added to ``KNOWN_UNSUPPORTED``.
"""

import ast
import dataclasses
import pathlib
import re

import numpy as np
import pytest

import mrope
from mrope.families import NESTED_CONFIGS, REGISTRY, config_to_dict
from mrope.families._base import BASE_FIELDS
from support.peers import FAMILY_SETUPS, TRANSFORMERS_MODELS, require_module

transformers = require_module("transformers")

KNOWN_UNSUPPORTED: dict[str, str] = {}

#: supported model types whose only peer is vLLM (no transformers ``get_rope_index``): tested element for
#: element against vLLM's own ``get_mrope_input_positions`` in tests/integrations/vllm/test_vllm_positions.py,
#: which also fails when a vLLM M-RoPE model is neither served nor listed
VLLM_PEER_ONLY = {
    "keye": "remote-code config (found by architecture)",
    "keye_vl1_5": "remote-code config (found by architecture)",
    "openpangu_vl": "remote-code config (found by architecture)",
    "bailing_moe_v3_vl": "vLLM's own config class",
    "isaac": "vLLM's own config class",
    "minicpmv4_6": "transformers ships the model without a get_rope_index",
    "minicpm_ocr": "transformers ships the model without a get_rope_index (vLLM 0.34's positions: "
    "tests/integrations/vllm034/test_models_034.py)",
    "alpamayo2_super": "vLLM's own config class (vLLM 0.34's positions: tests/integrations/vllm034)",
    "qwen3_asr": "transformers ships the model without a get_rope_index (1-D positions)",
    "qwen3_asr_thinker": "vLLM's config nests it in qwen3_asr",
}


#: supported model types tested against transformers in their own module, not over the family table
OWN_PEER_TESTS = {
    "glm_image": "prompts carry the grids of the images still to be generated and batches images_per_sample "
    "(tests/families/test_glm_image.py)",
    "minicpmv4_7": "its crops take target_sizes, not grids, and it computes its positions itself "
    "(tests/families/test_minicpmv4_7.py)",
}

#: supported model types without a layout in mrope.prompts (their test module lays out their prompts)
NO_PROMPT_LAYOUT = {"minicpmv4_7": "per-crop target_sizes and slices, not grids"}


#: supported model types whose default transformers config lacks a field the rule needs (the family's
#: error names it; the family table's config gives it)
DEFAULT_CONFIG_LACKS = {
    "hunyuan_vl": "text_config.rope_parameters.mrope_section",
    "minicpmv4_7": "image_token_id",  # (its checkpoints' config.json holds its token ids)
}


def models_with_get_rope_index() -> set[str]:
    """Model types (module names) whose modeling file defines ``get_rope_index`` on a class."""
    root = pathlib.Path(transformers.__file__).parent / "models"
    found = set()
    for path in root.glob("*/modeling_*.py"):
        source = path.read_text()
        if "def get_rope_index" not in source:
            continue
        tree = ast.parse(source)
        if any(
            isinstance(f, ast.FunctionDef) and f.name == "get_rope_index"
            for c in ast.walk(tree)
            if isinstance(c, ast.ClassDef)
            for f in c.body
        ):
            found.add(path.parent.name)
    return found


def test_every_transformers_model_with_get_rope_index_is_covered():
    shipped = models_with_get_rope_index()
    assert len(shipped) >= 20, f"scan found only {sorted(shipped)}"
    supported = set(mrope.supported_model_types())
    missing = shipped - supported - set(KNOWN_UNSUPPORTED)
    assert not missing, (
        f"transformers models with get_rope_index that mrope neither supports nor lists: {missing}"
    )
    stale = set(KNOWN_UNSUPPORTED) & supported
    assert set(VLLM_PEER_ONLY) <= supported, "listed as tested against vLLM but not supported"
    assert not set(VLLM_PEER_ONLY) & shipped, "a transformers get_rope_index to test against: add its adapter"
    assert not stale, f"listed as unsupported but supported: {stale}"
    gone = set(KNOWN_UNSUPPORTED) - shipped
    assert not gone, f"listed as unsupported but no longer in transformers: {gone}"


def test_every_supported_type_has_a_peer_adapter_and_a_default_config():
    for model_type in mrope.supported_model_types():
        if model_type.endswith("_thinker") or model_type in VLLM_PEER_ONLY:
            continue  # reached through the top-level Omni config, or tested against vLLM
        assert model_type in TRANSFORMERS_MODELS, (
            f"{model_type} has no transformers adapter in tests/support/peers.py"
        )
        default = transformers.AutoConfig.for_model(model_type)
        if model_type in DEFAULT_CONFIG_LACKS:  # transformers' get_rope_index refuses it too
            with pytest.raises(mrope.MRopeError, match=re.escape(DEFAULT_CONFIG_LACKS[model_type])):
                mrope.from_config(default)
            continue
        family = mrope.from_config(default)
        assert family.model_type in (model_type, f"{model_type}_thinker")


def test_every_supported_type_is_in_the_family_table_with_a_prompt_layout():
    tabled = {setup.model_type for setup in FAMILY_SETUPS.values()}
    for model_type in sorted(set(mrope.supported_model_types()) - set(VLLM_PEER_ONLY)):
        if model_type not in NO_PROMPT_LAYOUT:
            assert REGISTRY[model_type].prompt_layout is not None, (
                f"{model_type}'s family has no prompt_layout"
            )
        if not model_type.endswith("_thinker") and model_type not in OWN_PEER_TESTS:
            assert model_type in tabled, (
                f"{model_type} is not in the family table (support.peers.FAMILY_SETUPS)"
            )


#: settings a family defaults that no transformers config class of its model fills in, and whose default
#: the family's is (a peer's, or the checkpoints' where no peer has one)
OTHER_DEFAULTS = {
    (
        "qwen2_5_omni",
        "tokens_per_second",
    ): "vLLM's: it reads vision_config.tokens_per_second, 25 where absent",
    (
        "qwen2_5_omni",
        "vision_start_token_id",
    ): "the checkpoints' thinker config (transformers' thinker config "
    "class has no such field, its talker class defaults it to the same 151652; vLLM does not read it)",
    ("qwen3_omni_moe", "vision_start_token_id"): "as Qwen2.5-Omni's",
}


def _defaults(cls: type) -> dict:
    """The settings ``cls`` defaults, and their defaults."""
    return {
        f.name: f.default
        for f in dataclasses.fields(cls)
        if f.init and f.name not in BASE_FIELDS and f.default is not dataclasses.MISSING
    }


def test_every_default_setting_is_the_one_transformers_fills_in():
    """A config that leaves a setting out means what transformers' config class fills in (what vLLM and
    SGLang then read from the loaded config): every setting a family defaults has that default, or, where
    transformers' class has no such field, the one listed with its source. No setting is guessed."""
    checked = set()
    for model_type in mrope.supported_model_types():
        cls = REGISTRY[model_type]
        defaults = _defaults(cls)
        if not defaults or model_type in VLLM_PEER_ONLY:
            continue
        top = model_type.removesuffix("_thinker")
        cfg = config_to_dict(transformers.AutoConfig.for_model(top))
        for key in NESTED_CONFIGS:
            if isinstance(cfg.get(key), dict):
                cfg = dict(cfg[key])
        found = cls.read_settings(cls.unwrap_config(cfg))
        for name, default in defaults.items():
            if name in found:
                theirs = found[name]
                assert theirs == default, (
                    f"{model_type}: {name} defaults to {default!r}, transformers' to {theirs!r}"
                )
            else:
                assert (top, name) in OTHER_DEFAULTS, (
                    f"{model_type}: {name} defaults to {default!r}, which no transformers config fills in: "
                    "refuse it (no default) or list whose default it is in OTHER_DEFAULTS"
                )
            checked.add((top, name))
    assert ("qwen2_5_vl", "tokens_per_second") in checked
    assert set(OTHER_DEFAULTS) <= checked, "listed defaults that no family has"


def test_a_config_dict_without_tokens_per_second_reads_as_autoconfig_does():
    """The issue's case: a Qwen2.5-VL ``config.json`` without ``vision_config.tokens_per_second``, read as
    a dict and through transformers' config class, gives one family and transformers' positions."""
    from support import peers
    from support.strategies import Video, build_prompt, text

    torch = pytest.importorskip("torch")
    config = peers.transformers_config("qwen2_5_vl").to_dict()
    del config["vision_config"]["tokens_per_second"]
    loaded = transformers.Qwen2_5_VLConfig.from_dict(config)
    as_dict, as_loaded = mrope.from_config(config), mrope.from_config(loaded)
    assert as_dict.tokens_per_second == as_loaded.tokens_per_second == loaded.vision_config.tokens_per_second
    family = mrope.from_config(config, compat="transformers")
    prompt = build_prompt(family, [text(2), Video(6, 1, 1), text(2)], [0.5])
    seconds = torch.tensor(prompt.second_per_grid_ts)
    grids = {"video_grid_thw": torch.tensor(prompt.video_grid_thw)}
    ids = torch.tensor([prompt.input_ids])
    expected, _ = peers.transformers_rope_index(family, loaded, ids, second_per_grid_ts=seconds, **grids)
    positions, _ = family.positions(prompt.input_ids, second_per_grid_ts=seconds, **grids)
    np.testing.assert_array_equal(positions, expected[:, 0].numpy())
