"""``mrope.MultimodalInputs``, the one inputs object of every public call: the object and its fields as
keywords give equal positions, segments, table steps and ``get_rope_index`` output (every family with a
prompt layout, the Omni families' audio, MiniCPM-V 4.7's own inputs, a prompt's items); a field of the
wrong kind, both forms at once, or another type than the object are refused by name."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope import MRopeError, MultimodalInputs
from mrope.families.inputs import PromptItem, RequestInputs
from support.peers import FAMILY_SETUPS, require_module
from support.strategies import Image, build_prompt, prompts, text

require_module("transformers")

from support import minicpmv4_7, peers  # noqa: E402

#: the families whose prompts mrope.prompts lays out (the others' test modules lay out their own)
LAID_OUT = [name for name in FAMILY_SETUPS if peers.peer_setup(name).family("vllm").prompt_layout is not None]


def family_of(name: str) -> mrope.Family:
    return peers.peer_setup(name).family("vllm")


def table_rows(family: mrope.Family, input_ids: list[int], inputs: Any = None, **keywords: Any) -> np.ndarray:
    """A table's step over the prompt and two tokens past it, the request added with ``inputs`` or
    ``keywords``."""
    floats = family.positions(input_ids, inputs, **keywords)[0].dtype == np.float32
    dtype = np.float32 if floats else np.int64
    table = mrope.PositionTable(1, dtype=dtype, num_dims=family.num_dims)
    table.add(0, family, input_ids, inputs, **keywords)
    length = len(input_ids) + 2
    out = np.full((family.num_dims, length), -7, dtype=dtype)
    table.fill(out, np.array([0]), np.array([0]), np.array([length]))
    return out


def assert_same_segments(a: Any, b: Any) -> None:
    table_a, delta_a = a
    table_b, delta_b = b
    assert type(table_a) is type(table_b) and delta_a == delta_b
    data_a = table_a.table().data if hasattr(table_a, "table") else table_a.data
    data_b = table_b.table().data if hasattr(table_b, "table") else table_b.data
    np.testing.assert_array_equal(data_a, data_b, strict=True)


@pytest.mark.parametrize("name", LAID_OUT)
@given(data=st.data())
def test_the_object_and_the_keywords_give_the_same_results(name, data):
    """Positions, segments, a table's step and get_rope_index of one prompt (and of it as a batch of one
    row): equal whether its inputs come as one MultimodalInputs, positionally or as ``inputs=``, or as
    keywords."""
    family = family_of(name)
    omni = peers.FAMILY_SETUPS[name].omni
    aiv = omni and data.draw(st.booleans(), label="use_audio_in_video")
    prompt = data.draw(prompts(family, use_audio_in_video=aiv), label="prompt")
    keywords = prompt.kwargs(data.draw(st.sampled_from(["list", "numpy"]), label="kind"))
    inputs = MultimodalInputs(**keywords)
    ids = prompt.input_ids

    expected = family.positions(ids, **keywords)
    for got in (family.positions(ids, inputs), family.positions(ids, inputs=inputs)):
        np.testing.assert_array_equal(got[0], expected[0], strict=True)
        assert got[1] == expected[1]
    for layout in (False, True):
        assert_same_segments(
            family.segments(ids, inputs, layout=layout), family.segments(ids, layout=layout, **keywords)
        )
    np.testing.assert_array_equal(table_rows(family, ids, inputs), table_rows(family, ids, **keywords))

    batch = np.array([ids])
    by_object = mrope.get_rope_index(family, batch, inputs, attention_mask=np.ones_like(batch))
    by_keywords = mrope.get_rope_index(family, batch, attention_mask=np.ones_like(batch), **keywords)
    for a, b in zip(by_object, by_keywords, strict=True):
        np.testing.assert_array_equal(a, b, strict=True)
    np.testing.assert_array_equal(by_object[0][:, 0], expected[0], strict=True)


@given(data=st.data())
def test_a_familys_own_inputs_ride_in_extra(data):
    """MiniCPM-V 4.7's crop sizes and downsample mode: in ``extra`` or as keywords, the same positions,
    segments and table steps."""
    family = mrope.from_config(minicpmv4_7.config())
    ids, found = data.draw(minicpmv4_7.prompts(), label="prompt")
    keywords = {k: found.get(k) for k in ("target_sizes", "target_sizes_videos")}
    keywords["downsample_mode"] = "16x"
    inputs = MultimodalInputs(extra=keywords)
    assert set(inputs.extra) <= set(keywords) and inputs.given() == tuple(inputs.extra)
    expected = family.positions(ids, **keywords)
    got = family.positions(ids, inputs)
    np.testing.assert_array_equal(got[0], expected[0], strict=True)
    assert got[1] == expected[1]
    assert_same_segments(family.segments(ids, inputs), family.segments(ids, **keywords))
    np.testing.assert_array_equal(table_rows(family, ids, inputs), table_rows(family, ids, **keywords))


def _qwen2_5_prompt() -> tuple[mrope.Family, Any, list[PromptItem]]:
    family = family_of("qwen2_5_vl")
    prompt = build_prompt(family, [text(3), Image(2, 3), text(2), Image(1, 2), text(1)])
    offsets = [i for i, t in enumerate(prompt.input_ids) if t == family.image_token_id]
    starts = [o for o in offsets if o - 1 not in offsets]
    items = [PromptItem("image", o, g) for o, g in zip(starts, prompt.image_grid_thw, strict=True)]
    return family, prompt, items


def test_items_as_the_object_and_as_a_keyword():
    family, prompt, items = _qwen2_5_prompt()
    expected = family.positions(prompt.input_ids, image_grid_thw=prompt.image_grid_thw)
    for got in (
        family.positions(prompt.input_ids, MultimodalInputs(items=items)),
        family.positions(prompt.input_ids, items=items),
        family.positions(prompt.input_ids, MultimodalInputs(items=iter(items))),  # read once
    ):
        np.testing.assert_array_equal(got[0], expected[0], strict=True)
        assert got[1] == expected[1]
    assert_same_segments(
        family.segments(prompt.input_ids, MultimodalInputs(items=items), layout=True),
        family.segments(prompt.input_ids, items=items, layout=True),
    )


def test_no_items_are_a_text_prompt():
    """No items (an engine's text-only request): no blocks, the prompt's text positions, on the rule on
    items and as the arrays (a family without that rule); the prompt is not scanned, as with offsets
    that say no items."""
    family, prompt, _ = _qwen2_5_prompt()
    ids = [7] * 9
    placed = family.from_items(ids, MultimodalInputs(items=[]))
    assert placed.item_rows == [] and placed.ids == ids
    for got in (family.positions(ids, items=[]), family_of("qwen3_vl").positions(ids, items=())):
        np.testing.assert_array_equal(got[0], np.tile(np.arange(9), (3, 1)), strict=False)
        assert got[1] == 0
    as_offsets = family.positions(prompt.input_ids, image_offsets=[], video_offsets=[])  # (not scanned)
    got = family.positions(prompt.input_ids, items=[])
    np.testing.assert_array_equal(got[0], as_offsets[0], strict=True)
    assert got[1] == as_offsets[1]


def test_the_object_pickles_and_copies_as_its_fields():
    family, prompt, items = _qwen2_5_prompt()
    given = MultimodalInputs(image_grid_thw=prompt.image_grid_thw, extra={"target_sizes": [[2, 2]]})
    for made in (pickle.loads(pickle.dumps(given)), copy.deepcopy(given), copy.copy(given)):
        assert type(made) is MultimodalInputs and made.given() == given.given()
        np.testing.assert_array_equal(made.image_grid_thw, given.image_grid_thw, strict=True)
        assert dict(made.extra) == {"target_sizes": [[2, 2]]}
        with pytest.raises(AttributeError):
            made.items = items
    nothing = pickle.loads(pickle.dumps(MultimodalInputs()))
    assert nothing.given() == () and MultimodalInputs().given() == ()  # the shared empty one unchanged
    with_items = pickle.loads(pickle.dumps(MultimodalInputs(items=items)))
    np.testing.assert_array_equal(
        family.positions(prompt.input_ids, with_items)[0], family.positions(prompt.input_ids, items=items)[0]
    )


def test_each_field_is_checked_whatever_comes_with_it():
    """A field of the wrong kind is refused beside a family's own inputs or items (another check path)
    too, and items given as another iterable than a list are read once as keywords as well."""
    family, prompt, items = _qwen2_5_prompt()
    with pytest.raises(MRopeError, match=r"^video_grid_thw must be an array"):
        family.positions(prompt.input_ids, target_sizes=[[2, 2]], video_grid_thw="1, 2, 3")
    with pytest.raises(MRopeError, match=r"^use_audio_in_video must be a bool"):
        MultimodalInputs(items=items, use_audio_in_video="no")
    got = family.positions(prompt.input_ids, items=(item for item in items))
    np.testing.assert_array_equal(got[0], family.positions(prompt.input_ids, items=items)[0], strict=True)
    assert "image_grid_thw=" in repr(MultimodalInputs(image_grid_thw=prompt.image_grid_thw))


def test_from_items_gives_the_checked_inputs_on_both_paths():
    """A family's rule on items gives the placed blocks (``item_rows``), the array path the arrays: one
    type either way, which the prompt's render reads."""
    family, prompt, items = _qwen2_5_prompt()
    placed = family.from_items(prompt.input_ids, MultimodalInputs(items=items))
    assert type(placed) is RequestInputs and placed.item_rows is not None and not len(placed.images)
    frames = family_of("qwen3_vl")  # no rule on items: the same values as arrays
    prompt3 = build_prompt(frames, [text(2), Image(1, 2), text(1)])
    start = prompt3.input_ids.index(frames.image_token_id)
    checked = frames.from_items(
        prompt3.input_ids, MultimodalInputs(items=[PromptItem("image", start, prompt3.image_grid_thw[0])])
    )
    assert type(checked) is RequestInputs and checked.item_rows is None
    np.testing.assert_array_equal(checked.images, prompt3.image_grid_thw, strict=False)
    expected = family.positions(prompt.input_ids, image_grid_thw=prompt.image_grid_thw)
    np.testing.assert_array_equal(family.prompt(placed, segments=False)[0], expected[0], strict=True)


@pytest.mark.parametrize(
    "field",
    [
        "image_grid_thw",
        "video_grid_thw",
        "second_per_grid_ts",
        "image_offsets",
        "video_offsets",
        "audio_seqlens",
        "frame_offsets",
    ],
)
@pytest.mark.parametrize("value", ["1, 2, 3", b"12", {"a": 1}, {1, 2}, True])
def test_an_array_field_of_the_wrong_kind_is_refused_by_name(field, value):
    message = rf"^{field} must be an array, a tensor or a list of numbers, got {type(value).__name__} "
    with pytest.raises(MRopeError, match=message):
        MultimodalInputs(**{field: value})
    family, prompt, _ = _qwen2_5_prompt()
    with pytest.raises(MRopeError, match=message):  # as keywords, through every public call
        family.positions(prompt.input_ids, **{field: value})
    with pytest.raises(MRopeError, match=message):
        mrope.PositionTable(1).add(0, family, prompt.input_ids, **{field: value})
    with pytest.raises(MRopeError, match=message):
        mrope.get_rope_index(family, np.array([prompt.input_ids]), **{field: value})


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"use_audio_in_video": "yes"}, r"^use_audio_in_video must be a bool, got 'yes'$"),
        ({"use_audio_in_video": 1}, r"^use_audio_in_video must be a bool, got 1$"),
        ({"items": "image"}, r"^items must be a list of PromptItem\(modality, offset, grid, seconds\)"),
        ({"items": {"image": 1}}, r"^items must be a list of PromptItem"),
        ({"extra": [("target_sizes", 1)]}, r"^extra must be a mapping of input names to values, got list$"),
        ({"extra": {3: [1]}}, r"^extra's input names must be strings, got 3$"),
        (
            {"extra": {"image_grid_thw": [[1, 2, 2]]}},
            r"^image_grid_thw is a field of MultimodalInputs: give it as image_grid_thw=, not in extra$",
        ),
        (
            {"items": [], "image_grid_thw": [[1, 2, 2]]},
            r"^items replaces the grids, .*: give one or the other, got items and image_grid_thw$",
        ),
        (
            {"items": [], "extra": {"target_sizes": [[2, 2]]}},
            r"^items replaces .*, got items and target_sizes$",
        ),
    ],
)
def test_a_field_of_the_wrong_kind_is_refused_by_name(inputs, message):
    with pytest.raises(MRopeError, match=message):
        MultimodalInputs(**inputs)


