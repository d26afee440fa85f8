"""Items given by their placeholder offsets (``image_offsets``, ``video_offsets``, as an engine's
processor records them): the same positions, segments and table rows as when mrope scans the prompt,
the errors that name the item, and the ``video_time`` setting (vLLM's float64 time arithmetic).

The offsets are derived here from the token layout by a plain Python pass (independent of mrope)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.core import COMPATS
from mrope.families import PromptItem
from mrope.serving import PositionTable
from support.offsets import assert_table_row, frame_offsets, item_offsets
from support.peers import require_module
from support.strategies import Image, Video, build_prompt, prompts, text

require_module("transformers")

from support import peers  # noqa: E402

FAMILIES = {  # name -> (model_type, vision overrides)
    "qwen2_vl": ("qwen2_vl", {}),
    "qwen2_5_vl": ("qwen2_5_vl", {"tokens_per_second": 2}),
    "qwen3_vl": ("qwen3_vl", {}),
    "glm4v": ("glm4v", {}),
}


def family_of(name: str, compat: str = "vllm", **settings) -> mrope.Family:
    model_type, vision = FAMILIES[name]
    return mrope.from_config(peers.transformers_config(model_type, **vision), compat=compat, **settings)


def _check_same(family, prompt, image_offsets, video_offsets, context, frames=None):
    expected, expected_delta = family.positions(prompt.input_ids, **prompt.kwargs())
    offsets = {"image_offsets": image_offsets, "video_offsets": video_offsets}
    if frames is not None:
        offsets["frame_offsets"] = frames
    for ids in (prompt.input_ids, np.array(prompt.input_ids, dtype=np.int64)):
        positions, delta = family.positions(ids, **prompt.kwargs("numpy"), **offsets)
        np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"delta {delta} != {expected_delta}: {context}"
        table, delta = family.segments(ids, **prompt.kwargs(), **offsets)
        np.testing.assert_array_equal(mrope.render.render_all(table), expected, err_msg=context, strict=True)
        assert delta == expected_delta, f"segments delta {delta} != {expected_delta}: {context}"
    table = PositionTable(2)
    table.add(1, family, prompt.input_ids, **prompt.kwargs("torch"), **offsets)
    assert_table_row(table, 1, expected, expected_delta, context)


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("name", FAMILIES)
@given(data=st.data())
def test_offsets_give_the_scanned_positions(name, compat, data):
    family = family_of(name, compat)
    prompt = data.draw(prompts(family, max_images=5, max_videos=3), label="prompt")
    image_offsets, video_offsets = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    context = f"{name} compat={compat}, offsets {image_offsets} {video_offsets}: {prompt.describe()}"
    _check_same(family, prompt, image_offsets, video_offsets, context)
    # one modality by offsets, the other scanned
    _check_same(family, prompt, image_offsets, None, context)
    _check_same(family, prompt, None, video_offsets, context)
    if family.video_frames_in_prompt:  # every frame by its offset: nothing is scanned
        frames = frame_offsets(family, prompt.input_ids)
        _check_same(family, prompt, image_offsets, video_offsets, context, frames)
        _check_same(family, prompt, None, video_offsets, context, np.array(frames, dtype=np.int64))


@pytest.mark.parametrize("name", ["qwen3_vl", "glm4v"])
def test_frame_offsets_read_no_other_token(name, monkeypatch):
    """With image, video and frame offsets, a list prompt is read at the items' and frames' first and
    last tokens only: never converted, never scanned."""
    family = family_of(name)
    prompt = build_prompt(family, [text(2), Image(1, 2), Video(4, 1, 2, ((5,), (6,), (7,), (8,))), text(3)])
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    frames = frame_offsets(family, prompt.input_ids)
    expected = family.positions(prompt.input_ids, **prompt.kwargs())

    for module in (mrope.families._base, mrope.families.inputs):
        monkeypatch.setattr(module, "to_int_array", _refuse_prompt(module.to_int_array))
    ids = list(prompt.input_ids)
    got = family.positions(
        ids, **prompt.kwargs("numpy"), image_offsets=images, video_offsets=videos, frame_offsets=frames
    )
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]


def _refuse_prompt(to_int_array):
    def checked(value, *, name, **kwargs):
        assert name != "input_ids", "the prompt was converted"
        return to_int_array(value, name=name, **kwargs)

    return checked


@pytest.mark.parametrize("name", ["qwen3_vl", "glm4v"])
@given(data=st.data(), late=st.booleans())
def test_frames_shorter_than_their_runs_are_refused(name, data, late):
    """A video whose frames' grid is shorter than their runs of placeholders leaves placeholders next to
    its frames: the scan refuses the prompt, and frame offsets (each frame's neighbours checked, O(frames))
    refuse it too, at the run's start or past it (``late``)."""
    family = family_of(name)
    prompt = data.draw(prompts(family, max_images=1, max_videos=2), label="prompt")
    if not prompt.video_grid_thw:
        return
    v = data.draw(st.integers(0, len(prompt.video_grid_thw) - 1), label="video")
    merge = family.spatial_merge_size
    t, h, w = prompt.video_grid_thw[v]
    if h == merge and w == merge:
        return
    grid = [t, h - merge, w] if h > merge else [t, h, w - merge]
    videos = [list(g) for g in prompt.video_grid_thw]
    videos[v] = grid
    images, video_offsets = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    frames = frame_offsets(family, prompt.input_ids)
    first = sum(g[0] for g in prompt.video_grid_thw[:v])
    if late:  # each of its frames' offsets past its run's start
        shift = (h // merge) * (w // merge) - (grid[1] // merge) * (grid[2] // merge)
        frames = [f + shift if first <= k < first + t else f for k, f in enumerate(frames)]
    kwargs = {**prompt.kwargs(), "video_grid_thw": videos}
    with pytest.raises(MRopeError):
        family.positions(prompt.input_ids, **kwargs)  # (the scan)
    with pytest.raises(MRopeError, match=r"frame token \d+ (follows|precedes) it at \d+, in no frame"):
        family.positions(
            prompt.input_ids,
            **kwargs,
            image_offsets=images,
            video_offsets=video_offsets,
            frame_offsets=frames,
        )


@pytest.mark.parametrize("name", ["qwen3_vl", "glm4v"])
def test_bad_frame_offsets_name_the_frame(name):
    family = family_of(name)
    prompt = build_prompt(family, [text(2), Video(2, 1, 1, ((5,), (6,))), text(1)])
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    frames = frame_offsets(family, prompt.input_ids)
    kwargs = {**prompt.kwargs(), "image_offsets": images, "video_offsets": videos}
    for bad, message in (
        ([frames[0]], r"frame_offsets has 1 values but video_grid_thw describes 2 frames"),
        ([frames[0], frames[1] + 1], r"frame 1 of video 0 \(video_grid_thw\[0\] = \(2, 2, 2\)\): "),
        ([frames[0], frames[0] + 1], r"frame 1 of video 0 .* overlaps the frame before it"),
        ([frames[0], len(prompt.input_ids)], r"frame 1 of video 0 .* outside the prompt of"),
        ([frames[1], frames[0]], r"frame_offsets\[1\] = \d+ comes before frame_offsets\[0\] = \d+: .* order"),
    ):
        with pytest.raises(MRopeError, match=message):
            family.positions(prompt.input_ids, **kwargs, frame_offsets=bad)
        table = PositionTable(1)
        with pytest.raises(MRopeError, match=message):
            table.add(0, family, prompt.input_ids, **kwargs, frame_offsets=bad)
        assert 0 not in table
    with pytest.raises(MRopeError, match="frame_offsets needs video_offsets"):
        family.positions(prompt.input_ids, **prompt.kwargs(), frame_offsets=frames)
    one_block = family_of("qwen2_5_vl")
    with pytest.raises(MRopeError, match="qwen2_5_vl takes no frame_offsets"):
        one_block.positions([1, 2], image_offsets=[], video_offsets=[], frame_offsets=[])


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])
def test_many_items_take_the_vectorized_path(name):
    # more blocks than the one-row pass takes, given by offsets
    family = family_of(name)
    parts = [text(3)]
    for k in range(12):
        parts += [Image(1 + k % 3, 2), text(k % 2)]
    parts += [Video(3, 2, 1, ((7,), (), (8,))), text(2)]
    prompt = build_prompt(family, parts, [0.5] if family.uses_second_per_grid_ts else None)
    image_offsets, video_offsets = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    _check_same(family, prompt, image_offsets, video_offsets, f"{name}: {prompt.describe()}")


