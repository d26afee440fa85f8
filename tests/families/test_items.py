"""One prompt's items as :class:`mrope.families.PromptItem` values (``items=``): transformers' positions,
the same positions, segments and table rows as the array inputs (grids, seconds, offsets), and, for
bad items, the same error as those inputs give. Families with a rule on items (Qwen2-VL, Qwen2.5-VL,
PaddleOCR-VL) check and place them on Python values; the others convert them to arrays."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.core import COMPATS
from mrope.families import Qwen2VL
from mrope.families.inputs import PromptItem, items_as_inputs
from mrope.serving import PositionTable
from support.backends import BACKENDS, backend
from support.offsets import assert_table_row, item_offsets
from support.peers import as_numpy, require_module, transformers_rope_index
from support.strategies import Image, Video, build_prompt, prompts, text

require_module("transformers")

import torch  # noqa: E402

from support import peers  # noqa: E402

FAMILIES = {  # name -> (model_type, vision overrides)
    "qwen2_vl": ("qwen2_vl", {}),
    "qwen2_5_vl": ("qwen2_5_vl", {"tokens_per_second": 2}),
    "qwen3_vl": ("qwen3_vl", {}),  # no rule on items: the array path
    "glm4v": ("glm4v", {}),
}


def family_of(name: str, compat: str = "vllm") -> mrope.Family:
    model_type, vision = FAMILIES[name]
    return mrope.from_config(peers.transformers_config(model_type, **vision), compat=compat)


def items_of(family, prompt) -> list[PromptItem]:
    """The prompt's items, in prompt order, from its grids and the offsets a processor records."""
    image_offsets, video_offsets = item_offsets(family, prompt.input_ids, prompt.video_grid_thw)
    seconds = prompt.second_per_grid_ts or [None] * len(prompt.video_grid_thw)
    items = [PromptItem("image", o, g) for o, g in zip(image_offsets, prompt.image_grid_thw, strict=True)]
    items += [
        PromptItem("video", o, g, s)
        for o, g, s in zip(video_offsets, prompt.video_grid_thw, seconds, strict=True)
    ]
    return sorted(items, key=lambda item: item.offset)


def outcome(call):
    """The call's result, or the message of the MRopeError it raised."""
    try:
        return call()
    except MRopeError as error:
        return str(error)


def test_the_families_with_a_rule_on_items():
    with_rule = {t for t, cls in mrope.families.REGISTRY.items() if cls.rule_on_items}
    assert with_rule == {"qwen2_vl", "qwen2_5_vl", "paddleocr_vl"}


def test_a_subclass_overriding_a_hook_takes_the_array_path():
    class Unchanged(Qwen2VL):
        pass

    class OwnChecks(Qwen2VL):
        def check_vision_inputs(self, *args):  # (a rule the item path does not know)
            raise MRopeError("own check")

    assert Unchanged.rule_on_items and not OwnChecks.rule_on_items
    family = OwnChecks("x", image_token_id=5, video_token_id=6, spatial_merge_size=2)
    with pytest.raises(MRopeError, match="own check"):
        family.positions([5] * 4, items=[PromptItem("image", 0, (1, 4, 4))])


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl"])
@given(data=st.data())
def test_items_give_transformers_positions(name, data):
    family = family_of(name, "transformers")
    prompt = data.draw(prompts(family, max_images=3, max_videos=2), label="prompt")
    if prompt.second_per_grid_ts is not None:  # items carry Python floats: float32 values, as a list
        seconds = [float(np.float32(s)) for s in prompt.second_per_grid_ts]
        prompt = dataclasses.replace(prompt, second_per_grid_ts=seconds)
    model_type, vision = FAMILIES[name]
    config = peers.transformers_config(model_type, **vision)
    ids = torch.tensor([prompt.input_ids])
    expected, expected_delta = transformers_rope_index(
        family, config, ids, **peers.torch_grids(prompt.kwargs())
    )
    positions, delta = family.positions(prompt.input_ids, items=items_of(family, prompt))
    np.testing.assert_array_equal(positions, as_numpy(expected)[:, 0], err_msg=prompt.describe())
    assert delta == int(expected_delta[0, 0])