def test_the_object_or_the_keywords_not_both_and_nothing_else():
    family, prompt, _ = _qwen2_5_prompt()
    inputs = MultimodalInputs(image_grid_thw=prompt.image_grid_thw)
    both = (
        r"^give the inputs as one MultimodalInputs or as keywords, not both: got inputs and image_grid_thw$"
    )
    with pytest.raises(MRopeError, match=both):
        family.positions(prompt.input_ids, inputs, image_grid_thw=prompt.image_grid_thw)
    with pytest.raises(MRopeError, match=both):
        mrope.PositionTable(1).add(0, family, prompt.input_ids, inputs, image_grid_thw=prompt.image_grid_thw)
    other = r"^inputs must be a mrope.MultimodalInputs \(or its fields given as keywords\), got dict$"
    for call in (
        lambda: family.positions(prompt.input_ids, {"image_grid_thw": prompt.image_grid_thw}),
        lambda: family.segments(prompt.input_ids, {"image_grid_thw": prompt.image_grid_thw}),
        lambda: mrope.get_rope_index(family, np.array([prompt.input_ids]), {"image_grid_thw": [[1, 4, 6]]}),
    ):
        with pytest.raises(MRopeError, match=other):
            call()
    with pytest.raises(MRopeError, match=r"^give a family's own inputs in extra or as keywords, not both"):
        family.positions(prompt.input_ids, extra={"target_sizes": [[2, 2]]}, target_sizes=[[2, 2]])
    with pytest.raises(AttributeError):
        inputs.image_grid_thw = None  # immutable