def test_offsets_in_any_order_pair_with_their_grids():
    family = family_of("qwen2_vl")
    prompt = build_prompt(family, [text(2), Image(1, 2), text(1), Image(3, 1), Video(2, 1, 1)])
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    expected = family.positions(prompt.input_ids, **prompt.kwargs())
    kwargs = prompt.kwargs()
    kwargs["image_grid_thw"] = kwargs["image_grid_thw"][::-1]
    got = family.positions(prompt.input_ids, **kwargs, image_offsets=images[::-1], video_offsets=videos)
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]


def _many_items(family, count: int, video: bool = True):
    """A prompt of ``count`` images (and a video) and its offsets."""
    parts = [text(2)]
    for k in range(count):
        parts += [Image(1 + k % 2, 1 + k % 3), text(1 + k % 2)]
    if video:
        parts += [Video(2, 1, 1, ((5,), (6,))), text(1)]
    prompt = build_prompt(family, parts, [0.5] if video and family.uses_second_per_grid_ts else None)
    return prompt, *item_offsets(family, prompt.input_ids, prompt.video_grid_thw)


@pytest.mark.parametrize("name", FAMILIES)
@given(count=st.integers(1, 14), video=st.booleans(), data=st.data())
def test_offsets_and_items_in_any_order_one_rule_for_every_count(name, count, video, data):
    """Items (each its own grid and seconds) come in any order, whatever their count (below, at and past
    the few-blocks path's 8): the positions of the prompt order. Image offsets with their grids too; a
    frame family's video offsets (its frames found in prompt order, known by their rank) are refused,
    naming the order."""
    family = family_of(name)
    prompt, images, videos = _many_items(family, count, video)
    expected = family.positions(prompt.input_ids, **prompt.kwargs())
    order = data.draw(st.permutations(range(count)), label="image order")
    grids = [prompt.image_grid_thw[k] for k in order]
    kwargs = {**prompt.kwargs(), "image_grid_thw": grids}
    got = family.positions(prompt.input_ids, **kwargs, image_offsets=[images[k] for k in order])
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]
    seconds = prompt.second_per_grid_ts or [None] * len(videos)
    items = [PromptItem("image", images[k], prompt.image_grid_thw[k]) for k in range(count)]
    items += [
        PromptItem("video", o, g, s) for o, g, s in zip(videos, prompt.video_grid_thw, seconds, strict=True)
    ]
    shuffled = data.draw(st.permutations(items), label="items")
    got = family.positions(prompt.input_ids, items=shuffled)
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]
    table = PositionTable(1)
    table.add(0, family, prompt.input_ids, items=shuffled)
    assert_table_row(table, 0, *expected, name)
    if family.video_frames_in_prompt:
        two = build_prompt(family, [text(2), Video(2, 1, 1, ((5,), (6,))), text(1), Video(1, 1, 2), text(1)])
        _, videos = item_offsets(family, two.input_ids, two.video_grid_thw)
        with pytest.raises(MRopeError, match=r"video_offsets\[1\] = \d+ comes before video_offsets\[0\]"):
            family.positions(two.input_ids, **two.kwargs(), video_offsets=videos[::-1])


