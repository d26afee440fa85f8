"""Bad input raises ``mrope.MRopeError`` (a ValueError) naming the item and what is wrong: never an
IndexError from deep inside, never silently wrong positions (issue 2, item 9)."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from mrope import MRopeError
from mrope.core.place import LARGEST_POSITION
from support.peers import peer_setup, require
from support.strategies import Image, Video, build_prompt, prompts, text


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
        (np.full((2, 4), 0.5), r"attention_mask\[0, 0\] = 0.5: a float mask must hold 0.0 or 1.0"),
        (
            np.array([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, np.nan, 1.0]]),
            r"attention_mask\[1, 2\] = nan: a float mask must hold 0.0 or 1.0",
        ),
        (
            np.ones((2, 4), dtype=np.complex64),
            r"attention_mask must hold 0/1 numbers or bools, got dtype complex64",
        ),
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
    with pytest.raises(
        MRopeError, match=r"image_grid_thw\[0\] = \(1, 4, 4\) needs 4 placeholder tokens: more than the 0"
    ):
        mrope.get_rope_index(qwen25, np.zeros((0, 4), dtype=np.int64), image_grid_thw=[[1, 4, 4]])


def test_unknown_model_type_and_compat(qwen25):
    with pytest.raises(MRopeError, match=r"unsupported model_type 'llama'; supported: .*qwen2_vl"):
        mrope.from_config({"model_type": "llama"})
    with pytest.raises(MRopeError, match=r"compat must be one of \('vllm', 'transformers'\), got 'sglang'"):
        mrope.get_rope_index(qwen25, np.ones((1, 2), dtype=np.int64), compat="sglang")


# -- sizes: grid counts past int64, the grids' total against the prompt -------------------------------
# T * H' * W' = 2**64 + 2, which int64 wraps to 2: the two placeholders of [1, i, i, 2]
WRAPPING_GRID = [1, 2 * 239_075_442, 2 * 77_158_673_929]


@pytest.mark.parametrize("call", ["positions", "segments", "offsets", "batch"])
@pytest.mark.parametrize(
    ("grid", "tokens"),
    [
        (WRAPPING_GRID, 2**64 + 2),
        ([8388608, 8388608, 8388608], 2**23 * 2**44),  # was an IndexError
        ([1, 2**33, 2**33], 2**64),  # wraps to 0
    ],
)
def test_a_grid_count_past_int64_is_refused_not_wrapped(qwen25, call, grid, tokens):
    i = qwen25.image_token_id
    ids = [1, i, i, 2]
    t, h, w = grid
    match = rf"image_grid_thw\[0\] = \({t}, {h}, {w}\) needs {tokens} placeholder tokens: more than the"
    with pytest.raises(MRopeError, match=match):
        if call == "batch":  # two rows: the vectorized pipeline
            mrope.get_rope_index(qwen25, np.array([ids, ids]), image_grid_thw=[grid, grid])
        elif call == "offsets":
            qwen25.positions(ids, image_grid_thw=[grid], image_offsets=[1], video_offsets=[])
        else:
            getattr(qwen25, call)(ids, image_grid_thw=[grid])


@pytest.mark.parametrize("count", [3, 40])  # a few grids (a Python pass) and many (numpy)
def test_the_grids_total_is_checked_against_the_prompt(qwen25, count):
    i = qwen25.image_token_id
    length = 4 * count - 1  # every image but the last fits
    ids = [1] * (length - 4 * (count - 1)) + [i] * (4 * (count - 1))
    with pytest.raises(
        MRopeError,
        match=rf"image_grid_thw\[{count - 1}\] = \(1, 4, 4\) needs 4 placeholder tokens, {4 * count} with "
        rf"the items before it: more than the {length} tokens of input_ids",
    ):
        qwen25.positions(ids, image_grid_thw=[[1, 4, 4]] * count)
    # images fit, the video does not: images are counted first
    with pytest.raises(
        MRopeError,
        match=rf"video_grid_thw\[0\] = \(2, 2, 2\) needs 2 placeholder tokens, {4 * (count - 1) + 2} with "
        rf"the items before it: more than the {length - 2} tokens",
    ):
        qwen25.positions(ids[2:], image_grid_thw=[[1, 4, 4]] * (count - 1), video_grid_thw=[[2, 2, 2]])


@pytest.mark.parametrize("name", ["qwen3_vl", "glm4v"])
@pytest.mark.parametrize("batch", [False, True])
def test_a_video_of_too_many_frames_is_refused_before_its_frames_are_built(name, batch):
    # these families split a video into frames: 10**7 frames took 880 MB and 1.5 s before the refusal
    f = family(name)
    match = (
        r"video_grid_thw\[0\] = \(10000000, 4, 4\) needs 40000000 placeholder tokens: more than the 2 tokens"
    )
    tracemalloc.start()
    try:
        with pytest.raises(MRopeError) as refused:
            if batch:
                mrope.get_rope_index(f, np.array([[1, 2]]), video_grid_thw=[[10**7, 4, 4]])
            else:
                f.positions([1, 2], video_grid_thw=[[10**7, 4, 4]])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated before the refusal"
    refused.match(match)


# -- settings ------------------------------------------------------------------------------------------
def _config(model_type: str):
    require("torch", "transformers")
    from support.peers import transformers_config, transformers_omni_config

    if "omni" in model_type:
        return transformers_omni_config(model_type)
    return transformers_config(model_type)


RATE = r"must be a finite number > 0 and at most 2147483647, got "
SIZE = r"must be a positive int, got "
ID = r"must be an int >= 0 \(a token id\), got "


@pytest.mark.parametrize(
    ("model_type", "name", "value", "match"),
    [
        ("qwen2_5_vl", "tokens_per_second", float("nan"), RATE + "nan"),
        ("qwen2_5_vl", "tokens_per_second", -2, RATE + "-2"),
        ("qwen2_5_vl", "tokens_per_second", 0, RATE + "0"),
        ("qwen2_5_vl", "tokens_per_second", "2", RATE + "'2'"),
        ("qwen2_5_vl", "tokens_per_second", float("inf"), RATE + "inf"),
        ("qwen2_5_vl", "tokens_per_second", True, RATE + "True"),
        ("qwen2_5_vl", "tokens_per_second", 2**31, RATE + "2147483648"),
        ("qwen2_5_vl", "spatial_merge_size", 0, SIZE + "0"),
        ("qwen2_5_vl", "spatial_merge_size", 2.0, SIZE + "2.0"),
        ("qwen2_5_vl", "image_token_id", -1, ID + "-1"),
        ("qwen2_5_vl", "video_token_id", "1", ID + "'1'"),
        ("ernie4_5_vl_moe", "temporal_merge_size", 0, SIZE + "0"),
        ("ernie4_5_vl_moe", "temporal_merge_size", -2, SIZE + "-2"),
        ("qwen2_5_omni", "position_id_per_seconds", float("nan"), RATE + "nan"),
        ("qwen3_omni_moe", "position_id_per_seconds", -25, RATE + "-25"),
        ("qwen2_5_omni", "seconds_per_chunk", float("nan"), RATE + "nan"),
        ("qwen3_omni_moe", "n_window", 0, SIZE + "0"),
        ("glm4v", "video_start_token_id", 1.5, ID + "1.5"),
    ],
)
def test_bad_settings_are_refused(model_type, name, value, match):
    config = _config(model_type)
    match = rf"{model_type}(_thinker)?: {name} {match}$"
    with pytest.raises(MRopeError, match=match):
        mrope.from_config(config, **{name: value})
    good = mrope.from_config(config)
    settings = {k: getattr(good, k) for k in good.settings}
    with pytest.raises(MRopeError, match=match):  # the constructor checks them too
        type(good)(good.model_type, **{**settings, name: value})
    dict_config = config.to_dict()
    dict_config = dict_config.get("thinker_config", dict_config)
    if name in dict_config:  # read from the config itself
        with pytest.raises(MRopeError, match=match):
            mrope.from_config({**dict_config, name: value})


# -- time: each video's last frame, and the prompt's largest position ---------------------------------
VS, VE, VID = 151652, 151653, 151656  # the Omni thinkers' vision markers and video token


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_second_per_grid_ts_past_the_largest_position(model_type):
    # was: INT64_MIN positions (Qwen2.5-Omni), a delta of 2.5e31 (Qwen3-Omni); Qwen2.5-VL refused it
    f = mrope.from_config(_config(model_type))
    ids = [1, VS, VID, VID, VE, 2]  # a video of grid (2, 2, 2): two frames of one token
    kw = {"video_grid_thw": [[2, 2, 2]]}
    with pytest.raises(MRopeError, match=r"second_per_grid_ts\[0\] = 1e\+30: must be at most 2147483647"):
        f.positions(ids, second_per_grid_ts=[1e30], **kw)
    with pytest.raises(
        MRopeError,
        match=r"second_per_grid_ts\[0\] = 1e\+09: video 0's last frame \(T = 2\) would get time index "
        r"2.5e\+10, past the largest position 2147483647",
    ):
        mrope.get_rope_index(f, np.array([ids]), second_per_grid_ts=[1e9], **kw)
    positions, delta = f.positions(ids, second_per_grid_ts=[2.0], **kw)
    assert positions[0].tolist() == [0, 1, 2, 52, 53, 54] and delta == 54 + 1 - 6


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_omni_videos_each_in_bounds_may_not_pass_the_largest_position_together(model_type):
    f = mrope.from_config(_config(model_type))
    video = [VS, VID, VID, VE, 2]  # grid (2, 2, 2): two frames of one token
    seconds = 2**30 / f.position_id_per_seconds  # the last frame's time index: about 2**30
    one, _ = f.positions([1, *video], video_grid_thw=[[2, 2, 2]], second_per_grid_ts=[seconds])
    assert abs(float(one.max()) - 2**30) <= 256  # float32 (Qwen3-Omni) holds multiples of 128 there
    with pytest.raises(MRopeError, match=r"the prompt's largest position would be 2\d{9}, past"):
        f.positions([1, *video, *video], video_grid_thw=[[2, 2, 2]] * 2, second_per_grid_ts=[seconds] * 2)
    with pytest.raises(MRopeError, match=r"row 1's largest position would be 2\d{9}, past"):
        mrope.get_rope_index(
            f,
            np.array([[1, *video, 0, 0, 0, 0, 0], [1, *video, *video]]),
            attention_mask=np.array([[1] * 6 + [0] * 5, [1] * 11]),
            video_grid_thw=[[2, 2, 2]] * 3,
            second_per_grid_ts=[seconds] * 3,
        )


def test_a_last_frame_that_float32_rounds_past_the_largest_position(qwen25):
    # (T - 1) * second_per_grid_ts * tokens_per_second = 2**31 - 2, which float32 rounds to 2**31
    p = build_prompt(qwen25, [Video(2, 1, 1)], markers=False)
    with pytest.raises(MRopeError, match=r"the prompt's largest position would be 2147483648, past"):
        qwen25.positions(p.input_ids, video_grid_thw=p.video_grid_thw, second_per_grid_ts=[2**30 - 1])
    positions, _ = qwen25.positions(p.input_ids, video_grid_thw=p.video_grid_thw, second_per_grid_ts=[2**29])
    assert positions[0].tolist() == [0, 2**30]


LONG = 2**29  # seconds per grid step: a video of two frames reaches time index 2**30 (tokens_per_second 2)


@pytest.mark.parametrize("call", ["positions", "segments", "offsets", "many blocks", "batch"])
def test_many_videos_each_in_bounds_may_not_pass_the_largest_position_together(qwen25, call):
    images = 9 if call == "many blocks" else 0  # past FEW_BLOCKS: the vectorized pipeline
    video = [text(1), Video(2, 1, 1)]
    one = build_prompt(qwen25, [Image(1, 1)] * images + video + [text(1)])
    two = build_prompt(qwen25, [Image(1, 1)] * images + video + video + [text(1)])
    kw, kw_one = two.kwargs(), one.kwargs()
    kw["second_per_grid_ts"], kw_one["second_per_grid_ts"] = [LONG, LONG], [LONG]
    if call == "offsets":
        for p, k in ((two, kw), (one, kw_one)):
            k["image_offsets"] = [j for j, t in enumerate(p.input_ids) if t == qwen25.image_token_id]
            k["video_offsets"] = [j for j, t in enumerate(p.input_ids) if t == qwen25.video_token_id][::2]
    # each image [vision_start, pad, vision_end] takes 3 positions; a video's base is 2 past the text
    # before it, its last frame 2**30 past its base, then vision_end and one text token
    base = 3 * images + 2
    last_one = base + 2**30 + 2
    last_two = last_one + 2 + 2**30 + 2
    assert last_one < LARGEST_POSITION < last_two
    where = "row 1" if call == "batch" else "the prompt"
    match = rf"{where}'s largest position would be {last_two}, past the largest position mrope hands out"
    with pytest.raises(MRopeError, match=match):
        if call == "batch":  # a row of one video (left-padded), then the row of two: the vectorized pipeline
            pad = len(two.input_ids) - len(one.input_ids)
            both = {k: kw_one[k] + kw[k] for k in kw if kw[k] is not None}
            ids = np.array([[0] * pad + one.input_ids, two.input_ids])
            mask = np.array([[0] * pad + [1] * len(one.input_ids), [1] * len(two.input_ids)])
            mrope.get_rope_index(qwen25, ids, attention_mask=mask, **both)
        else:
            getattr(qwen25, "segments" if call == "segments" else "positions")(two.input_ids, **kw)
    # one such video is within bounds: its positions are exact
    positions, delta = qwen25.positions(one.input_ids, **kw_one)
    assert positions[0, -5:].tolist() == [base - 1, base, base + 2**30, last_one - 1, last_one]
    assert delta == last_one + 1 - len(one.input_ids)


# -- torch tensors: half precision, the meta device; float masks -----------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
@pytest.mark.parametrize("seconds", [1.5, 0.3, 2.7])
def test_half_precision_second_per_grid_ts_is_read_exactly(qwen25, dtype, seconds):
    torch = pytest.importorskip("torch")
    p = build_prompt(qwen25, [text(1), Video(6, 1, 2), text(1), Video(3, 1, 1), text(1)])
    tensor = torch.tensor([seconds, 1.0], dtype=getattr(torch, dtype))
    held = tensor.double().tolist()  # the values the tensor holds (0.3 in bfloat16: 0.30078125)
    kw = {"video_grid_thw": p.video_grid_thw}
    expected, expected_delta = qwen25.positions(p.input_ids, second_per_grid_ts=np.array(held), **kw)
    positions, delta = qwen25.positions(p.input_ids, second_per_grid_ts=tensor, **kw)
    np.testing.assert_array_equal(positions, expected)
    assert delta == expected_delta
    batch, deltas = mrope.get_rope_index(qwen25, torch.tensor([p.input_ids]), second_per_grid_ts=tensor, **kw)
    np.testing.assert_array_equal(batch[:, 0].numpy(), expected)
    assert deltas.tolist() == [[expected_delta]]


MASKS = [
    "bool",
    "int64",
    "float64",
    "float32",
    "torch.bfloat16",
    "torch.float16",
    "torch.float32",
    "torch.int32",
]


@pytest.mark.parametrize("kind", MASKS)
def test_masks_of_any_number_type(qwen25, kind):
    # transformers reads any mask as mask.bool(): float 0.0 / 1.0 masks included
    p = build_prompt(qwen25, [text(2), Image(1, 2), text(1)])
    q = build_prompt(qwen25, [text(1), Image(2, 2), text(2)])
    width = max(len(p.input_ids), len(q.input_ids)) + 1
    ids = np.zeros((2, width), dtype=np.int64)
    mask = np.zeros((2, width), dtype=bool)
    ids[0, -len(p.input_ids) :], mask[0, -len(p.input_ids) :] = p.input_ids, True  # left padding
    ids[1, : len(q.input_ids)], mask[1, : len(q.input_ids)] = q.input_ids, True  # right padding
    grids = {"image_grid_thw": p.image_grid_thw + q.image_grid_thw}
    expected, expected_deltas = mrope.get_rope_index(qwen25, ids, attention_mask=mask, **grids)
    if kind.startswith("torch."):
        torch = pytest.importorskip("torch")
        given_mask, given_ids = torch.tensor(mask).to(getattr(torch, kind[6:])), torch.tensor(ids)
    else:
        given_mask, given_ids = mask.astype(kind), ids
    positions, deltas = mrope.get_rope_index(qwen25, given_ids, attention_mask=given_mask, **grids)
    np.testing.assert_array_equal(np.asarray(positions), expected)
    np.testing.assert_array_equal(np.asarray(deltas), expected_deltas)
    assert expected[:, 0, 0].tolist() == [0, 0, 0] and expected[0, 1, -1] == 0  # padding gets 0


@pytest.mark.parametrize("argument", ["input_ids", "image_grid_thw", "second_per_grid_ts", "attention_mask"])
def test_meta_tensors_are_refused(qwen25, argument):
    torch = pytest.importorskip("torch")
    p = build_prompt(qwen25, [text(1), Image(1, 1), Video(2, 1, 1), text(1)])
    kw = {
        "input_ids": torch.tensor([p.input_ids]),
        "image_grid_thw": torch.tensor(p.image_grid_thw),
        "video_grid_thw": torch.tensor(p.video_grid_thw),
        "second_per_grid_ts": torch.tensor([1.0]),
        "attention_mask": torch.ones(1, len(p.input_ids), dtype=torch.int64),
    }
    kw[argument] = kw[argument].to("meta")
    match = rf"{argument} is a tensor on the meta device, which holds no values"
    with pytest.raises(MRopeError, match=match):
        mrope.get_rope_index(qwen25, **kw)
    if argument != "attention_mask":
        kw.pop("attention_mask")
        kw["input_ids"] = kw["input_ids"][0]
        with pytest.raises(MRopeError, match=match):
            qwen25.positions(**kw)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_tensors_of_a_dtype_numpy_lacks_and_mrope_cannot_read(qwen25):
    torch = pytest.importorskip("torch")
    mask = torch.ones(1, 2, dtype=torch.complex32)
    with pytest.raises(
        MRopeError, match=r"attention_mask has dtype torch.complex32, which mrope cannot read"
    ):
        mrope.get_rope_index(qwen25, torch.ones(1, 2, dtype=torch.int64), attention_mask=mask)


# -- issue 20: errors that were not MRopeError, messages that named what the caller never passed -------
_QWEN2_VL = {
    "model_type": "qwen2_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_config": {"spatial_merge_size": 2},
}
_OMNI_THINKER = {
    "model_type": "qwen2_5_omni_thinker",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "audio_token_id": 151646,
    "vision_start_token_id": 151652,
    "audio_start_token_id": 151647,
    "vision_config": {"spatial_merge_size": 2},
    "position_id_per_seconds": 25,
    "seconds_per_chunk": 2,
}


@pytest.mark.parametrize(
    ("ids", "match"),
    [
        ([1, 1 << 64], r"input_ids\[1\] = 18446744073709551616 does not fit in int64"),
        ([1, 1 << 63], r"input_ids\[1\] = 9223372036854775808 does not fit in int64"),  # numpy: float64
        ([1, -(1 << 63) - 1], r"input_ids\[1\] = -9223372036854775809 does not fit in int64"),
        (np.array([1, 1 << 63], dtype=np.uint64), r"input_ids\[1\] = 9223372036854775808 does not fit"),
        ([1, 2.5], r"input_ids must hold integers, got dtype float64"),
        ([1, "a"], r"input_ids must hold integers, got dtype <U21"),
    ],
)
def test_integers_beyond_int64_are_named_with_their_value(ids, match):
    """numpy reads such a list as float64 or object: the error named that dtype, which the caller never
    passed; a uint64 array was cast by wrapping (2**63 read as -2**63, a text token)."""
    family = mrope.from_config(_QWEN2_VL)
    with pytest.raises(MRopeError, match=match):
        family.positions(ids)
    with pytest.raises(MRopeError, match=match.replace(r"input_ids\[1\]", r"input_ids\[0, 1\]")):
        mrope.get_rope_index(family, [ids] if isinstance(ids, list) else ids[None])


def test_grids_beyond_int64_are_named_with_their_value():
    family = mrope.from_config(_QWEN2_VL)
    with pytest.raises(MRopeError, match=r"image_grid_thw\[0, 1\] = 36893488147419103232 does not fit"):
        family.positions([1, 2], image_grid_thw=[[1, 1 << 65, 2]])


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({**_OMNI_THINKER, "audio_config": [128]}, r"audio_config must be a mapping \(a dict\), got list"),
        ({**_OMNI_THINKER, "audio_config": "whisper"}, r"audio_config must be a mapping \(a dict\), got str"),
        ({"model_type": "qwen2_5_omni", "thinker_config": {**_OMNI_THINKER, "audio_config": 3}}, "got int"),
        ({**_QWEN2_VL, "vision_config": 2}, r"qwen2_vl config: vision_config must be a mapping .*, got int"),
    ],
)
def test_sub_configs_that_are_not_mappings(config, match):
    """``audio_config.get`` raised AttributeError; ``name in vision_config``, TypeError."""
    with pytest.raises(MRopeError, match=match):
        mrope.from_config(config)


def test_rope_index_reads_list_valued_fields():
    """A list ``feature_attention_mask`` raised AttributeError (``.sum``), ragged list ids ValueError."""
    from mrope.integrations.transformers import rope_index

    family = mrope.from_config(_OMNI_THINKER)
    audio = int(family.audio_tokens(np.array([100]))[0])
    ids = [5, 151647] + [151646] * audio + [151648, 7]
    expected = rope_index(family, {"input_ids": [ids], "audio_feature_lengths": [100]})
    for mask in ([[1] * 100 + [0] * 20], np.array([[True] * 100 + [False] * 20])):
        got = rope_index(family, {"input_ids": [ids], "feature_attention_mask": mask})
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(got[1], expected[1])
    single = rope_index(
        family, {"input_ids": ids, "attention_mask": [1] * len(ids), "audio_feature_lengths": [100]}
    )
    np.testing.assert_array_equal(single[0], expected[0][:, 0])
    for inputs, match in (
        ({"input_ids": [ids, ids[:3]]}, r"input_ids could not be read as an array"),
        ({"input_ids": [ids], "attention_mask": [[1, 1], [1]]}, r"attention_mask could not be read"),
        ({"input_ids": [ids], "feature_attention_mask": [1] * 100}, r"feature_attention_mask must be \(num_"),
        ({"input_ids": [ids], "feature_attention_mask": [[0.5] * 100]}, r"0/1 integers or bools, got dtype"),
    ):
        with pytest.raises(MRopeError, match=match):
            rope_index(family, inputs)


@pytest.mark.parametrize(
    ("value", "allowed"),
    [("0", False), ("false", False), ("OFF", False), (" No ", False), ("", True), ("1", True), ("yes", True)],
)
def test_mrope_numba_reads_off_as_mrope_vllm_does(numba_env, value, allowed):
    """``MROPE_NUMBA`` accepted ``0`` only; ``false``, ``off`` and ``no`` turn it off as they turn
    ``MROPE_VLLM`` off."""
    from mrope.render.choose import numba_allowed
    from mrope.serving import PositionTable

    numba_env(value)
    assert numba_allowed() is allowed
    if not allowed:
        assert PositionTable(1).backend == "numpy"


@pytest.mark.parametrize("value", ["maybe", "2", "of", "numba", " enable "])
def test_mrope_numba_refuses_what_is_neither_on_nor_off(numba_env, value):
    """``MROPE_NUMBA=maybe`` counted silently as on: any value but the off and on words (or unset) is
    refused by name where mrope chooses a path (a table's step, a long render, the items' scan), and
    again at the next such call while it is set; a valid value then serves."""
    from mrope.render.choose import numba_allowed
    from mrope.serving import PositionTable

    numba_env(value)
    message = rf"MROPE_NUMBA={value!r} is neither off \(0, false, off, no: mrope keeps numpy\) nor on"
    family = mrope.from_config(_QWEN2_VL)
    for call in (
        numba_allowed,
        lambda: PositionTable(1),
        lambda: mrope.get_rope_index(family, np.ones((2, 4096), dtype=np.int64)),
        lambda: numba_allowed(),  # not remembered as on or off
    ):
        with pytest.raises(MRopeError, match=message):
            call()
    numba_env("off")
    assert PositionTable(1).backend == "numpy"


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_tensors_are_refused():
    """They raised RuntimeError ("NestedTensorImpl doesn't support sizes")."""
    torch = pytest.importorskip("torch")
    family = mrope.from_config(_QWEN2_VL)
    nested = torch.nested.nested_tensor([torch.arange(4), torch.arange(3)])
    for call in (
        lambda: family.positions(nested),
        lambda: mrope.get_rope_index(family, nested),
        lambda: mrope.get_rope_index(family, torch.ones(2, 4, dtype=torch.int64), attention_mask=nested),
        lambda: family.positions([1, 2], image_grid_thw=torch.nested.nested_tensor([torch.ones(3)])),
    ):
        with pytest.raises(MRopeError, match=r"is a nested tensor: pass a dense \(strided\) tensor"):
            call()
    sparse = torch.ones(1, 4, dtype=torch.int64).to_sparse()
    with pytest.raises(MRopeError, match=r"input_ids is a sparse_coo tensor"):
        mrope.get_rope_index(family, sparse)
