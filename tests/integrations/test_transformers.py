"""mrope inside transformers (:mod:`mrope.integrations.transformers`), on tiny randomly initialised VLMs of
every family (``support.tiny_vlms``): greedy ``generate`` gives the same tokens and scores with the patch
(transformers' own ``get_rope_index`` then raises if called), without it and after ``unpatch``; the
positions reaching the language model and ``rope_deltas`` equal
transformers' at real tokens; a cached ``forward()`` loop gives the same tokens; wrong positions change
the tokens (so the comparisons can fail). The data-pipeline call :func:`rope_index` equals transformers'
positions, and a collated batch of its per-sample results gives ``forward()`` transformers' logits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from support.peers import require_module

torch = require_module("torch")
require_module("transformers")

import mrope  # noqa: E402
from mrope.integrations import transformers as mt  # noqa: E402
from support import tiny_vlms  # noqa: E402
from support.tiny_vlms import (  # noqa: E402
    IMAGES_ONLY,
    MAIN,
    MODELS,
    OMNI,
    Audio,
    Image,
    Video,
    VideoWithAudio,
    processor_output,
    tiny_config,
    tiny_model,
)

# prompts (rows of parts: text ids, Image(H', W'), Video(T, H', W')), non-square grids throughout
TEXT_AND_IMAGE = [[[5, 6, 7], Image(2, 3), [8, 9]]]
IMAGES_AND_VIDEO = [[[5], Image(2, 3), [6], Image(1, 2), [7], Video(6, 2, 1), [8, 9]]]  # T beyond H', W'
# the three at once (every family runs this one; the main ones all three): text + image in a short row,
# several images and a video in a long one, left-padded
PADDED_BATCH = [[[5, 6], Image(2, 3), [7]], [[5], Image(1, 2), [6], Image(2, 1), [7], Video(5, 2, 1), [8, 9]]]
IMAGES_ONLY_BATCH = [[[5, 6], Image(2, 3), [7]], [[5], Image(1, 2), [6], Image(3, 1), [7, 8, 9, 10]]]
SCENARIOS = {"text+image": TEXT_AND_IMAGE, "images+video": IMAGES_AND_VIDEO, "padded batch": PADDED_BATCH}
OTHERS = [t for t in MODELS if t not in MAIN]
NEW_TOKENS = 3
# transformers numbers the images of a batch on across its rows (HunYuan-VL's image ordinal row): a row
# alone is numbered from 0
BATCH_COUNTS_IMAGES = ("hunyuan_vl",)


def batch_of(model_type: str, scenario: str = "padded batch") -> list[list[Any]]:
    """The rows of ``scenario``; PaddleOCR-VL and HunYuan-VL take no videos, so their batch holds images
    only."""
    if model_type in IMAGES_ONLY and scenario != "text+image":
        return IMAGES_ONLY_BATCH
    return SCENARIOS[scenario]


def owners(model: Any) -> list[Any]:
    """The objects whose ``get_rope_index`` transformers calls (Omni thinkers: the outer one too)."""
    return [m for m in (model, model.model) if callable(getattr(type(m), "get_rope_index", None))]


def greedy(model: Any, inputs: dict[str, Any], new_tokens: int = NEW_TOKENS) -> tuple[Any, Any]:
    """Greedy ``generate``: (new tokens (B, n), scores (n, B, vocab))."""
    out = model.generate(
        **inputs, max_new_tokens=new_tokens, do_sample=False, output_scores=True, return_dict_in_generate=True
    )
    return out.sequences[:, inputs["input_ids"].shape[1] :], torch.stack(out.scores)


@contextmanager
def patched(model: Any, **kwargs: Any) -> Iterator[Any]:
    mt.patch(model, **kwargs)
    try:
        yield model
    finally:
        mt.unpatch(model)


@contextmanager
def without_transformers_positions(model: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """transformers' own ``get_rope_index`` raises if anything calls it."""

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("transformers' get_rope_index ran while the model was patched")

    with monkeypatch.context() as m:
        for owner in owners(model):
            m.setattr(type(owner), "get_rope_index", forbidden)
        yield