def test_overlapping_offsets_are_named_as_overlapping_at_any_count():
    family = family_of("qwen2_vl")
    for count in (3, 12):
        prompt, images, _ = _many_items(family, count)
        bad = list(images)
        bad[count - 1] = bad[count - 2] + 1  # the last image starts inside the one before it
        with pytest.raises(MRopeError, match=rf"image {count - 1} .*starts inside the item before it"):
            family.positions(prompt.input_ids, **prompt.kwargs(), image_offsets=bad)


def test_empty_offsets_mean_no_items_and_no_scan():
    family = family_of("qwen2_5_vl")
    stray = [5, family.image_token_id, 6]  # a placeholder id no grid describes
    with pytest.raises(MRopeError, match="have no grid"):
        family.positions(stray)  # scanned
    positions, delta = family.positions(stray, image_offsets=[], video_offsets=[])  # not scanned
    np.testing.assert_array_equal(positions, np.broadcast_to(np.arange(3), (3, 3)))
    assert delta == 0


# -- errors -------------------------------------------------------------------------------------------
def _qwen2_5():
    family = family_of("qwen2_5_vl")
    prompt = build_prompt(family, [text(2), Image(2, 2), text(1), Video(2, 1, 2), text(1)], [0.5])
    return family, prompt, *item_offsets(family, prompt.input_ids, prompt.video_grid_thw)


