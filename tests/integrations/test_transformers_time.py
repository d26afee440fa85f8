"""Qwen2.5-VL's scaled video time in the dtype of ``second_per_grid_ts``, against transformers 5.24.

transformers computes ``tokens_per_second * second_per_grid_ts[i]`` and ``arange(T) * interval`` in the
dtype of the seconds tensor: bfloat16 or float16 once a model's inputs are cast with
``BatchFeature.to(dtype)``, float32 as the processor gives them, float64; integer seconds (or none) stay
integers. Under ``compat="transformers"`` mrope follows that arithmetic for every dtype, element for
element: ``get_rope_index``, ``family.positions``, ``PositionTable.add``, :func:`rope_index` and the
patched model (what reaches its language model, and ``generate``). Under ``compat="vllm"`` the dtype is
not read (vLLM's float64, SGLang's float32 of the values). The Omni thinkers take their seconds as
float32 in every dtype (``.float()``), as mrope does. The checks of the transformers convention fail
where mrope computes in float32 whatever the dtype (mrope before issue 20, or a negative control that
forces it).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.peers import require, require_module, torch_grids

torch = require_module("torch")
require_module("transformers")

import mrope  # noqa: E402
from mrope import MRopeError  # noqa: E402
from mrope.families import PromptItem  # noqa: E402
from mrope.families.inputs import items_as_inputs  # noqa: E402
from mrope.integrations import transformers as mt  # noqa: E402
from mrope.serving import PositionTable  # noqa: E402
from support import peers, tiny_vlms  # noqa: E402
from support.offsets import item_offsets  # noqa: E402
from support.strategies import SECONDS, Image, Video, batches, build_prompt, prompts, text  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
DTYPE_IDS = [str(d).removeprefix("torch.") for d in DTYPES]
# tokens_per_second: the checkpoints', transformers' default, and one that float32 does not hold
RATES = (2, 4, 0.1)
# seconds: the processor's awkward values, and any float32 up to 8 s
SECOND_VALUES = st.one_of(st.sampled_from(SECONDS), st.floats(0, 8, width=32))
# videos of up to 300 frames: past 256, bfloat16 rounds the frame index itself
LONG = {"max_frames": 300, "max_side": 2, "max_image_frames": 3}


@functools.cache
def qwen2_5_vl(rate: int | float) -> tuple[Any, dict[str, mrope.Family]]:
    """What transformers' ``get_rope_index`` reads of a Qwen2.5-VL config with ``tokens_per_second=rate``
    (a float rate: transformers' config takes ints only, its code any number) and mrope's families:
    ``"transformers"``, ``"vllm"`` and ``"vllm64"`` (``video_time="float64"``)."""
    config = peers.transformers_config("qwen2_5_vl", tokens_per_second=round(rate) or 1)
    families = {
        "transformers": mrope.from_config(config, compat="transformers", tokens_per_second=rate),
        "vllm": mrope.from_config(config, compat="vllm", tokens_per_second=rate),
        "vllm64": mrope.from_config(config, video_time="float64", tokens_per_second=rate),
    }
    if isinstance(rate, float):
        vision = types.SimpleNamespace(spatial_merge_size=config.vision_config.spatial_merge_size)
        vision.tokens_per_second = rate
        config = types.SimpleNamespace(vision_config=vision)
    return config, families


def transformers_rope_index(family: mrope.Family, config: Any, ids: Any, **kwargs: Any) -> tuple[Any, Any]:
    """transformers' own ``get_rope_index`` (deltas as (B, 1))."""
    positions, deltas = peers.transformers_rope_index(family, config, ids, **kwargs)
    return positions, deltas.reshape(-1, 1)


def draw_seconds(data: st.DataObject, count: int, given: list[float] | None) -> list[float] | None:
    """Seconds for ``count`` videos (None where the prompt has none: 1 second, transformers' int 1)."""
    if given is None:
        return None
    return data.draw(st.lists(SECOND_VALUES, min_size=count, max_size=count), label="seconds")


# -- get_rope_index, positions, PositionTable ---------------------------------------------------------------
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=15)
@given(data=st.data())
def test_every_entry_point_follows_transformers_in_the_seconds_dtype(rate, dtype, data):
    config, families = qwen2_5_vl(rate)
    family = families["transformers"]
    batch = data.draw(batches(family, **LONG), label="batch")
    values = draw_seconds(data, len(batch.video_grid_thw), batch.second_per_grid_ts)
    kwargs = torch_grids(batch.kwargs())
    kwargs.pop("second_per_grid_ts", None)
    seconds = None if values is None else torch.tensor(values, dtype=dtype)
    ids, mask = torch.tensor(batch.input_ids), torch.tensor(batch.attention_mask)
    context = (
        f"rate {rate}, {dtype}, seconds {None if seconds is None else seconds.tolist()}: {batch.describe()}"
    )

    expected, expected_deltas = transformers_rope_index(
        family, config, ids, attention_mask=mask, second_per_grid_ts=seconds, **kwargs
    )
    positions, deltas = mrope.get_rope_index(
        family, ids, attention_mask=mask, second_per_grid_ts=seconds, **kwargs
    )
    assert torch.equal(positions, expected), f"get_rope_index positions, {context}"
    assert torch.equal(deltas, expected_deltas), (
        f"get_rope_index deltas {deltas} != {expected_deltas}, {context}"
    )

    table = PositionTable(len(batch.prompts), backend="numpy")
    first_video = 0
    for r, prompt in enumerate(batch.prompts):
        videos = len(prompt.video_grid_thw)
        mine = None if seconds is None else seconds[first_video : first_video + videos]
        first_video += videos
        row = {
            "image_grid_thw": prompt.image_grid_thw or None,
            "video_grid_thw": prompt.video_grid_thw or None,
            "second_per_grid_ts": mine if videos else None,
        }
        real = expected[:, r, batch.real(r)].numpy()
        alone, delta = family.positions(prompt.input_ids, **row)
        np.testing.assert_array_equal(alone, real, err_msg=f"positions of row {r}, {context}")
        assert delta == expected_deltas[r, 0], f"delta of row {r}: {delta}, {context}"
        length = len(prompt.input_ids)
        table.add(r, family, prompt.input_ids, **row)
        out = np.zeros((3, length), dtype=np.int64)
        table.fill(out, np.array([r]), np.array([0]), np.array([length]))
        np.testing.assert_array_equal(out, real, err_msg=f"PositionTable.add of row {r}, {context}")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("rate", RATES)
