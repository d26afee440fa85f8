"""MiniCPM-V 4.7 (``mrope.families.minicpmv4_7``) against transformers 5.24's own ``get_rope_index`` (unbound
on its config) on prompts in its processor's layout: images with and without slices (rows of slices
joined by a newline, slices of their own sizes, ragged rows), videos of several frames, text between
them (newlines, image ids, nothing); padded batches; both downsample modes; the errors; and the serving
table, which holds the segments recovered from its positions."""

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.serving import PositionTable
from support.engine import chunked_fill
from support.minicpmv4_7 import (
    IDS,
    IMAGE,
    IMAGE_END,
    IMAGE_START,
    NEWLINE,
    SLICE_END,
    SLICE_START,
    VIDEO,
    config,
    prompts,
)
from support.peers import as_numpy, require, transformers_minicpmv4_7_rope_index


@pytest.fixture(scope="module")
def minicpm():
    """(config, family) with the markers of ``support.minicpmv4_7``, downsample_mode 16x."""
    require("torch", "transformers")
    cfg = config()
    return cfg, mrope.from_config(cfg)


def torch_sizes(found: dict[str, Any]) -> dict:
    """The target sizes of ``found`` as the processor gives them (int32 tensors)."""
    import torch

    names = ("target_sizes", "target_sizes_videos")
    return {k: None if found.get(k) is None else torch.tensor(found[k], dtype=torch.int32) for k in names}


def sizes_of(found: dict[str, Any]) -> dict[str, Any]:
    """The crops' sizes of ``found``, as ``family.positions`` takes them."""
    return {k: found.get(k) for k in ("target_sizes", "target_sizes_videos")}


def check_prompt(cfg, family, ids, found, mode=None) -> None:
    import torch

    expected, deltas = transformers_minicpmv4_7_rope_index(
        family, cfg, torch.tensor([ids]), downsample_mode=mode, **torch_sizes(found)
    )
    positions, delta = family.positions(ids, downsample_mode=mode, **sizes_of(found))
    np.testing.assert_array_equal(positions, as_numpy(expected)[:, 0], strict=True)
    assert delta == as_numpy(deltas)[0, 0] == positions.max() + 1 - len(ids)


@given(prompt=prompts())
def test_prompts_match_transformers(minicpm, prompt):
    check_prompt(*minicpm, *prompt)


@settings(max_examples=50)
@given(prompt=prompts(merge=2))
def test_downsample_mode_4x_per_call_and_from_the_config_match_transformers(minicpm, prompt):
    cfg, family = minicpm
    check_prompt(cfg, family, *prompt, mode="4x")
    cfg4 = config(downsample_mode="4x")
    family4 = mrope.from_config(cfg4)
    assert family4.spatial_merge_size == 2
    check_prompt(cfg4, family4, *prompt)