@pytest.mark.parametrize(
    ("images", "videos", "message"),
    [
        ([3, 4], "same", r"image_offsets has 2 values but image_grid_thw describes 1 images"),
        ([], "same", r"image_offsets has 0 values but image_grid_thw describes 1 images"),
        ([4], "same", r"image 0 \(image_grid_thw\[0\] = \(1, 4, 4\)\): image_offsets\[0\] = 4 .* holds"),
        (
            [-1],
            "same",
            r"image 0 .*image_offsets\[0\] = -1 puts its 4 placeholder tokens at \[-1, 3\), outside",
        ),
        ([20], "same", r"outside the prompt of 16 tokens"),
        (
            "same",
            [3],
            r"video 0 \(video_grid_thw\[0\] = \(2, 2, 4\)\): video_offsets\[0\] = 3 .* not the video",
        ),
    ],
)
def test_bad_offsets_name_the_item(images, videos, message):
    family, prompt, image_offsets, video_offsets = _qwen2_5()
    images = image_offsets if images == "same" else images
    videos = video_offsets if videos == "same" else videos
    with pytest.raises(MRopeError, match=message):
        family.positions(prompt.input_ids, **prompt.kwargs(), image_offsets=images, video_offsets=videos)
    table = PositionTable(1)
    with pytest.raises(MRopeError, match=message):
        table.add(0, family, prompt.input_ids, **prompt.kwargs(), image_offsets=images, video_offsets=videos)
    assert 0 not in table


def test_overlapping_items_are_refused():
    family = family_of("qwen2_vl")
    ids = [1, family.image_token_id, family.image_token_id, family.image_token_id, 2]
    with pytest.raises(MRopeError, match=r"image 1 \(image_offsets\[1\] = 2\) starts inside the item before"):
        family.positions(ids, image_grid_thw=[[1, 2, 4], [1, 2, 2]], image_offsets=[1, 2], video_offsets=[])


@pytest.mark.parametrize("offsets", [[1.0], [True], [[1]]])
def test_offsets_must_be_a_list_of_ints(offsets):
    family = family_of("qwen2_vl")
    with pytest.raises(MRopeError, match="image_offsets"):
        family.positions([1, family.image_token_id], image_grid_thw=[[1, 2, 2]], image_offsets=offsets)


@pytest.mark.parametrize("name", ["qwen3_vl", "glm4v"])
def test_frame_families_check_video_offsets_against_the_frames(name):
    family = family_of(name)
    prompt = build_prompt(family, [text(2), Video(2, 1, 1, ((5,), (6,))), text(1), Video(1, 1, 1), text(1)])
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    first_frame = prompt.input_ids.index(
        family.video_token_id if name == "qwen3_vl" else family.image_token_id
    )
    bad = [first_frame + 1, videos[1]]
    with pytest.raises(
        MRopeError, match=r"video 0 \(video_grid_thw\[0\] = \(2, 2, 2\)\): its frames were found"
    ):
        family.positions(prompt.input_ids, **prompt.kwargs(), image_offsets=images, video_offsets=bad)
    swapped = [videos[1], videos[0]]  # (frames are found in prompt order: the order is refused, by name)
    with pytest.raises(MRopeError, match=r"video_offsets\[1\] = \d+ comes before video_offsets\[0\]"):
        family.positions(prompt.input_ids, **prompt.kwargs(), image_offsets=images, video_offsets=swapped)