@pytest.mark.parametrize("compat", COMPATS)
@pytest.mark.parametrize("name", FAMILIES)
@given(data=st.data())
def test_items_are_the_array_inputs(name, compat, data):
    family = family_of(name, compat)
    prompt = data.draw(prompts(family, max_images=3, max_videos=2), label="prompt")
    items = items_of(family, prompt)
    arrays = items_as_inputs(items)
    context = f"{name} {compat}: {prompt.describe()}"
    expected, expected_delta = family.positions(prompt.input_ids, **arrays)
    for ids in (prompt.input_ids, np.array(prompt.input_ids)):
        positions, delta = family.positions(ids, items=items)
        np.testing.assert_array_equal(positions, expected, err_msg=context)
        assert delta == expected_delta, context
        table, delta = family.segments(ids, items=items)
        np.testing.assert_array_equal(mrope.render.render_all(table), expected, err_msg=context)
        assert delta == expected_delta, context
    table = PositionTable(2)
    table.add(1, family, prompt.input_ids, items=items)
    assert_table_row(table, 1, expected, expected_delta, context)


def _corrupt(items: list[PromptItem], what: str, i: int, value: int | float) -> list[PromptItem]:
    """``items`` with item ``i``'s offset moved, a grid value changed, or its seconds replaced."""
    item = items[i]
    if what == "offset":
        item = item._replace(offset=item.offset + int(value))
    elif what == "seconds":
        item = item._replace(seconds=value)
    else:
        grid = list(item.grid)
        grid["thw".index(what)] += int(value)
        item = item._replace(grid=grid)
    return items[:i] + [item] + items[i + 1 :]


@pytest.mark.parametrize("name", FAMILIES)
@given(
    data=st.data(),
    what=st.sampled_from(["offset", "t", "h", "w", "seconds"]),
    value=st.sampled_from([-3, -2, -1, 1, 2, 1e12, math.nan, math.inf, 0.0]),
)
def test_bad_items_raise_what_the_array_inputs_raise(name, data, what, value):
    family = family_of(name)
    prompt = data.draw(prompts(family, max_images=2, max_videos=2), label="prompt")
    items = items_of(family, prompt)
    if not items:
        return
    i = data.draw(st.integers(0, len(items) - 1), label="item")
    if (what == "seconds") != isinstance(value, float) or (
        what == "seconds" and items[i].modality == "image"
    ):
        return  # (seconds are floats of videos; the rest integers)
    bad = _corrupt(items, what, i, value)
    expected = outcome(lambda: family.positions(prompt.input_ids, **items_as_inputs(bad)))
    got = outcome(lambda: family.positions(prompt.input_ids, items=bad))
    if isinstance(expected, str):
        assert got == expected
    else:
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]
    table = PositionTable(1)
    table.add(0, family, [1, 2, 3])
    if isinstance(expected, str):  # a refused replacement leaves the request before it
        with pytest.raises(MRopeError):
            table.add(0, family, prompt.input_ids, items=bad, replace=True)
        assert table.prompt_length(0) == 3


def _as_arrays(items: list[PromptItem]) -> dict:
    """The array inputs that say what ``items`` say, built here (not by mrope's own conversion)."""
    images = [i for i in items if i.modality == "image"]
    videos = [i for i in items if i.modality == "video"]
    seconds = [v.seconds for v in videos]
    return {
        "image_grid_thw": [list(i.grid) for i in images] or None,
        "video_grid_thw": [list(v.grid) for v in videos] or None,
        "second_per_grid_ts": None if seconds.count(None) == len(seconds) else seconds,
        "image_offsets": [i.offset for i in images],
        "video_offsets": [v.offset for v in videos],
    }


@pytest.mark.parametrize("name", FAMILIES)
@given(
    data=st.data(),
    what=st.sampled_from(["t", "h", "w"]),
    value=st.sampled_from([2**63, 2**64, -(2**64), 2**63 + 7]),
)
def test_grid_values_beyond_int64_are_named_as_the_arrays_name_them(name, data, what, value):
    """A grid value past int64 in ``items=`` raises the array inputs' MRopeError (naming the value: "does
    not fit in int64"), on a family's rule on items too (never an OverflowError), and a table refusing it
    is unchanged."""
    family = family_of(name)
    prompt = data.draw(prompts(family, max_images=2, max_videos=2), label="prompt")
    items = items_of(family, prompt)
    if not items:
        return
    bad = _corrupt(items, what, data.draw(st.integers(0, len(items) - 1), label="item"), value)
    expected = outcome(lambda: family.positions(prompt.input_ids, **_as_arrays(bad)))
    assert isinstance(expected, str) and "does not fit in int64" in expected
    assert outcome(lambda: family.positions(prompt.input_ids, items=bad)) == expected
    assert outcome(lambda: family.segments(prompt.input_ids, items=bad)) == expected
    table = PositionTable(1)
    table.add(0, family, [1, 2, 3])
    with pytest.raises(MRopeError, match="does not fit in int64"):
        table.add(0, family, prompt.input_ids, items=bad, replace=True)
    assert table.prompt_length(0) == 3


