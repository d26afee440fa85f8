"""Bad input raises ``mrope.MRopeError`` (a ValueError) naming the item and what is wrong: never an
IndexError from deep inside, never silently wrong positions (issue 2, item 9)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from _peers import peer_setup, require
from mrope import MRopeError
from strategies import Image, Video, build_prompt, prompts, text


def family(name: str):
    """The compat="vllm" family of a default transformers config of ``name``."""
    require("torch", "transformers")
    return peer_setup(name).family("vllm")


@pytest.fixture(scope="module")
def qwen25():
    return family("qwen2_5_vl")


@pytest.fixture(scope="module")
def qwen3():
    return family("qwen3_vl")


@pytest.fixture(scope="module")
def glm():
    return family("glm4v")


def test_mrope_error_is_a_value_error():
    assert issubclass(MRopeError, ValueError)


# -- placeholder tokens against grids ----------------------------------------------------------------
def test_too_few_placeholders_names_the_item(qwen25):
    p = build_prompt(qwen25, [text(1), Image(2, 2), text(1), Image(2, 2), text(1)])
    ids = p.input_ids[:-3] + p.input_ids[-2:]  # drop one pad of image 1
    with pytest.raises(
        MRopeError,
        match=r"image 1 \(image_grid_thw\[1\] = \(1, 4, 4\)\) needs 4 placeholder "
        r"tokens, found 3",
    ):
        qwen25.positions(ids, **p.kwargs())


def test_a_split_run_names_the_item_and_the_run(qwen25):
    p = build_prompt(qwen25, [text(1), Video(2, 2, 1), text(1)])
    pads = [i for i, t in enumerate(p.input_ids) if t == qwen25.video_token_id]
    ids = p.input_ids[: pads[1]] + [7] + p.input_ids[pads[1] :]  # text inside the video's placeholders
    with pytest.raises(
        MRopeError,
        match=r"video 0 \(video_grid_thw\[0\] = \(2, 4, 2\)\) needs 4 consecutive "
        r"placeholder tokens in one row from index 2 of row 0, found a run of 1",
    ):
        qwen25.positions(ids, **p.kwargs())


def test_more_blocks_than_grids(qwen25):
    p = build_prompt(qwen25, [text(1), Image(1, 2), text(1), Image(1, 2), text(1)])
    with pytest.raises(
        MRopeError,
        match=r"2 image placeholder tokens from index 7 of row 0 have no grid in "
        r"image_grid_thw \(4 image placeholder tokens in 2 runs, "
        r"image_grid_thw needs 2\)",
    ):
        qwen25.positions(p.input_ids, image_grid_thw=p.image_grid_thw[:1])


def test_fewer_blocks_than_grids(qwen25):
    p = build_prompt(qwen25, [text(1), Video(1, 1, 2), text(1)])
    with pytest.raises(
        MRopeError,
        match=r"video 1 \(video_grid_thw\[1\] = \(3, 2, 2\)\) needs 3 placeholder "
        r"tokens, found 0",
    ):
        qwen25.positions(p.input_ids, video_grid_thw=p.video_grid_thw + [[3, 2, 2]])


def test_placeholders_without_any_grid(qwen25):
    p = build_prompt(qwen25, [Image(1, 3), text(2)])
    with pytest.raises(MRopeError, match=r"3 image placeholder tokens from index 1 of row 0 have no grid"):
        qwen25.positions(p.input_ids)


def test_a_frame_short_of_tokens_names_the_frame_and_video(qwen3):
    p = build_prompt(qwen3, [text(1), Video(3, 2, 2, ((5,), (6,), (7,))), text(1)])
    pads = [i for i, t in enumerate(p.input_ids) if t == qwen3.video_token_id]
    ids = [t for i, t in enumerate(p.input_ids) if i != pads[5]]  # frame 1 loses a pad
    with pytest.raises(
        MRopeError,
        match=r"frame 1 of video 0 \(video_grid_thw\[0\] has H, W = \(4, 4\)\) "
        r"needs 4 consecutive placeholder tokens",
    ):
        qwen3.positions(ids, **p.kwargs())


def test_a_missing_frame_names_the_frame(glm):
    p = build_prompt(glm, [text(1), Video(2, 1, 2, ((5,), (6,))), text(1)])
    with pytest.raises(
        MRopeError,
        match=r"frame 0 of video 1 \(video_grid_thw\[1\] has H, W = \(2, 4\)\) "
        r"needs 2 placeholder tokens, found 0",
    ):
        glm.positions(p.input_ids, video_grid_thw=p.video_grid_thw + [[1, 2, 4]])


def test_a_block_may_not_cross_rows(qwen25):
    i = qwen25.image_token_id
    with pytest.raises(
        MRopeError,
        match=r"image 0 .* needs 4 consecutive placeholder tokens in one row from "
        r"index 1 of row 0, found a run of 2",
    ):
        mrope.get_rope_index(qwen25, np.array([[1, i, i], [i, i, 2]]), image_grid_thw=[[1, 4, 4]])


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "glm4v"])
@given(data=st.data())
def test_one_placeholder_more_or_less_always_raises(name, data):
    f = family(name)
    p = data.draw(prompts(f, max_text=6, max_side=3, max_frames=3), label="prompt")
    placeholders = {f.image_token_id, getattr(f, "video_token_id", f.image_token_id)}
    ids = list(p.input_ids)
    where = [k for k, t in enumerate(ids) if t in placeholders]
    if where and data.draw(st.booleans(), label="delete"):
        del ids[data.draw(st.sampled_from(where), label="at")]
    else:
        ids.insert(
            data.draw(st.integers(0, len(ids)), label="at"),
            data.draw(st.sampled_from(sorted(placeholders)), label="token"),
        )
    with pytest.raises(MRopeError):
        f.positions(ids, **p.kwargs())


# -- grids and times ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("grid", "match"),
    [
        ([1, 0, 4], r"image_grid_thw\[1\] = \(1, 0, 4\): every grid value must be > 0"),
        ([0, 4, 4], r"image_grid_thw\[1\] = \(0, 4, 4\): every grid value must be > 0"),
        ([1, 4, -2], r"image_grid_thw\[1\] = \(1, 4, -2\): every grid value must be > 0"),
        ([1, 5, 4], r"image_grid_thw\[1\] = \(1, 5, 4\): H=5 is not divisible by spatial_merge_size 2"),
        ([1, 4, 3], r"image_grid_thw\[1\] = \(1, 4, 3\): W=3 is not divisible by spatial_merge_size 2"),
    ],
)
def test_bad_grid_values(qwen25, grid, match):
    with pytest.raises(MRopeError, match=match):
        qwen25.positions([1, 2], image_grid_thw=[[1, 2, 2], grid])


@pytest.mark.parametrize("grid", [[[2, 4]], [2, 4, 4], [[[2, 4, 4]]]])
def test_grids_of_the_wrong_shape(qwen25, grid):
    with pytest.raises(MRopeError, match=r"video_grid_thw must (have shape \(num_items, 3\)|be 1-D or 2-D)"):
        qwen25.positions([1, 2], video_grid_thw=grid)


def test_float_grids(qwen25):
    with pytest.raises(MRopeError, match=r"image_grid_thw must hold integers, got dtype float64"):
        qwen25.positions([1, 2], image_grid_thw=np.array([[1.0, 2.0, 2.0]]))


@pytest.mark.parametrize(
    ("seconds", "match"),
    [
        ([1.0, -0.5], r"second_per_grid_ts\[1\] = -0.5: must be finite and >= 0"),
        ([float("nan"), 1.0], r"second_per_grid_ts\[0\] = nan: must be finite and >= 0"),
        ([1.0, float("inf")], r"second_per_grid_ts\[1\] = inf: must be finite and >= 0"),
        ([1.0], r"second_per_grid_ts must have shape \(2,\), one value per video, got shape \(1,\)"),
        (
            [1.0, 2.0, 3.0],
            r"second_per_grid_ts must have shape \(2,\), one value per video, got shape \(3,\)",
        ),
        ([[1.0, 2.0]], r"second_per_grid_ts must have shape \(2,\), one value per video, got shape \(1, 2\)"),
        (["a", "b"], r"second_per_grid_ts must be numbers, got dtype <U1"),
    ],
)
def test_bad_second_per_grid_ts(qwen25, seconds, match):
    p = build_prompt(qwen25, [text(1), Video(2, 1, 1), Video(3, 1, 1), text(1)])
    with pytest.raises(MRopeError, match=match):
        qwen25.positions(p.input_ids, video_grid_thw=p.video_grid_thw, second_per_grid_ts=seconds)


def test_torch_second_per_grid_ts_checked_too(qwen25):
    torch = pytest.importorskip("torch")
    p = build_prompt(qwen25, [text(1), Video(2, 1, 1), text(1)])
    with pytest.raises(MRopeError, match=r"second_per_grid_ts\[0\] = -1.0"):
        qwen25.positions(
            p.input_ids,
            video_grid_thw=p.video_grid_thw,
            second_per_grid_ts=torch.tensor([-1.0], dtype=torch.float32),
        )


def test_second_per_grid_ts_so_large_that_positions_overflow(qwen25):
    # finite, but the last frame's time index (1e30 * 2 * 1) does not fit an int64 position: refuse it
    # rather than return wrapped-around positions
    p = build_prompt(qwen25, [text(1), Video(2, 1, 1), text(1)])
    with pytest.raises(MRopeError, match=r"second_per_grid_ts\[0\]"):
        qwen25.positions(p.input_ids, video_grid_thw=p.video_grid_thw, second_per_grid_ts=[1e30])


def test_second_per_grid_ts_for_a_family_that_does_not_scale_time():
    f = family("qwen3_vl")
    with pytest.raises(
        MRopeError, match=r"qwen3_vl does not scale video time: second_per_grid_ts must be None"
    ):
        f.positions([1, 2], second_per_grid_ts=[1.0])


# -- input_ids and attention_mask --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ([[1, 2]], r"input_ids must be 1-D, got shape \(1, 2\)"),
        (5, r"input_ids must be 1-D, got shape \(\)"),
        (np.array([1.0, 2.0]), r"input_ids must hold integers, got dtype float64"),
        (np.array([True, False]), r"input_ids must hold integers, got dtype bool"),
        (["a", "b"], r"input_ids must hold integers, got dtype <U1"),
    ],
)
def test_bad_input_ids_for_positions(qwen25, ids, match):
    with pytest.raises(MRopeError, match=match):
        qwen25.positions(ids)


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        (np.array([1, 2]), r"input_ids must be 2-D, got shape \(2,\)"),
        (np.ones((1, 2, 3), dtype=np.int64), r"input_ids must be 2-D, got shape \(1, 2, 3\)"),
        (np.array([[1.0, 2.0]]), r"input_ids must hold integers, got dtype float64"),
        (np.array([[1.5, 2.0]], dtype=np.float32), r"input_ids must hold integers, got dtype float32"),
    ],
)
def test_bad_input_ids_for_the_batch(qwen25, ids, match):
    with pytest.raises(MRopeError, match=match):
        mrope.get_rope_index(qwen25, ids)


def test_torch_float_ids_are_refused(qwen25):
    torch = pytest.importorskip("torch")
    with pytest.raises(MRopeError, match=r"input_ids must hold integers, got dtype float32"):
        mrope.get_rope_index(qwen25, torch.ones(1, 3))


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        (np.ones((2, 3), dtype=np.int64), r"attention_mask has shape \(2, 3\), input_ids has \(2, 4\)"),
        (np.ones((2, 4, 1), dtype=np.int64), r"attention_mask has shape \(2, 4, 1\), input_ids has \(2, 4\)"),
        (np.ones(8, dtype=np.int64), r"attention_mask has shape \(8,\), input_ids has \(2, 4\)"),
        (np.ones((2, 4)), r"attention_mask must hold 0/1 integers or bools, got dtype float64"),
    ],
)
def test_bad_attention_mask(qwen25, mask, match):
    with pytest.raises(MRopeError, match=match):
        mrope.get_rope_index(qwen25, np.ones((2, 4), dtype=np.int64), attention_mask=mask)


def test_padding_is_never_read_as_placeholders(qwen25):
    # a placeholder id in a masked slot is padding, not a block: no grid is needed for it
    i = qwen25.image_token_id
    positions, deltas = mrope.get_rope_index(
        qwen25, np.array([[i, i, 1, 2]]), attention_mask=np.array([[0, 0, 1, 1]])
    )
    assert positions[:, 0].tolist() == [[0, 0, 0, 1]] * 3, positions
    assert deltas.tolist() == [[0]], deltas


def test_empty_batch(qwen25):
    positions, deltas = mrope.get_rope_index(qwen25, np.zeros((0, 4), dtype=np.int64))
    assert positions.shape == (3, 0, 4) and deltas.shape == (0, 1), (positions.shape, deltas.shape)
    with pytest.raises(MRopeError, match=r"image 0 .* needs 4 placeholder tokens, found 0"):
        mrope.get_rope_index(qwen25, np.zeros((0, 4), dtype=np.int64), image_grid_thw=[[1, 4, 4]])


def test_unknown_model_type_and_compat(qwen25):
    with pytest.raises(MRopeError, match=r"unsupported model_type 'llama'; supported: .*qwen2_vl"):
        mrope.from_config({"model_type": "llama"})
    with pytest.raises(MRopeError, match=r"compat must be one of \('vllm', 'transformers'\), got 'sglang'"):
        mrope.get_rope_index(qwen25, np.ones((1, 2), dtype=np.int64), compat="sglang")
