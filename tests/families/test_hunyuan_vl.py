"""HunYuan-VL (``mrope.families.hunyuan_vl``): its rows and rule against transformers 5.24's
``get_rope_index`` on single prompts (batches: ``test_families.py``), its edges, its errors, the
refusals where mrope takes three rows only; its rotary embedding against transformers'."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from support.peers import as_numpy, as_torch_ids, require, transformers_rope_index
from support.strategies import Image, build_prompt, prompts, text

HUNYUAN = pytest.mark.parametrize("peer", ["hunyuan_vl", "hunyuan_vl-3rows"], indirect=True)
IMAGE, START, END = 120120, 120118, 120119


def image_run(height: int, width: int, extra: bool = True) -> list[int]:
    """An image's run of image tokens, merged ``height x width`` (its newline column included)."""
    return [IMAGE] * (height * (width + 1) + (2 if extra else 0))


def check_ids(peer, ids: list[list[int]], grids: list[list[int]], mask=None) -> np.ndarray:
    """``mrope.get_rope_index`` equals transformers' on ``ids``; returns the positions."""
    import torch

    family = peer.family("transformers")
    kwargs = {"image_grid_thw": torch.tensor(grids)} if grids else {}
    if mask is not None:
        kwargs["attention_mask"] = torch.tensor(mask)
    expected, expected_delta = transformers_rope_index(family, peer.config, as_torch_ids(ids), **kwargs)
    positions, deltas = mrope.get_rope_index(
        family, np.array(ids), image_grid_thw=grids or None, attention_mask=mask
    )
    np.testing.assert_array_equal(positions, as_numpy(expected), strict=True)
    np.testing.assert_array_equal(deltas, as_numpy(expected_delta), strict=True)
    return positions


@HUNYUAN
@given(data=st.data())
def test_prompts_match_transformers(peer, data):
    family = peer.family("transformers")
    prompt = data.draw(prompts(family, max_images=4, max_side=5), label="prompt")
    peer.check_transformers(prompt)
    positions, _ = family.positions(prompt.input_ids, **prompt.kwargs())
    assert positions.shape == (family.num_dims, len(prompt.input_ids))