def _shrunk(grid, merge: int) -> list[int] | None:
    """``grid`` (T, H, W) with one fewer step on an axis that has room (None: a single merged token)."""
    t, h, w = grid
    if t > 1:
        return [t - 1, h, w]
    if h > merge:
        return [t, h - merge, w]
    if w > merge:
        return [t, h, w - merge]
    return None


def _tokens(grid, merge: int) -> int:
    t, h, w = grid
    return t * (h // merge) * (w // merge)


@pytest.mark.parametrize("name", FAMILIES)
@given(data=st.data(), edit=st.sampled_from(["shrink", "shrink late", "drop"]), markers=st.booleans())
def test_placeholders_left_next_to_an_item_are_refused(name, data, edit, markers):
    """An item whose grid is shorter than its run of placeholders (its offset at the run's start, or
    past it), or a run left out of the items next to an item of its kind, leaves placeholders that
    would get text positions: the scan refuses the prompt, and so do items and offsets (the tokens next
    to each item checked: O(items), no scan), with the table unchanged. (A run left out that touches no
    item is found only by a scan, which items and offsets spare.)"""
    family = family_of(name)
    markers = (
        markers or not family.prompt_layout.markers_optional
    )  # (only the whole layout has a markerless form)
    prompt = data.draw(prompts(family, max_images=3, max_videos=2, markers=markers), label="prompt")
    items = items_of(family, prompt)
    merge = family.spatial_merge_size
    # one-block items (a frame family's videos are frames: test_frames_left_over_are_refused)
    kinds = [k for k, i in enumerate(items) if not (family.video_frames_in_prompt and i.modality == "video")]
    if not kinds:
        return
    k = data.draw(st.sampled_from(kinds), label="item")
    item = items[k]
    if edit == "drop":
        bad = items[:k] + items[k + 1 :]
        start, end = item.offset, item.offset + _tokens(item.grid, merge)
        same = [i for i in bad if i.modality == item.modality]
        if not any(i.offset == end or i.offset + _tokens(i.grid, merge) == start for i in same):
            return  # (touches no item of its kind)
    else:
        grid = _shrunk(item.grid, merge)
        if grid is None:
            return
        late = _tokens(item.grid, merge) - _tokens(grid, merge) if edit == "shrink late" else 0
        bad = items[:k] + [item._replace(grid=grid, offset=item.offset + late)] + items[k + 1 :]
    arrays = _as_arrays(bad)
    scanned = {key: arrays[key] for key in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")}
    with pytest.raises(MRopeError):
        family.positions(prompt.input_ids, **scanned)
    leftover = r"(follows|precedes) it at \d+, (starting|ending) no (image|video)"
    if name == "glm4v" and prompt.video_grid_thw:  # GLM-4.1V beside videos: its images are found by a scan
        leftover = None
    with pytest.raises(MRopeError, match=leftover):
        family.positions(prompt.input_ids, items=bad)
    if not family.video_frames_in_prompt:  # (a frame family's video offsets: its frames are scanned)
        with pytest.raises(MRopeError, match=leftover):
            family.positions(prompt.input_ids, **arrays)
    table = PositionTable(1)
    table.add(0, family, [1, 2, 3])
    with pytest.raises(MRopeError, match=leftover):
        table.add(0, family, prompt.input_ids, items=bad, replace=True)
    assert table.prompt_length(0) == 3


def test_a_run_left_out_next_to_an_item_is_refused():
    """The issue's cases: an image whose grid is shorter than its run, and a run of placeholders next to
    an item that starts no item (an image, or a video, left out of ``items``)."""
    family = family_of("qwen2_5_vl")
    image, video = family.image_token_id, family.video_token_id
    ids = [1, 2, *[image] * 8, 3]
    for call in (
        lambda: family.positions(ids, items=[PromptItem("image", 2, (1, 4, 4))]),
        lambda: family.positions(ids, image_grid_thw=[[1, 4, 4]], image_offsets=[2], video_offsets=[]),
        lambda: family.positions(ids, items=[PromptItem("image", 6, (1, 4, 4))]),
    ):
        with pytest.raises(MRopeError, match=r"image token 151655 (follows|precedes) it at (6|5)"):
            call()
    with pytest.raises(MRopeError, match="have no grid"):
        family.positions(ids, image_grid_thw=[[1, 4, 4]])  # (the scan)
    ids = [1, *[video] * 8, 2]  # two videos of 4 placeholders back to back, the second left out
    with pytest.raises(MRopeError, match=r"video token 151656 follows it at 5, starting no video"):
        family.positions(ids, items=[PromptItem("video", 1, (1, 4, 4), 1.0)])
    got = family.positions(ids, items=[PromptItem("video", o, (1, 4, 4), 1.0) for o in (5, 1)])
    assert got[1] == family.positions(ids, video_grid_thw=[[1, 4, 4]] * 2, second_per_grid_ts=[1.0] * 2)[1]


def _qwen2_5_prompt():
    family = family_of("qwen2_5_vl")
    prompt = build_prompt(family, [text(2), Image(2, 2), text(1), Video(2, 1, 2), text(1)], [0.5])
    return family, prompt, items_of(family, prompt)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (("video", 3), r"items\[1\] must be a PromptItem\(modality, offset, grid, seconds\)"),
        (PromptItem("audio", 3, (1, 2, 2)), r"items\[1\] has modality 'audio': 'image' or 'video'"),
        (PromptItem("image", 3, (1, 2, 2), 0.5), r"items\[1\] is an image with seconds 0.5"),
        (PromptItem("video", 3.0, (2, 2, 4)), r"items\[1\].offset"),
        (PromptItem("video", 3, (2, 2.5, 4)), r"items\[1\].grid"),
        (PromptItem("video", 3, (2, 2)), r"items\[1\].grid must be \(T, H, W\), got \(2, 2\)"),
        (PromptItem("video", 3, (2, 2, 4), "1"), r"seconds of video 0 must be a number, got '1'"),
    ],
)
def test_malformed_items_are_named(item, message):
    family, prompt, items = _qwen2_5_prompt()
    bad = [items[0], item]
    with pytest.raises(MRopeError, match=message):
        family.positions(prompt.input_ids, items=bad)
    with pytest.raises(MRopeError, match=message):
        family_of("qwen3_vl").positions(prompt.input_ids, items=bad)  # (the array path's check too)