@settings(max_examples=60)
@given(data=st.data())
def test_padded_batches_match_transformers(minicpm, data):
    import torch

    cfg, family = minicpm
    rows = data.draw(st.lists(prompts(max_items=2), min_size=1, max_size=3), label="prompts")
    length = max(len(ids) for ids, _ in rows) + data.draw(st.integers(0, 2), label="extra padding")
    left = data.draw(st.booleans(), label="left padding")
    ids = torch.zeros((len(rows), length), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, (row, _) in enumerate(rows):
        span = slice(length - len(row), length) if left else slice(0, len(row))
        ids[r, span] = torch.tensor(row)
        mask[r, span] = 1
    found = {
        k: sum((f[k] or [] for _, f in rows), []) or None for k in ("target_sizes", "target_sizes_videos")
    }
    expected, expected_deltas = transformers_minicpmv4_7_rope_index(
        family, cfg, ids, attention_mask=mask, **torch_sizes(found)
    )
    positions, deltas = mrope.get_rope_index(family, ids, attention_mask=mask, **torch_sizes(found))
    assert positions.dtype == torch.long and deltas.shape == (len(rows), 1)
    np.testing.assert_array_equal(as_numpy(positions), as_numpy(expected), strict=True)
    np.testing.assert_array_equal(as_numpy(deltas), as_numpy(expected_deltas), strict=True)


def test_a_thumbnail_is_resampled_over_its_slice_canvas_as_torch_rounds_linspace(minicpm):
    """A 7-row thumbnail over a 12-row canvas: ``linspace(0, 11, 7)`` holds 5.5, which torch's float32
    rounds to 6 (ties to even); the slices tile the canvas."""
    cfg, family = minicpm
    ids = [IMAGE_START, *[IMAGE] * 7, IMAGE_END]
    for row in range(2):
        ids += [NEWLINE] * (row > 0) + [SLICE_START, *[IMAGE] * 6, SLICE_END]
    found = {"target_sizes": [[28, 4], [24, 4], [24, 4]], "target_sizes_videos": None}
    check_prompt(cfg, family, ids, found)
    positions, _ = family.positions(ids, **found)
    assert positions[1, 1:8].tolist() == [0, 2, 4, 6, 7, 9, 11]  # (origin 0)


def test_the_rule_checks_every_crop_against_transformers_on_edges(minicpm):
    """Two pictures separated by a newline share a group; a newline after a picture is inside it; a
    crop that is the first of its row's slices without a frame before it opens a frame."""
    cfg, family = minicpm
    one = [IMAGE_START, *[IMAGE] * 4, IMAGE_END]
    check_prompt(cfg, family, one + [NEWLINE] + one + [NEWLINE, 1000], {"target_sizes": [[8, 8]] * 2})
    check_prompt(cfg, family, [SLICE_START, *[IMAGE] * 4, SLICE_END, 1000], {"target_sizes": [[8, 8]]})
    check_prompt(cfg, family, [1000, 1001], {})


def test_errors_name_what_is_wrong():
    family = mrope.from_config({"model_type": "minicpmv4_7", **IDS})
    one = [5, IMAGE_START, *[IMAGE] * 4, IMAGE_END]
    with pytest.raises(MRopeError, match=r"holds 1 image crops .* but target_sizes has 2 sizes"):
        family.positions(one, target_sizes=[[8, 8], [8, 8]])
    with pytest.raises(MRopeError, match=r"target_sizes\[0\] = \(8, 12\) is a crop of 4 tokens .* = 6"):
        family.positions(one, target_sizes=[[8, 12]])
    with pytest.raises(MRopeError, match=r"index 1: a crop .* must follow <image>"):
        family.positions([5, *[IMAGE] * 4], target_sizes=[[8, 8]])
    with pytest.raises(MRopeError, match=r"index 0: a crop"):
        family.positions([*[IMAGE] * 4], target_sizes=[[8, 8]])
    mixed = one + [SLICE_START, *[VIDEO] * 4, SLICE_END]
    with pytest.raises(MRopeError, match="a slice of another modality"):
        family.positions(mixed, target_sizes=[[8, 8]], target_sizes_videos=[[8, 8]])
    with pytest.raises(MRopeError, match="downsample_mode must be '16x' or '4x', got '8x'"):
        family.positions(one, target_sizes=[[8, 8]], downsample_mode="8x")
    with pytest.raises(MRopeError, match=r"target_sizes must be \(num_crops, 2\)"):
        family.positions(one, target_sizes=[[1, 8, 8]])
    with pytest.raises(MRopeError, match="takes no image_grid_thw: its crops' grids are target_sizes"):
        family.positions(one, image_grid_thw=[[1, 8, 8]])
    with pytest.raises(MRopeError, match="takes no offsets"):
        family.positions(one, image_offsets=[2], target_sizes=[[8, 8]])
    with pytest.raises(MRopeError, match=r"qwen2_vl takes no target_sizes \(only for minicpmv4_7\)"):
        mrope.from_config(
            {"model_type": "qwen2_vl", "image_token_id": 1, "video_token_id": 2, "spatial_merge_size": 2}
        ).positions([1000], target_sizes=[[8, 8]])
    with pytest.raises(MRopeError, match="minicpmv4_7: downsample_mode must be '16x' or '4x'"):
        mrope.from_config({"model_type": "minicpmv4_7", **IDS, "downsample_mode": "2x"})
    with pytest.raises(MRopeError, match="needs the setting 'newline_id'"):
        mrope.from_config(
            {"model_type": "minicpmv4_7", **{k: v for k, v in IDS.items() if k != "newline_id"}}
        )
    with pytest.raises(MRopeError, match="its token ids must differ"):
        mrope.from_config({"model_type": "minicpmv4_7", **IDS, "newline_id": IMAGE})


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_serving_table_gives_transformers_positions(minicpm, data):
    """Two requests in a :class:`mrope.PositionTable` (their segments recovered from the family's
    positions), filled in random chunks on the numpy, numba and torch paths: transformers' positions,
    then ``index + delta``; at most a segment per token."""
    import torch

    cfg, family = minicpm
    requests = data.draw(st.lists(prompts(), min_size=2, max_size=2), label="prompts")
    expected = []
    for ids, found in requests:
        prompt, deltas = transformers_minicpmv4_7_rope_index(
            family, cfg, torch.tensor([ids]), **torch_sizes(found)
        )
        past = len(ids) + int(as_numpy(deltas)[0, 0]) + np.arange(3)
        expected.append(np.concatenate([as_numpy(prompt)[:, 0], np.tile(past, (3, 1))], axis=1))
        table, _ = family.segments(ids, **sizes_of(found))
        assert table.num_segments <= len(ids)
    totals = np.array([e.shape[1] for e in expected])
    chunks = data.draw(st.lists(st.integers(1, 23), min_size=1, max_size=20), label="chunks")
    for backend in ("numpy", "numba", "torch"):
        table = PositionTable(4, backend="numpy" if backend == "numpy" else "auto")
        for slot, (ids, found) in zip((3, 1), requests, strict=True):
            table.add(slot, family, ids, **sizes_of(found))
        got = chunked_fill(table, [3, 1], totals, [chunks, chunks], backend)
        for row, want in zip(got, expected, strict=True):
            np.testing.assert_array_equal(row, want, err_msg=backend)


def test_the_vllm_integration_serves_it_in_positions_mode():
    """The plugin's admission does not read its crops from vLLM's mm_features: vLLM's own positions."""
    from mrope.integrations.vllm.features import unsupported_reason

    family = mrope.from_config({"model_type": "minicpmv4_7", **IDS})
    assert "target_sizes" in unsupported_reason(family)


def test_the_rotary_embedding_is_qwen3_5s(minicpm):
    require("torch")
    from mrope.rotary import rotary_embedding_for

    _, family = minicpm
    rope = rotary_embedding_for(family)
    assert rope.num_rows == 3