def test_glm_image_offsets_are_checked_against_the_scan():
    family = family_of("glm4v")
    prompt = build_prompt(family, [text(2), Image(1, 1), Video(1, 1, 1), text(1)])
    images, videos = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    with pytest.raises(
        MRopeError, match=r"image 0 \(image_grid_thw\[0\] = \(1, 2, 2\)\) was found at 3, but"
    ):
        family.positions(
            prompt.input_ids, **prompt.kwargs(), image_offsets=[images[0] + 1], video_offsets=videos
        )


def test_omni_families_take_no_offsets():
    config = peers.transformers_omni_config("qwen2_5_omni")
    family = mrope.from_config(config)
    with pytest.raises(MRopeError, match="locates its items in input_ids: it takes no image_offsets"):
        family.positions([1, 2], image_offsets=[], video_offsets=[])


# -- video_time --------------------------------------------------------------------------------------
def _video_prompt(family, frames: int, seconds: float):
    return build_prompt(family, [text(3), Video(frames, 1, 1), text(2)], [seconds])


def test_video_time_float64_is_vllms_arithmetic():
    # fps 25, temporal patch 2: second_per_grid_ts float32(0.08); frame 25 at time index 3 (vLLM,
    # float64) or 4 (transformers and SGLang, float32)
    f32, f64 = family_of("qwen2_5_vl"), family_of("qwen2_5_vl", video_time="float64")
    prompt = _video_prompt(f32, 30, 2 / 25)
    seconds = float(np.float32(2 / 25))
    t32, t64 = (
        f32.positions(prompt.input_ids, **prompt.kwargs("torch")),
        f64.positions(prompt.input_ids, **prompt.kwargs("torch")),
    )
    block = slice(4, 4 + 30)
    expected = [4 + int(k * (seconds * 2)) for k in range(30)]  # Python floats: float64
    assert t64[0][0, block].tolist() == expected
    assert t64[0][0, 4 + 25] == 4 + 3 and t32[0][0, 4 + 25] == 4 + 4


@pytest.mark.parametrize("compat", COMPATS)
@given(
    frames=st.integers(1, 80),
    seconds=st.one_of(
        st.sampled_from([1 / 12, 2 / 25, 2 / 24, 2 / 30, 2 / 29.97, 0.5]), st.floats(0, 4, width=32)
    ),
)
def test_video_time_float64_matches_a_float64_reference(compat, frames, seconds):
    # float64 time: video_time="float64" under compat="vllm"; float64 seconds under "transformers" (which
    # computes in the seconds' dtype and does not read video_time)
    family = family_of("qwen2_5_vl", compat, video_time="float64")
    prompt = _video_prompt(family, frames, seconds)
    kwargs = prompt.kwargs("numpy")
    if compat == "transformers":
        kwargs["second_per_grid_ts"] = kwargs["second_per_grid_ts"].astype(np.float64)
    step = float(np.float32(seconds)) * family.tokens_per_second
    t = [int(k * step) for k in range(frames)]
    positions, delta = family.positions(prompt.input_ids, **kwargs)
    assert positions[0, 4 : 4 + frames].tolist() == [4 + x for x in t]
    table, table_delta = family.segments(prompt.input_ids, **kwargs)
    np.testing.assert_array_equal(mrope.render.render_all(table), positions)
    assert table_delta == delta
    # the batch API follows the same setting
    ids = np.array([prompt.input_ids])
    batch, deltas = mrope.get_rope_index(family, ids, **kwargs)
    np.testing.assert_array_equal(batch[:, 0], positions)


def test_video_time_is_kept_and_checked():
    family = family_of("qwen2_5_vl", video_time="float64")
    assert family.with_compat("transformers").video_time == "float64"
    assert "video_time='float64'" in repr(family)
    assert family_of("qwen3_vl", video_time="float64").video_time == "float64"  # every family takes it
    with pytest.raises(MRopeError, match=r"video_time must be one of \('float32', 'float64'\)"):
        family_of("qwen2_5_vl", video_time="float16")
    # the Omni thinkers: vLLM's rule under compat "vllm" and video_time "float64" (see test_omni.py)
    omni = mrope.from_config(peers.transformers_omni_config("qwen3_omni_moe"), video_time="float64")
    assert omni.vllm_rule and not omni.with_compat("transformers").vllm_rule