@pytest.mark.parametrize("name", ["qwen2_5_vl", "qwen3_vl"])  # a rule on items, and the array path
def test_items_of_any_iterable_and_others_named(name):
    """A generator, an iterator or a tuple gives what the list gives (a generator raised a bare
    TypeError); what is no sequence of items in order (an int, a string, a mapping, a set) is named."""
    family = family_of(name)
    seconds = [0.5] if family.uses_second_per_grid_ts else None
    prompt = build_prompt(family, [text(2), Image(2, 2), text(1), Video(2, 1, 2), text(1)], seconds)
    items = items_of(family, prompt)
    expected = family.positions(prompt.input_ids, items=items)
    for kind in (iter, lambda items: (item for item in items), tuple):
        for call in (
            lambda kind=kind: family.positions(prompt.input_ids, items=kind(items)),
            lambda kind=kind: family.segments(prompt.input_ids, items=kind(items)),
        ):
            got = call()
            np.testing.assert_array_equal(
                got[0] if isinstance(got[0], np.ndarray) else mrope.render.render_all(got[0]), expected[0]
            )
            assert got[1] == expected[1]
    table = PositionTable(1)
    table.add(0, family, prompt.input_ids, items=(item for item in items))
    assert_table_row(table, 0, *expected, name)
    message = r"items must be a list of PromptItem\(modality, offset, grid, seconds\) in prompt order, got "
    for bad, kind in ((5, "int 5"), ("ab", "str 'ab'"), ({"a": 1}, "dict"), ({1, 2}, "set")):
        with pytest.raises(MRopeError, match=message + kind):
            family.positions(prompt.input_ids, items=bad)
        with pytest.raises(MRopeError, match=message + kind):
            table.add(0, family, prompt.input_ids, items=bad, replace=True)
        assert_table_row(table, 0, *expected, f"{name}: a refused replacement leaves the request")


def test_items_take_numpy_and_tensor_values():
    family, prompt, items = _qwen2_5_prompt()
    expected = family.positions(prompt.input_ids, items=items)
    converted = [
        PromptItem(
            i.modality,
            np.int64(i.offset),
            torch.tensor(i.grid),
            None if i.seconds is None else np.float32(i.seconds),
        )
        for i in items
    ]
    got = family.positions(prompt.input_ids, items=converted)
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1] == expected[1]