def assert_same_generation(expected: tuple[Any, Any], got: tuple[Any, Any], what: str) -> None:
    assert torch.equal(got[0], expected[0]), f"{what}: tokens {got[0].tolist()} != {expected[0].tolist()}"
    assert torch.equal(got[1], expected[1]), f"{what}: scores differ"


# -- patch: generate ------------------------------------------------------------------------------------
CASES = [(t, s) for t in MAIN for s in SCENARIOS] + [(t, "padded batch") for t in OTHERS]


@pytest.mark.parametrize(("model_type", "scenario"), CASES)
def test_generate_gives_transformers_tokens(model_type: str, scenario: str, monkeypatch) -> None:
    model = tiny_model(model_type)
    inputs = processor_output(model_type, batch_of(model_type, scenario))
    expected = greedy(model, inputs)
    with patched(model) as same, without_transformers_positions(model, monkeypatch):
        assert same is model
        assert mt.is_patched(model)
        assert_same_generation(expected, greedy(model, inputs), f"{model_type}, {scenario}, patched")
    assert not mt.is_patched(model)
    assert_same_generation(expected, greedy(model, inputs), f"{model_type}, {scenario}, after unpatch")


@pytest.mark.parametrize("model_type", [*MAIN, "hunyuan_vl"])
def test_wrong_positions_change_the_tokens(model_type: str) -> None:
    """The negative control: positions in reverse order change the generated tokens (and, where it
    differs, the other convention changes the scores), so the equalities above are not vacuous (HunYuan-VL:
    its four rows too)."""
    model = tiny_model(model_type)
    inputs = processor_output(model_type, batch_of(model_type))
    expected = greedy(model, inputs)[0]
    with patched(model):
        right = model.model.get_rope_index  # the patch in effect

        def reversed_positions(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            positions, deltas = right(*args, **kwargs)
            return positions.flip(-1), deltas

        model.model.get_rope_index = reversed_positions
        try:
            assert not torch.equal(greedy(model, inputs)[0], expected)
        finally:
            model.model.get_rope_index = right
    if model_type in ("qwen2_vl", "qwen2_5_vl"):  # whole videos: the conventions differ after a video
        expected_scores = greedy(model, inputs)[1]
        other = "vllm" if mt.installed_compat() == "transformers" else "transformers"
        with patched(model, compat=other):
            assert not torch.equal(greedy(model, inputs)[1], expected_scores)


# -- patch: what reaches the language model -------------------------------------------------------------
@contextmanager
def language_model_positions(model: Any) -> Iterator[list[Any]]:
    """Collects the ``position_ids`` of every call of the model's language model."""
    seen: list[Any] = []

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen.append(kwargs.get("position_ids"))

    handle = model.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def forward_positions(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """``forward()`` without ``position_ids``: (positions reaching the language model, rope_deltas)."""
    with torch.no_grad(), language_model_positions(model) as seen:
        model(**inputs)
    return seen[0], model.model.rope_deltas


@pytest.mark.parametrize("model_type", list(MODELS))
def test_positions_and_deltas_equal_transformers(model_type: str) -> None:
    model = tiny_model(model_type)
    for scenario in ("padded batch", "images+video") if model_type in MAIN else ("padded batch",):
        inputs = processor_output(model_type, batch_of(model_type, scenario))
        expected, expected_deltas = forward_positions(model, inputs)
        with patched(model):
            positions, deltas = forward_positions(model, inputs)
        real = inputs["attention_mask"].bool()
        what = f"{model_type}, {scenario}"
        assert positions.shape == expected.shape and positions.dtype == expected.dtype, what
        assert torch.equal(positions[:, real], expected[:, real]), what
        assert torch.equal(deltas, expected_deltas), f"{what}: rope_deltas {deltas} != {expected_deltas}"


# Omni thinkers: an audio, an image, and a video with its audio (use_audio_in_video), left-padded
OMNI_AUDIO_BATCH = [
    [[5], Audio(60), [6], Image(2, 3), [7]],
    [[5, 6, 7], VideoWithAudio(Video(6, 2, 1, seconds=2.0), Audio(230)), [8, 9]],
]


@pytest.mark.parametrize("model_type", OMNI)
def test_omni_audio(model_type: str, monkeypatch) -> None:
    model = tiny_model(model_type)
    inputs = processor_output(model_type, OMNI_AUDIO_BATCH)
    assert inputs["use_audio_in_video"] and "feature_attention_mask" in inputs
    expected_positions, expected_deltas = forward_positions(model, inputs)
    expected = greedy(model, inputs)
    with patched(model):
        positions, deltas = forward_positions(model, inputs)
        with without_transformers_positions(model, monkeypatch):
            assert_same_generation(expected, greedy(model, inputs), f"{model_type} with audio")
    real = inputs["attention_mask"].bool()
    assert torch.equal(positions[:, real], expected_positions[:, real])
    assert torch.equal(deltas, expected_deltas)
    assert_same_generation(expected, greedy(model, inputs), f"{model_type} with audio, after unpatch")
    pipeline = mt.rope_index(model.config, inputs, use_audio_in_video=True)
    assert torch.equal(pipeline[0][:, real], expected_positions[:, real])
    assert torch.equal(pipeline[1], expected_deltas)


@pytest.mark.parametrize("model_type", MAIN)
def test_cached_forward_loop(model_type: str) -> None:
    """Prefill then one token at a time through ``forward()`` with the cache (later positions are
    ``index + rope_deltas``): the same tokens with and without the patch.

    (Not always generate's tokens: under transformers' convention a video whose T exceeds max(H', W')
    ends its prompt below the maximum position, and ``index + rope_deltas`` continues from the maximum
    while ``generate`` continues from the last position; transformers 5.24 does this itself.)"""

    def loop(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
        with torch.no_grad():
            out = model(**inputs, use_cache=True)
            tokens, logits = [out.logits[:, -1].argmax(-1)], [out.logits[:, -1]]
            for _ in range(NEW_TOKENS - 1):
                out = model(input_ids=tokens[-1][:, None], cache=out.cache, use_cache=True)
                tokens.append(out.logits[:, -1].argmax(-1))
                logits.append(out.logits[:, -1])
        return torch.stack(tokens, 1), torch.stack(logits)

    model = tiny_model(model_type)
    inputs = processor_output(model_type, IMAGES_AND_VIDEO)
    expected = loop(model, inputs)
    with patched(model):
        assert_same_generation(expected, loop(model, inputs), f"{model_type} cached forward loop")


# -- patch: the method itself, and its errors -----------------------------------------------------------
@pytest.mark.parametrize("model_type", MAIN)
def test_patched_method_takes_transformers_signature(model_type: str) -> None:
    """Called as transformers' own method is (keywords, positionally, with the extra keywords generate
    passes): the same result; int32 ids give int32 positions, as transformers'."""
    model = tiny_model(model_type)
    transformers_method = type(model.model).get_rope_index
    names = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")  # in every signature's order
    for rows, dtype, masked in ((PADDED_BATCH, torch.int64, True), (IMAGES_AND_VIDEO, torch.int32, False)):
        inputs = processor_output(model_type, rows)
        ids, types = inputs["input_ids"].to(dtype), inputs["mm_token_type_ids"]
        grids = {k: inputs[k] for k in names if k in inputs}
        mask = inputs["attention_mask"] if masked else None  # transformers fails on int32 ids with a mask
        expected = transformers_method(model.model, ids, types, attention_mask=mask, **grids)
        with patched(model):
            keywords = model.model.get_rope_index(ids, types, attention_mask=mask, **grids)
            positional = model.model.get_rope_index(
                ids, types, *grids.values(), mask, pixel_values=inputs.get("pixel_values")
            )
        real = inputs["attention_mask"].bool()
        for positions, deltas in (keywords, positional):
            assert positions.dtype == dtype == expected[0].dtype
            assert torch.equal(positions[:, real], expected[0][:, real])
            assert torch.equal(deltas, expected[1])


def test_patch_is_idempotent_and_refuses_another_convention() -> None:
    model = tiny_model("qwen2_vl")
    with patched(model):
        method = model.model.get_rope_index
        assert mt.patch(model) is model and model.model.get_rope_index is method
        assert mt.patch(model, compat=mt.installed_compat()) is model
        other = "vllm" if mt.installed_compat() == "transformers" else "transformers"
        with pytest.raises(mrope.MRopeError, match=r"already patched with compat=.*call unpatch\(\)"):
            mt.patch(model, compat=other)
        assert model.model.get_rope_index is method  # the failed call changed nothing
    assert "get_rope_index" not in vars(model.model)
    assert mt.unpatch(model) is model  # unpatching an unpatched model changes nothing


def test_patch_the_inner_model() -> None:
    """Patching the inner ``...Model`` serves the ``...ForConditionalGeneration`` around it."""
    model = tiny_model("qwen2_5_vl")
    inputs = processor_output("qwen2_5_vl", PADDED_BATCH)
    expected = greedy(model, inputs)
    assert mt.patch(model.model) is model.model
    try:
        assert mt.is_patched(model) and mt.is_patched(model.model)
        assert_same_generation(expected, greedy(model, inputs), "inner model patched")
    finally:
        mt.unpatch(model.model)
    assert not mt.is_patched(model)


@pytest.mark.parametrize("model_type", OMNI)
def test_omni_thinker_patches_both_owners(model_type: str) -> None:
    """An Omni thinker's ``generate`` calls the outer ``get_rope_index``, its ``forward`` the inner one."""
    model = tiny_model(model_type)
    with patched(model):
        assert all(
            isinstance(vars(owner).get("get_rope_index"), mt.MRopeRopeIndex) for owner in owners(model)
        )
        assert len(owners(model)) == 2
    assert all("get_rope_index" not in vars(owner) for owner in owners(model))


def test_whole_omni_model_patches_its_thinker() -> None:
    """A whole Omni model (thinker, and talker when audio output is on): the thinker is patched, whose
    ``generate`` the whole model's ``generate`` calls. Patching the thinker's inner model first, then the
    whole model, completes the patch."""
    from transformers import AutoConfig

    thinker_type = "qwen2_5_omni_thinker"
    config = AutoConfig.for_model(
        "qwen2_5_omni", thinker_config=tiny_config(thinker_type).to_dict(), enable_audio_output=False
    )
    torch.manual_seed(0)
    whole = tiny_vlms.model_class("qwen2_5_omni_whole")(config).eval()
    inputs = processor_output(thinker_type, PADDED_BATCH)
    expected = greedy(whole.thinker, inputs)
    mt.patch(whole.thinker.model)
    assert mt.patch(whole) is whole
    try:
        assert all(
            isinstance(vars(o).get("get_rope_index"), mt.MRopeRopeIndex) for o in owners(whole.thinker)
        )
        assert_same_generation(expected, greedy(whole.thinker, inputs), "whole Omni model patched")
    finally:
        assert mt.unpatch(whole) is whole
    assert not mt.is_patched(whole.thinker)


def test_patch_refuses_what_is_not_a_supported_vlm() -> None:
    from transformers import AutoConfig, LlamaConfig, LlamaForCausalLM

    text_only = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1
        )
    )
    with pytest.raises(
        mrope.MRopeError, match=r"LlamaForCausalLM \(model_type 'llama'\) is not a transformers"
    ):
        mt.patch(text_only)
    with pytest.raises(mrope.MRopeError, match=r"list is not a transformers M-RoPE VLM"):
        mt.unpatch([])

    class UnknownVLM(torch.nn.Module):  # a VLM of a model type mrope does not know
        def __init__(self, model_type: str) -> None:
            super().__init__()
            self.config = AutoConfig.for_model(model_type)
            self.rope_deltas = None

        def get_rope_index(self, input_ids: Any, **kwargs: Any) -> None:
            raise NotImplementedError

    unknown = UnknownVLM("llava")
    with pytest.raises(
        mrope.MRopeError, match=r"UnknownVLM cannot be patched: unsupported model_type 'llava'"
    ):
        mt.patch(unknown)
    assert "get_rope_index" not in vars(unknown)
    with pytest.raises(mrope.MRopeError, match="compat must be None, 'vllm' or 'transformers'"):
        mt.patch(tiny_model("qwen2_vl"), compat="sglang")
    assert not mt.is_patched(tiny_model("qwen2_vl"))


# -- patch: GLM-Image, whose generated tokens take the decode positions cached at prefill --------------
# rows of (prompt parts, target grids (H, W)): text-to-image (two targets, the last, the small preview,
# generated first), image-to-image (a source image through the vision tower and the quantiser, one target),
# and a left-padded batch of two text-to-image rows of different lengths and grids; new tokens: into the
# second image of text-to-image (3 * 2 + 1 cached, then 3 * 4 + 1), and image-to-image's one image and
# end marker (transformers' cache ends there: a further token has no position)
GLM_SCENARIOS = {
    "text-to-image": ([([[5, 6, 7, 8]], [(3, 4), (2, 3)])], 12),
    "image-to-image": ([([[5], Image(2, 3), [7, 8]], [(3, 2)])], 8),
    "padded batch": ([([[5, 6, 7, 8, 9]], [(3, 4), (2, 3)]), ([[5, 6]], [(2, 2), (3, 1)])], 12),
}
DECODE_CACHE = ("_cached_decode_position_ids", "_prefill_len")


def decode_cache(model: Any) -> tuple[Any, Any]:
    """GLM-Image's decode cache, what its ``get_rope_index`` sets at prefill; cleared, so that the next
    prefill must set it again."""
    cache = tuple(getattr(model.model, name) for name in DECODE_CACHE)
    for name in DECODE_CACHE:
        setattr(model.model, name, None)
    return cache


def assert_same_cache(expected: tuple[Any, Any], got: tuple[Any, Any], what: str) -> None:
    assert got[1] == expected[1], f"{what}: _prefill_len {got[1]} != {expected[1]}"
    if expected[0] is None:
        assert got[0] is None, what
    else:
        assert got[0].dtype == expected[0].dtype and got[0].device == expected[0].device, what
        assert torch.equal(got[0], expected[0]), f"{what}: {got[0].tolist()} != {expected[0].tolist()}"


@pytest.mark.parametrize("scenario", list(GLM_SCENARIOS))
def test_glm_image_generate_gives_transformers_tokens(scenario: str, monkeypatch) -> None:
    """The patched prefill caches transformers' decode positions, so ``generate`` gives its tokens and
    scores (its own ``get_rope_index`` raising if called), and again after ``unpatch``."""
    model = tiny_vlms.tiny_glm_image()
    rows, new_tokens = GLM_SCENARIOS[scenario]
    inputs = tiny_vlms.glm_image_inputs(rows)
    expected = greedy(model, inputs, new_tokens)
    expected_cache = decode_cache(model)
    assert expected_cache[0] is not None
    with patched(model), without_transformers_positions(model, monkeypatch):
        assert mt.is_patched(model) and vars(model.model)["get_rope_index"].owner() is model.model
        assert_same_generation(expected, greedy(model, inputs, new_tokens), f"glm_image {scenario}, patched")
        assert_same_cache(expected_cache, decode_cache(model), f"glm_image {scenario}, patched")
    assert not mt.is_patched(model)
    after = greedy(model, inputs, new_tokens)
    assert_same_generation(expected, after, f"glm_image {scenario}, after unpatch")


def test_glm_image_wrong_decode_positions_change_the_tokens() -> None:
    """The negative control: the images generated in the grids' order (the first grid first) change the
    tokens, and decode positions shifted by one the scores, so the equalities above are not vacuous."""
    model = tiny_vlms.tiny_glm_image()
    rows, new_tokens = GLM_SCENARIOS["text-to-image"]
    inputs = tiny_vlms.glm_image_inputs(rows)
    expected = greedy(model, inputs, new_tokens)
    with patched(model):
        right = model.model.get_rope_index

        def first_grid_first(*args: Any, image_grid_thw: Any, **kwargs: Any) -> tuple[Any, Any]:
            return right(*args, image_grid_thw=image_grid_thw.flip(0), **kwargs)

        def shifted(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            result = right(*args, **kwargs)
            model.model._cached_decode_position_ids += 1
            return result

        try:
            model.model.get_rope_index = first_grid_first
            assert not torch.equal(greedy(model, inputs, new_tokens)[0], expected[0])
            model.model.get_rope_index = shifted
            assert not torch.equal(greedy(model, inputs, new_tokens)[1], expected[1])
        finally:
            model.model.get_rope_index = right
        assert_same_generation(expected, greedy(model, inputs, new_tokens), "glm_image, patch restored")


def test_glm_image_patched_method_caches_as_transformers() -> None:
    """The patched method called as transformers' own (positionally, its order): the same positions at
    real tokens, deltas and decode cache, for a batch right-padded with a hole in a row's mask and for
    rows without grids; a batch mixing rows with and without grids, where transformers' cache holds
    fewer rows than the batch, raises."""
    model = tiny_vlms.tiny_glm_image()
    transformers_method = type(model.model).get_rope_index
    config = model.config
    start, end, image = config.image_start_token_id, config.image_end_token_id, config.image_token_id
    with_image = torch.tensor([[5, start, image, 0, image, end, 7, start], [5, 6, 7, start, 0, 0, 0, 0]])
    text = torch.tensor([[5, 6, 7, start], [0, 0, 8, start]])
    grids, counts = torch.tensor([[1, 1, 2], [1, 2, 3], [1, 3, 1], [1, 1, 2]]), torch.tensor([2, 2])
    for ids, grid_args, what in ((with_image, (grids, counts), "grids"), (text, (None, None), "no grids")):
        mask = (ids != 0).long()
        expected = transformers_method(model.model, ids, *grid_args, mask)
        expected_cache = decode_cache(model)
        with patched(model):
            positions, deltas = model.model.get_rope_index(ids, *grid_args, mask)
            cache = decode_cache(model)
        real = mask.bool()
        assert torch.equal(positions[:, real], expected[0][:, real]), what
        assert torch.equal(deltas, expected[1]), what
        assert_same_cache(expected_cache, cache, what)
    ids = torch.stack([with_image[0], torch.tensor([5, 6, 7, 8, 9, 10, 11, start])])
    mask = (ids != 0).long()
    mixed = (grids[:2], torch.tensor([2, 0]))
    transformers_method(model.model, ids, *mixed, mask)
    assert decode_cache(model)[0].shape[0] == 1  # transformers' cache: one row for a batch of two
    with patched(model):
        with pytest.raises(
            mrope.MRopeError, match=r"rows \[1\] of the batch have no image grids .* ill-defined"
        ):
            model.model.get_rope_index(ids, *mixed, mask)
        assert decode_cache(model) == (None, None)  # nothing set


# -- the data-pipeline call -----------------------------------------------------------------------------
PIPELINE_CASES = [(t, True) for t in MODELS] + [(t, False) for t in MAIN]


@pytest.mark.parametrize(("model_type", "left"), PIPELINE_CASES)
def test_rope_index_equals_transformers(model_type: str, left: bool) -> None:
    """Left-padded (every family) and right-padded (the main ones) batches, and each row alone."""
    model = tiny_model(model_type)
    inputs = processor_output(model_type, batch_of(model_type), left=left, pixels=False)
    expected, expected_deltas = forward_positions(model, inputs)
    positions, deltas = mt.rope_index(model.config, inputs)
    real = inputs["attention_mask"].bool()
    assert positions.dtype == expected.dtype and positions.shape == expected.shape
    assert torch.equal(positions[:, real], expected[:, real])
    assert (positions[:, ~real] == 0).all()
    assert torch.equal(deltas, expected_deltas)
    # one sample at a time (1-D ids): transformers' positions of that sample alone, and (but where the
    # image ordinal runs on across the rows of a batch) the row of the batch
    for row in range(inputs["input_ids"].shape[0]):
        alone = processor_output(model_type, [batch_of(model_type)[row]], pixels=False)
        expected_one, expected_one_delta = forward_positions(model, alone)
        sample = {
            k: v[0] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v
            for k, v in alone.items()
        }
        one, one_delta = mt.rope_index(model.config, sample)
        rows = expected.shape[0]  # 3, or len(mrope_section) (HunYuan-VL)
        assert one.shape == (rows, sample["input_ids"].shape[0]) and one_delta.shape == (1,)
        assert torch.equal(one, expected_one[:, 0]) and torch.equal(one_delta, expected_one_delta[0])
        if model_type not in BATCH_COUNTS_IMAGES:
            assert torch.equal(one, positions[:, row, real[row]])
            assert torch.equal(one_delta, deltas[row])


def test_rope_index_inputs() -> None:
    """A BatchFeature, numpy arrays, a config dict or a family; seconds a family does not scale are
    ignored (as transformers ignores them); bad inputs raise."""
    from transformers import BatchFeature

    config = tiny_config("qwen2_vl")
    inputs = processor_output("qwen2_vl", PADDED_BATCH)
    expected = mt.rope_index(config, inputs)
    batch_feature = BatchFeature({**inputs, "second_per_grid_ts": torch.tensor([0.5])})
    as_numpy = {k: v.numpy() for k, v in inputs.items()}
    family = mrope.from_config(config, compat=mt.installed_compat())
    for got in (
        mt.rope_index(config, batch_feature),
        mt.rope_index(config.to_dict(), inputs),
        mt.rope_index(family, inputs),
        mt.rope_index(inputs=inputs, config=config),
    ):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    numpy_positions, numpy_deltas = mt.rope_index(config, as_numpy)
    assert isinstance(numpy_positions, np.ndarray)
    np.testing.assert_array_equal(numpy_positions, expected[0].numpy(), strict=True)
    np.testing.assert_array_equal(numpy_deltas, expected[1].numpy(), strict=True)
    with pytest.raises(mrope.MRopeError, match="has no input_ids"):
        mt.rope_index(config, {"attention_mask": inputs["attention_mask"]})
    with pytest.raises(mrope.MRopeError, match="processor's output"):
        mt.rope_index(config, inputs["input_ids"])
    other = "vllm" if family.compat == "transformers" else "transformers"
    under_other = mt.rope_index(family, inputs, compat=other)  # a compat given: the family under it
    assert all(
        torch.equal(a, b)
        for a, b in zip(under_other, mt.rope_index(config, inputs, compat=other), strict=True)
    )
    with pytest.warns(DeprecationWarning, match=r"rope_index\(inputs, config\) is the old argument order"):
        old = mt.rope_index(inputs, config)  # the old order still works
    assert torch.equal(old[0], expected[0]) and torch.equal(old[1], expected[1])


def test_rope_index_in_a_dataset_and_collate() -> None:
    """The README's use: positions per sample in ``Dataset.__getitem__``, padded by the collate
    function; ``forward(position_ids=...)`` then gives transformers' logits at every real token."""
    model_type = "qwen2_5_vl"
    model = tiny_model(model_type)
    rows = PADDED_BATCH

    class Samples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(rows)

        def __getitem__(self, i: int) -> dict[str, Any]:
            inputs = processor_output(model_type, [rows[i]])  # what the processor gives for one sample
            position_ids, rope_deltas = mt.rope_index(model.config, inputs)
            return {**inputs, "position_ids": position_ids, "rope_deltas": rope_deltas}

    def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
        length = max(s["input_ids"].shape[-1] for s in samples)

        def right_pad(x: Any) -> Any:
            return torch.nn.functional.pad(x, (0, length - x.shape[-1]))

        batch = {k: torch.cat([right_pad(s[k]) for s in samples]) for k in ("input_ids", "attention_mask")}
        batch["position_ids"] = torch.cat([right_pad(s["position_ids"]) for s in samples], dim=1)
        batch["rope_deltas"] = torch.cat([s["rope_deltas"] for s in samples])
        for key in (
            "pixel_values",
            "pixel_values_videos",
            "image_grid_thw",
            "video_grid_thw",
            "second_per_grid_ts",
        ):
            if any(key in s for s in samples):
                batch[key] = torch.cat([s[key] for s in samples if key in s])
        return batch

    batch = next(iter(torch.utils.data.DataLoader(Samples(), batch_size=len(rows), collate_fn=collate)))
    rope_deltas = batch.pop("rope_deltas")
    position_ids = batch.pop("position_ids")
    types = {"mm_token_type_ids": processor_output(model_type, rows, left=False)["mm_token_type_ids"]}
    with torch.no_grad():
        expected = model(**batch, **types).logits
        expected_deltas = model.model.rope_deltas
        got = model(**batch, position_ids=position_ids).logits
    real = batch["attention_mask"].bool()
    assert torch.equal(got[real], expected[real])
    assert torch.equal(rope_deltas, expected_deltas)


# -- MiniCPM-V 4.7: its own inputs (per-crop target sizes), positions it computes itself ------------------
def minicpmv4_7_inputs() -> dict[str, Any]:
    """A left-padded batch for the tiny MiniCPM-V 4.7 (no pixels): a picture with two rows of two slices
    and a newline after it; text only; a picture without slices next to a video of two frames."""
    ids = tiny_vlms.MINICPMV4_7_IDS
    image, video, start, end = (
        ids["image_token_id"],
        ids["video_token_id"],
        ids["image_start_id"],
        ids["image_end_id"],
    )
    slice_start, slice_end, newline = ids["slice_start_id"], ids["slice_end_id"], ids["newline_id"]
    slices = [slice_start, *[image] * 6, slice_end]
    rows = [
        [5, 6, start, *[image] * 6, end, *slices, *slices, newline, *slices, *slices, newline, 7, 8],
        [5, 6, 7, 8, 9],
        [5, start, *[image] * 4, end, 6, *[start, *[video] * 2, end] * 2, 7],
    ]
    length = max(map(len, rows))
    input_ids = torch.tensor([[0] * (length - len(row)) + row for row in rows])
    return {
        "input_ids": input_ids,
        "attention_mask": (torch.arange(length) >= length - torch.tensor([[len(r)] for r in rows])).long(),
        "target_sizes": torch.tensor([[8, 12], *[[12, 8]] * 4, [8, 8]], dtype=torch.int32),
        "target_sizes_videos": torch.tensor([[4, 8], [4, 8]], dtype=torch.int32),
        "mm_token_type_ids": (input_ids == image).int() + 2 * (input_ids == video).int(),
    }


def test_minicpmv4_7_generate_gives_transformers_tokens(monkeypatch) -> None:
    """The patch maps transformers' inputs (target sizes, token types) onto the family's: ``generate``
    gives transformers' tokens and scores, its own ``get_rope_index`` raising if called; and the
    data-pipeline call equals transformers' positions and deltas."""
    model = tiny_vlms.tiny_minicpmv4_7()
    inputs = minicpmv4_7_inputs()
    expected = greedy(model, inputs)
    expected_positions = type(model.model).get_rope_index(model.model, **inputs)
    with patched(model), without_transformers_positions(model, monkeypatch):
        assert_same_generation(expected, greedy(model, inputs), "minicpmv4_7, patched")
        positions, deltas = model.model.get_rope_index(**inputs)
    assert torch.equal(positions, expected_positions[0]) and torch.equal(deltas, expected_positions[1])
    positions, deltas = mt.rope_index(model.config, inputs)
    assert torch.equal(positions, expected_positions[0]) and torch.equal(deltas, expected_positions[1])
    assert_same_generation(expected, greedy(model, inputs), "minicpmv4_7, after unpatch")


def test_minicpmv4_7_wrong_positions_change_the_tokens() -> None:
    """The negative control: every token in order (vLLM's positions without ``uses_mrope_canvas``) changes
    the tokens, and a thumbnail not resampled over its slice canvas the scores."""
    model = tiny_vlms.tiny_minicpmv4_7()
    inputs = minicpmv4_7_inputs()
    expected = greedy(model, inputs)
    with patched(model):
        right = model.model.get_rope_index

        def in_order(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            positions, deltas = right(*args, **kwargs)
            index = (kwargs["attention_mask"].cumsum(-1) - 1).clamp(min=0) * kwargs["attention_mask"]
            return index.expand_as(positions).clone(), torch.zeros_like(deltas)

        def not_resampled(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
            positions, deltas = right(*args, **kwargs)
            thumbnail = slice(3, 9)  # the first row's thumbnail, a 2 x 3 grid over a 6 x 4 canvas
            positions[1:, 0, thumbnail] = positions[0, 0, thumbnail] + torch.tensor(
                [[0, 0, 0, 1, 1, 1], [0, 1, 2] * 2]
            )
            return positions, deltas

        try:
            model.model.get_rope_index = in_order
            assert not torch.equal(greedy(model, inputs)[0], expected[0])
            model.model.get_rope_index = not_resampled  # (too small a change for this model's tokens)
            assert not torch.equal(greedy(model, inputs)[1], expected[1])
        finally:
            model.model.get_rope_index = right
        assert_same_generation(expected, greedy(model, inputs), "minicpmv4_7, patch restored")