def test_a_long_video_and_a_long_image(rate, dtype):
    # 300 frames: bfloat16 (float16 from 2048) rounds the frame index, so frames 256 and 257 of a video at
    # 1 s per step share a time; an image's frames are never scaled (transformers' int 1): k exactly
    config, families = qwen2_5_vl(rate)
    family = families["transformers"]
    prompt = build_prompt(family, [text(2), Image(1, 1, frames=300), text(1), Video(300, 1, 1), text(2)])
    for value in (1.0, 0.7, 1.3, 2 / 25):
        seconds = torch.tensor([value], dtype=dtype)
        grids = torch_grids(prompt.kwargs())
        grids.pop("second_per_grid_ts", None)
        ids = torch.tensor([prompt.input_ids])
        expected, expected_deltas = transformers_rope_index(
            family, config, ids, second_per_grid_ts=seconds, **grids
        )
        positions, deltas = mrope.get_rope_index(family, ids, second_per_grid_ts=seconds, **grids)
        assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas), (
            f"{value} s, {dtype}"
        )
        alone, delta = family.positions(prompt.input_ids, second_per_grid_ts=seconds, **grids)
        np.testing.assert_array_equal(alone, expected[:, 0].numpy(), err_msg=f"{value} s, {dtype}")
        assert delta == expected_deltas[0, 0]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize(
    "seconds", [None, [3, 1], [0, 7], [100001, 7]], ids=["none", "3,1", "0,7", "100001,7"]
)
def test_integer_seconds_follow_transformers(rate, seconds):
    # integer seconds stay integers times an int rate, exact where float32 is not (299 * 2 * 100001 is past
    # 2**24); times a float rate they become float32
    config, families = qwen2_5_vl(rate)
    family = families["transformers"]
    prompt = build_prompt(family, [text(2), Video(300, 1, 1), text(1), Video(40, 2, 1), text(2)])
    grids = torch_grids(prompt.kwargs())
    grids.pop("second_per_grid_ts", None)
    tensor = None if seconds is None else torch.tensor(seconds)
    ids = torch.tensor([prompt.input_ids])
    expected, expected_deltas = transformers_rope_index(
        family, config, ids, second_per_grid_ts=tensor, **grids
    )
    positions, deltas = mrope.get_rope_index(family, ids, second_per_grid_ts=tensor, **grids)
    assert torch.equal(positions, expected) and torch.equal(deltas, expected_deltas)
    as_list, _ = family.positions(prompt.input_ids, second_per_grid_ts=seconds, **grids)
    np.testing.assert_array_equal(as_list, expected[:, 0].numpy())