def test_a_batch_takes_no_offsets_or_items():
    family, prompt, items = _qwen2_5_prompt()
    batch = np.array([prompt.input_ids])
    for given_inputs, named in (
        (MultimodalInputs(image_grid_thw=prompt.image_grid_thw, image_offsets=[3, 11]), "image_offsets"),
        (MultimodalInputs(items=items), "items"),
    ):
        with pytest.raises(MRopeError, match=rf"^get_rope_index takes no {named}: a batch's items are found"):
            mrope.get_rope_index(family, batch, given_inputs)


def test_a_family_refuses_the_inputs_of_another_naming_their_owners():
    """Who takes an input is read from the families' own ``extra_inputs``: every model type that
    states it, none written out by hand."""
    family = family_of("qwen2_vl")
    for name in ("target_sizes", "images_per_sample", "audio_seqlens"):
        owners = sorted(t for t, cls in mrope.families.REGISTRY.items() if name in cls.extra_inputs)
        assert owners
        with pytest.raises(MRopeError, match=rf"^qwen2_vl takes no {name} \(only for {', '.join(owners)}\)$"):
            family.positions([1, 2], **{name: [1]})
    with pytest.raises(MRopeError, match=r"^qwen2_vl takes no colour \(no family does\)$"):
        family.positions([1, 2], colour=[1])
    assert family.positions([1, 2], target_sizes=None)[1] == 0  # None: not given