@HUNYUAN
@given(data=st.data())
def test_runs_without_their_extra_tokens_at_the_very_edges_match_transformers(peer, data):
    # transformers takes a run of H' * (W' + 1) tokens as the grid alone: an image may be the first or
    # last token of the prompt, and the conventions place nothing (text keeps its index)
    sides = st.integers(1, 4)
    count = data.draw(st.integers(1, 3), label="images")
    grids = [[1, 2 * data.draw(sides), 2 * data.draw(sides)] for _ in range(count)]
    ids: list[int] = []
    for i, (_, h, w) in enumerate(grids):
        ids += image_run(h // 2, w // 2, extra=data.draw(st.booleans()))
        if i + 1 < count:  # runs need a token between them
            ids += [7] * data.draw(st.integers(1, 3))
    check_ids(peer, [ids], grids)
    for compat in ("vllm", "transformers"):  # nothing to place: one rule under both conventions
        np.testing.assert_array_equal(
            peer.family(compat).positions(ids, image_grid_thw=grids)[0],
            check_ids(peer, [ids], grids)[:, 0],
        )


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
def test_rows_of_one_image(peer):
    family = peer.family("vllm")
    prompt = build_prompt(family, [text(2), Image(2, 2), text(1)])
    positions, delta = family.positions(prompt.input_ids, **prompt.kwargs())
    assert prompt.input_ids[2:4] == [START, IMAGE] and prompt.input_ids[-2] == END
    grid = slice(4, 10)  # the run's first token (index 3) and last (10) keep their index
    np.testing.assert_array_equal(positions[0], np.arange(13))  # the index row
    assert positions[1, grid].tolist() == [0, 1, 2, 0, 1, 2]  # width, the newline column at 2
    assert positions[2, grid].tolist() == [0, 0, 0, 1, 1, 1]  # height
    assert positions[3, grid].tolist() == [0] * 6  # the image's ordinal
    assert positions[1:, 10:].tolist() == [[10, 11, 12]] * 3 and delta == 0


@HUNYUAN
def test_image_ordinal_runs_on_across_the_batch_and_sets_a_delta(peer):
    # transformers' counter is not reset per row: row 1's image is image 3; a row whose last row
    # reaches past its index gets a positive delta
    one = [5] + image_run(1, 1) + [6] + image_run(1, 1) + [7] + image_run(1, 1)
    two = image_run(1, 1, extra=False) + [0] * (len(one) - 2)
    positions = check_ids(peer, [one, two], [[1, 2, 2]] * 4)
    assert positions[-1, 1, :2].tolist() == [3, 3]
    short = check_ids(
        peer, [[9] * 5 + image_run(1, 1), image_run(1, 1, extra=False) + [0] * 7], [[1, 2, 2]] * 2
    )
    assert short[-1, 1, 0] == 1
    left = [[0] * 5 + one[:10], [0] * 13 + image_run(1, 1, extra=False)]
    check_ids(peer, left, [[1, 2, 2]] * 3, mask=[[0] * 5 + [1] * 10, [0] * 13 + [1] * 2])


@HUNYUAN
def test_bad_inputs_name_what_is_wrong(peer):
    family = peer.family("vllm")
    ids = [5] + image_run(2, 2) + [6]
    with pytest.raises(
        MRopeError, match=r"is a run of 8 image tokens at index 1: expected H' \* \(W' \+ 1\) = 2"
    ):
        family.positions(ids, image_grid_thw=[[1, 2, 2]])
    with pytest.raises(MRopeError, match="1 runs of image tokens .* describes 2 images"):
        family.positions(ids, image_grid_thw=[[1, 4, 4], [1, 2, 2]])
    with pytest.raises(MRopeError, match="1 runs of image tokens .* describes 0 images"):
        family.positions(ids)
    with pytest.raises(MRopeError, match=r"image_grid_thw\[0\] = \(2, 4, 4\): hunyuan_vl images have T = 1"):
        family.positions(ids, image_grid_thw=[[2, 4, 4]])
    with pytest.raises(MRopeError, match="takes no video_grid_thw"):
        family.positions(ids, video_grid_thw=[[1, 4, 4]])
    with pytest.raises(MRopeError, match=r"needs 8 placeholder tokens \(T \* H' \* \(W' \+ 1\)"):
        family.positions([5] * 7, image_grid_thw=[[1, 4, 6]])
    with pytest.raises(MRopeError, match="takes no image_offsets"):
        family.positions(ids, image_grid_thw=[[1, 4, 4]], image_offsets=[1])
    with pytest.raises(MRopeError, match="not divisible by spatial_merge_size 2"):
        family.positions(ids, image_grid_thw=[[1, 3, 4]])


def test_config_reading_names_missing_fields():
    config = {
        "model_type": "hunyuan_vl",
        "image_token_id": IMAGE,
        "vision_config": {"spatial_merge_size": 2},
        "text_config": {"rope_parameters": {"mrope_section": [16, 16, 16, 16]}},
    }
    family = mrope.from_config(config)
    assert family.num_dims == 4 and family.prompt_markers()["image_start_token_id"] == START
    assert mrope.from_config({**config, "im_start_id": 3}).prompt_markers()["image_start_token_id"] == 3
    with pytest.raises(
        MRopeError,
        match="needs the setting 'num_dims' \\(not found in text_config.rope_parameters.mrope_section",
    ):
        mrope.from_config({**config, "text_config": {}})
    for section, got in (([32, 32], 2), ([1] * 129, 129)):  # rows of positions: 3 to MAX_NUM_DIMS (128)
        with pytest.raises(MRopeError, match=f"num_dims .* must be an int from 3 to 128 .*, got {got}"):
            mrope.from_config({**config, "text_config": {"rope_parameters": {"mrope_section": section}}})
    with pytest.raises(MRopeError, match="hunyuan_vl needs the setting 'image_token_id'"):
        mrope.from_config({k: v for k, v in config.items() if k != "image_token_id"})
    with pytest.raises(MRopeError, match="hunyuan_vl needs the setting 'spatial_merge_size'"):
        mrope.from_config({**config, "vision_config": {}})


@pytest.mark.parametrize("peer", ["hunyuan_vl"], indirect=True)
def test_three_row_consumers_refuse_it(peer):
    """The vLLM integration and a 3-row table refuse it; its segments serve a table of its rows
    (tests/serving/test_rows.py)."""
    from mrope.integrations.vllm.features import unsupported_reason

    family = peer.family("vllm")
    ids = [5] + image_run(1, 1) + [6]
    rows = r"hunyuan_vl gives 4 rows of positions \(1 of the index, then width, height, image ordinal\)"
    table, delta = family.segments(ids, image_grid_thw=[[1, 2, 2]])
    assert table.length == len(ids) and delta == 0 and family.segment_rows.describe() == "(index, w, h, t)"
    with pytest.raises(MRopeError, match=r"gives 4 rows of positions \(index, w, h, t\), this table holds 3"):
        mrope.PositionTable(2, max_position=1024).add(0, family, ids, image_grid_thw=[[1, 2, 2]])
    rows_message = rows + r": mrope's vLLM integration takes only the 3 rows"
    assert re.search(rows_message, unsupported_reason(family))


@HUNYUAN
def test_its_rotary_embedding_rotates_its_positions_as_transformers(peer):
    """rotary_embedding_for(family) takes the family's num_dims rows (layout "hunyuan": each channel of a
    pair from its own row): on a prompt's positions it rotates as transformers' HunYuanVL rotary."""
    require("torch", "transformers")
    import torch

    from mrope.rotary import rotary_embedding_for
    from support.hunyuan_rotary import hunyuan_reference

    family = peer.family("transformers")
    prompt = build_prompt(family, [text(2), Image(2, 4), text(3), Image(4, 2), text(1)])
    positions = torch.from_numpy(family.positions(prompt.input_ids, **prompt.kwargs())[0])
    rope = rotary_embedding_for(family, dtype=torch.float32)
    assert (rope.layout, rope.num_rows) == ("hunyuan", family.num_dims)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(positions.shape[1], 2, rope.head_size, generator=g)
    k = torch.randn(positions.shape[1], 1, rope.head_size, generator=g)
    exp_q, exp_k = hunyuan_reference(peer.config.text_config, positions, q, k)
    out_q, out_k = rope(positions, q.clone(), k.clone())
    torch.testing.assert_close(out_q, exp_q, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out_k, exp_k, rtol=1e-6, atol=1e-6)


def test_its_rotary_embedding_refuses_rows_its_sections_do_not_give():
    require("torch")
    from mrope.families.hunyuan_vl import HunYuanVL
    from mrope.rotary import rotary_embedding_for

    text_config = {"head_dim": 128, "max_position_embeddings": 64}
    text_config["rope_parameters"] = {"rope_theta": 1e4, "mrope_section": [32, 16, 16]}
    family = HunYuanVL(
        "hunyuan_vl",
        image_token_id=IMAGE,
        spatial_merge_size=2,
        num_dims=4,
        config={"text_config": text_config},
    )
    with pytest.raises(
        MRopeError,
        match=r"hunyuan_vl gives 4 rows of positions, but its rotary layout 'hunyuan' with mrope_section "
        r"\[32, 16, 16\] takes 3",
    ):
        rotary_embedding_for(family)