def test_float16_time_past_its_range_is_refused():
    # 300 frames at 100 s x 4 tokens per second: frame 299 at 119600, past float16's 65504 (transformers'
    # positions would be garbage); float32 seconds are fine, compat="vllm" does not read the dtype
    config, families = qwen2_5_vl(4)
    prompt = build_prompt(families["transformers"], [text(2), Video(300, 1, 1), text(2)])
    grids = {"video_grid_thw": prompt.video_grid_thw}
    with pytest.raises(MRopeError, match=r"second_per_grid_ts\[0\] = 100 \(float16\).* overflows"):
        families["transformers"].positions(
            prompt.input_ids, second_per_grid_ts=torch.tensor([100.0], dtype=torch.float16), **grids
        )
    families["transformers"].positions(prompt.input_ids, second_per_grid_ts=torch.tensor([100.0]), **grids)
    families["vllm"].positions(
        prompt.input_ids, second_per_grid_ts=torch.tensor([100.0], dtype=torch.float16), **grids
    )


def test_a_dtype_transformers_arithmetic_is_not_emulated_for_is_refused():
    config, families = qwen2_5_vl(2)
    prompt = build_prompt(families["transformers"], [text(2), Video(3, 1, 1), text(2)])
    seconds = torch.tensor([0.5]).to(torch.float8_e4m3fn)
    with pytest.raises(
        MRopeError, match="dtype float8_e4m3fn: transformers' time arithmetic is emulated for"
    ):
        families["transformers"].positions(
            prompt.input_ids, video_grid_thw=prompt.video_grid_thw, second_per_grid_ts=seconds
        )
    families["vllm"].positions(
        prompt.input_ids, video_grid_thw=prompt.video_grid_thw, second_per_grid_ts=seconds
    )