def test_items_replace_the_array_inputs():
    family, prompt, items = _qwen2_5_prompt()
    with pytest.raises(MRopeError, match="items replaces the grids"):
        family.positions(prompt.input_ids, items=items, image_grid_thw=prompt.image_grid_thw)
    with pytest.raises(MRopeError, match="items replaces the grids"):
        PositionTable(1).add(0, family, prompt.input_ids, items=items, video_offsets=[0])


def test_seconds_to_a_family_that_does_not_scale_time():
    family = family_of("qwen2_vl")
    prompt = build_prompt(family, [text(2), Video(2, 2, 2), text(1)])
    (video,) = items_of(family, prompt)
    with pytest.raises(MRopeError, match="qwen2_vl does not scale video time"):
        family.positions(prompt.input_ids, items=[video._replace(seconds=0.5)])


@pytest.mark.parametrize("path", BACKENDS)
@pytest.mark.parametrize("name", FAMILIES)
@given(data=st.data())
def test_image_positions_found_by_a_scan_are_the_arrays(name, path, data):
    """:func:`find_image_positions` (SGLang's prompts: grids, no offsets): the positions and delta of the
    array inputs, for a family with a rule on items and a prompt of images only (of one frame: the
    compiled pass where numba is loaded; of several: the rows at the offsets found); None otherwise
    (the arrays serve). Under either backend."""
    family = family_of(name)
    prompt = data.draw(prompts(family, max_images=3, max_videos=1), label="prompt")
    ids = np.array(prompt.input_ids, dtype=np.int64)
    with backend(path):
        found = mrope.families.find_image_positions(family, ids, [list(g) for g in prompt.image_grid_thw])
    if not family.rule_on_items or prompt.video_grid_thw or not prompt.image_grid_thw:
        assert found is None
        return
    assert found is not None, prompt.describe()
    expected = family.positions(ids, image_grid_thw=prompt.image_grid_thw)
    np.testing.assert_array_equal(found[0], expected[0], err_msg=prompt.describe())
    assert found[1] == expected[1]


@pytest.mark.parametrize("path", BACKENDS)
def test_image_positions_are_not_found_where_the_placeholders_or_grids_do_not_fit(path):
    family = family_of("qwen2_vl")
    image, video = family.image_token_id, family.video_token_id
    grid = [[1, 4, 4]]  # 4 placeholders
    find = mrope.families.find_image_positions
    for ids, grids in (
        ([1, image, image, image, image, 2], grid),
        ([image] * 6, [[1, 4, 4], [1, 2, 4]]),  # two images back to back: one run of placeholders
        ([1] + [image] * 8 + [2], [[2, 4, 4]]),  # an image of two frames
    ):
        expected = family.positions(ids, image_grid_thw=grids)
        for dtype in (np.int64, np.int32):  # (ids other than int64: numba's dispatcher)
            with backend(path):
                positions, delta = find(family, np.array(ids, dtype=dtype), grids)
            np.testing.assert_array_equal(positions, expected[0])
            assert delta == expected[1]
    for ids, grids in (
        ([1, image, image, image, 2], grid),  # too few
        ([1, image, image, image, image, image], grid),  # too many
        ([1, image, image, 2, image, image], grid),  # not consecutive
        ([1, image, image, image, image, video], grid),  # a video placeholder without its grid
        ([1, image, image, image, image, 2], [[1, 4, 3]]),  # W not divisible by the merge size
        ([1, image, image, image, image, 2], [[0, 4, 4]]),  # an empty grid
        ([1, image, image, image, image, 2], [[1, 4.0, 4]]),  # not ints
        ([1, image, image, image, image, 2], [[1, 4]]),  # not (T, H, W)
        ([1, image, image, image, image, 2], [[1, 2**40, 2**40]]),  # more placeholders than tokens
        ([1, image, image, image, image, 2], [[1, 2**64, 2]]),  # beyond int64
    ):
        with backend(path):
            assert find(family, np.array(ids), grids) is None, (ids, grids)
        with pytest.raises(MRopeError):
            family.positions(ids, image_grid_thw=grids)  # (what the arrays then say)
    with backend(path):
        assert find(family, np.array([1.0, image, image, image, image, 2.0]), grid) is None  # float ids