# -- items: PromptItem.seconds keeps its dtype ---------------------------------------------------------------
def _items(family, prompt, seconds: list[Any]) -> list[PromptItem]:
    """The prompt's items (prompt order), video ``i`` with ``seconds[i]``."""
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    items = [PromptItem("image", o, g) for o, g in zip(images, prompt.image_grid_thw, strict=True)]
    return items + [
        PromptItem("video", o, g, s) for o, g, s in zip(videos, prompt.video_grid_thw, seconds, strict=True)
    ]


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_items_seconds_keep_their_dtype(rate, dtype, data):
    """``PromptItem.seconds`` given as a tensor value (or a numpy one) means what the same values as
    ``second_per_grid_ts`` of that dtype mean: transformers' time in that dtype, element for element
    (frame 257 of a bfloat16 video included), on the rule on items (Qwen2.5-VL), the array inputs they
    convert to (:func:`items_as_inputs`) and the table; under ``compat="vllm"`` the values alone."""
    config, families = qwen2_5_vl(rate)
    family = families["transformers"]
    prompt = data.draw(prompts(family, max_images=1, max_videos=2, **LONG), label="prompt")
    if not prompt.video_grid_thw:
        return
    values = draw_seconds(data, len(prompt.video_grid_thw), [])
    seconds = torch.tensor(values, dtype=dtype)
    grids = torch_grids(prompt.kwargs())
    grids.pop("second_per_grid_ts", None)
    ids = torch.tensor([prompt.input_ids])
    expected, deltas = transformers_rope_index(family, config, ids, second_per_grid_ts=seconds, **grids)
    expected, delta = expected[:, 0].numpy(), int(deltas[0, 0])
    numpy_dtype = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}.get(dtype)
    givens = {"tensor": list(seconds), "one-value tensor": [s.reshape(1) for s in seconds]}
    if numpy_dtype is not None:
        givens["numpy"] = list(np.array(values, dtype=numpy_dtype))
    for how, as_given in givens.items():
        items = _items(family, prompt, as_given)
        context = f"{how} {dtype}, rate {rate}, seconds {seconds.tolist()}: {prompt.describe()}"
        for got, got_delta in (
            family.positions(prompt.input_ids, items=items),
            family.positions(prompt.input_ids, **items_as_inputs(items)),
        ):
            np.testing.assert_array_equal(got, expected, err_msg=context)
            assert got_delta == delta, context
        table = PositionTable(1, backend="numpy")
        table.add(0, family, prompt.input_ids, items=items)
        out = np.zeros(expected.shape, dtype=np.int64)
        table.fill(out, np.array([0]), np.array([0]), np.array([expected.shape[1]]))
        np.testing.assert_array_equal(out, expected, err_msg=f"table, {context}")
        for name in ("vllm", "vllm64"):  # the values, whatever the dtype
            same = families[name].positions(prompt.input_ids, second_per_grid_ts=seconds.double(), **grids)
            got = families[name].positions(prompt.input_ids, items=items)
            np.testing.assert_array_equal(got[0], same[0], err_msg=f"{name}, {context}")


def test_items_integer_seconds_stay_integers_and_dtypes_do_not_mix():
    """Python int seconds are a list of ints (transformers' integer arithmetic, exact past float32's
    2**24), as ``second_per_grid_ts=[100001, 7]``; seconds of different dtypes mean no one array: refused,
    naming them."""
    config, families = qwen2_5_vl(2)
    family = families["transformers"]
    prompt = build_prompt(family, [text(2), Video(300, 1, 1), text(1), Video(40, 2, 1), text(2)])
    grids = {"video_grid_thw": prompt.video_grid_thw}
    expected = family.positions(prompt.input_ids, second_per_grid_ts=[100001, 7], **grids)
    got = family.positions(prompt.input_ids, items=_items(family, prompt, [100001, 7]))
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]
    bf16 = torch.tensor(1.3, dtype=torch.bfloat16)
    for mixed, named in (
        ([bf16, 0.5], r"bfloat16 \(video 0\) and float32 \(a Python float, as a list\) \(video 1\)"),
        ([np.float16(0.5), bf16], r"float16 \(video 0\) and bfloat16 \(video 1\)"),
        (
            [7, torch.tensor(0.5)],
            r"float32 \(video 1\) and int \(a Python int, as a list\) \(video 0\)|"
            r"int \(a Python int, as a list\) \(video 0\) and float32 \(video 1\)",
        ),
    ):
        table = PositionTable(1)
        table.add(0, family, [1, 2, 3])
        for call in (
            lambda m=mixed: family.positions(prompt.input_ids, items=_items(family, prompt, m)),
            lambda m=mixed, table=table: table.add(
                0, family, prompt.input_ids, items=_items(family, prompt, m), replace=True
            ),
        ):
            with pytest.raises(MRopeError, match="the videos' seconds come in different dtypes: " + named):
                call()
        assert table.prompt_length(0) == 3


# -- compat="vllm": the dtype is not read --------------------------------------------------------------------
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=10)
@given(data=st.data())
def test_vllm_convention_reads_the_values_not_the_dtype(rate, dtype, data):
    config, families = qwen2_5_vl(rate)
    prompt = data.draw(prompts(families["vllm"], **LONG), label="prompt")
    values = draw_seconds(data, len(prompt.video_grid_thw), prompt.second_per_grid_ts)
    kwargs = prompt.kwargs()
    seconds = None if values is None else torch.tensor(values, dtype=dtype)
    as_floats = None if seconds is None else seconds.tolist()  # the same values, as Python floats
    single_frame_images = all(t == 1 for t, _, _ in prompt.image_grid_thw)
    for video_time in ("float32", "float64"):
        family = families["vllm" if video_time == "float32" else "vllm64"]
        got, delta = family.positions(prompt.input_ids, **{**kwargs, "second_per_grid_ts": seconds})
        plain, plain_delta = family.positions(prompt.input_ids, **{**kwargs, "second_per_grid_ts": as_floats})
        context = f"video_time {video_time}, rate {rate}, {dtype}, seconds {as_floats}: {prompt.describe()}"
        np.testing.assert_array_equal(got, plain, err_msg=context)
        assert delta == plain_delta, context
        # and the arithmetic is vLLM's (float64) or SGLang's (float32 seconds, the integer rates)
        if video_time == "float64":
            check_vllm_time(got, prompt, as_floats, rate)
        elif isinstance(rate, int) and dtype != torch.float64 and single_frame_images:
            # float32 holds these values; SGLang scales an image's time too (0 s per step): one frame
            require("sglang")
            expected, expected_delta = peers.sglang_rope_index(
                family,
                torch.tensor([prompt.input_ids]),
                **torch_grids({**kwargs, "second_per_grid_ts": as_floats}),
            )
            np.testing.assert_array_equal(got, expected[:, 0].numpy(), err_msg=f"vs SGLang, {context}")


def check_vllm_time(positions: np.ndarray, prompt: Any, seconds: list[float] | None, rate: float) -> None:
    """Each video's time row is vLLM's ``base + int(k * (seconds * rate))`` (Python floats)."""
    family = qwen2_5_vl(rate)[1]["vllm"]
    ids = np.array(prompt.input_ids)
    starts = np.flatnonzero((ids == family.video_token_id) & (np.r_[-1, ids[:-1]] != family.video_token_id))
    for v, ((t, h, w), start) in enumerate(zip(prompt.video_grid_thw, starts, strict=True)):
        step = (1.0 if seconds is None else seconds[v]) * rate
        plane = h * w // family.spatial_merge_size**2
        base = positions[1, start]  # the h row of the first token is the block's base
        expected = [base + int(k * step) for k in range(t)]
        assert positions[0, start : start + t * plane : plane].tolist() == expected, f"video {v}, {step}"


# -- the patched model, rope_index ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=8)
@given(
    frames=st.integers(2, 120),
    seconds=st.lists(SECOND_VALUES, min_size=2, max_size=2),
)
def test_patched_model_and_rope_index_follow_transformers(dtype, frames, seconds):
    model = tiny_vlms.tiny_model("qwen2_5_vl")
    rows = [
        [[5, 6], tiny_vlms.Video(frames, 1, 1), [7]],
        [[5], tiny_vlms.Image(1, 2), [6], tiny_vlms.Video(3, 2, 1), [8, 9]],
    ]
    inputs = tiny_vlms.processor_output("qwen2_5_vl", rows, pixels=False)
    inputs["second_per_grid_ts"] = torch.tensor(seconds, dtype=dtype)
    context = f"{dtype}, {frames} frames, seconds {inputs['second_per_grid_ts'].tolist()}"
    expected, expected_deltas = forward_positions(model, inputs)
    with patched(model):
        got, deltas = forward_positions(model, inputs)
    real = inputs["attention_mask"].bool()
    assert torch.equal(got[:, real], expected[:, real]), f"patched forward, {context}"
    assert torch.equal(deltas, expected_deltas), (
        f"patched rope_deltas {deltas} != {expected_deltas}, {context}"
    )
    position_ids, rope_deltas = mt.rope_index(model.config, inputs)
    assert torch.equal(position_ids[:, real], expected[:, real]), f"rope_index, {context}"
    assert torch.equal(rope_deltas, expected_deltas), f"rope_index deltas, {context}"


def test_patched_generate_gives_transformers_tokens_with_bfloat16_seconds():
    # 2/25 s per step at 4 tokens per second (the tiny config): frame 28 at 9 in bfloat16, 8 in float32;
    # 1 s per step: frame 257 at 1024 in bfloat16 (its index rounds to 256), 1028 in float32
    model = tiny_vlms.tiny_model("qwen2_5_vl")
    rows = [[[5, 6], tiny_vlms.Video(30, 1, 1), [7]], [[5], tiny_vlms.Video(300, 1, 1), [8, 9]]]
    inputs = tiny_vlms.processor_output("qwen2_5_vl", rows, pixels=False)
    inputs["second_per_grid_ts"] = torch.tensor([2 / 25, 1.0], dtype=torch.bfloat16)
    expected = greedy(model, inputs)
    with patched(model):
        got = greedy(model, inputs)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    # not vacuous: the float32 seconds' positions differ
    bf16, _ = mt.rope_index(model.config, inputs)
    f32, _ = mt.rope_index(
        model.config, {**inputs, "second_per_grid_ts": inputs["second_per_grid_ts"].float()}
    )
    assert not torch.equal(bf16, f32)


def forward_positions(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    """``forward()`` without ``position_ids``: (positions reaching the language model, rope_deltas)."""
    seen: list[Any] = []

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen.append(kwargs.get("position_ids"))

    handle = model.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        handle.remove()
    return seen[0], model.model.rope_deltas


def greedy(model: Any, inputs: dict[str, Any]) -> tuple[Any, Any]:
    out = model.generate(
        **inputs, max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True
    )
    return out.sequences[:, inputs["input_ids"].shape[1] :], torch.stack(out.scores)


@contextmanager
def patched(model: Any) -> Iterator[Any]:
    """The model patched inside the block (compat=None: the installed transformers', "transformers")."""
    assert mt.installed_compat() == "transformers"
    mt.patch(model)
    try:
        yield model
    finally:
        mt.unpatch(model)


# -- the Omni thinkers: float32 in every dtype ---------------------------------------------------------------
@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@settings(max_examples=8)
@given(data=st.data())
def test_omni_thinkers_read_seconds_as_float32_in_every_dtype(model_type, dtype, data):
    config = peers.transformers_omni_config(model_type)
    family = mrope.from_config(config, compat="transformers")
    prompt = data.draw(prompts(family, max_frames=40, max_side=2, max_audios=1), label="prompt")
    values = draw_seconds(data, len(prompt.video_grid_thw), prompt.second_per_grid_ts)
    kwargs = torch_grids(prompt.kwargs())
    kwargs["second_per_grid_ts"] = None if values is None else torch.tensor(values, dtype=dtype)
    ids = torch.tensor([prompt.input_ids])
    expected, expected_deltas = peers.transformers_rope_index(
        family, config, ids, attention_mask=torch.ones_like(ids), **kwargs
    )
    got, delta = family.positions(prompt.input_ids, **kwargs)
    context = f"{model_type}, {dtype}, seconds {values}: {prompt.describe()}"
    np.testing.assert_array_equal(got, expected[:, 0].numpy(), err_msg=context, strict=True)
    assert delta == expected_deltas.reshape(-1)[0].item(), context
