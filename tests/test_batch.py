"""``mrope.get_rope_index`` on padded batches: against transformers' ``get_rope_index`` with an
attention_mask (compat="transformers") and SGLang row by row (compat="vllm"); left and right padding,
text-only rows, padding holes; array types in and out; the config forms it accepts."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrope
from support import peers
from support.peers import FAMILY_SETUPS, PEER_SETUPS, require
from support.strategies import Batch, Image, Prompt, Video, batches, build_prompt, pad_batch, prompts, text

ALL = pytest.mark.parametrize("peer", list(PEER_SETUPS), indirect=True)
EVERY_FAMILY = pytest.mark.parametrize("peer", list(FAMILY_SETUPS), indirect=True)
QWEN2 = pytest.mark.parametrize("peer", ["qwen2_vl", "qwen2_5_vl"], indirect=True)


def run(family, batch: Batch, kind: str = "numpy", mask: bool = True):
    """mrope's get_rope_index on ``batch``, ids / mask / grids given as ``kind``."""
    if kind == "torch":
        import torch

        ids, am = torch.tensor(batch.input_ids), torch.tensor(batch.attention_mask)
    elif kind == "numpy":
        ids, am = np.array(batch.input_ids), np.array(batch.attention_mask)
    else:
        ids, am = batch.input_ids, batch.attention_mask
    return mrope.get_rope_index(family, ids, attention_mask=am if mask else None, **batch.kwargs(kind))


def check_against_transformers(peer, batch: Batch) -> None:
    expected, expected_delta = peer.transformers(batch.input_ids, batch.kwargs(), batch.attention_mask)
    positions, deltas = run(peer.family("transformers"), batch)
    context = f"{peer.name}, compat=transformers vs transformers: {batch.describe()}"
    np.testing.assert_array_equal(positions, expected, err_msg=context, strict=True)
    np.testing.assert_array_equal(
        deltas, expected_delta.reshape(-1, 1), err_msg=f"deltas, {context}", strict=True
    )


@ALL
@given(data=st.data())
def test_padded_batches_match_transformers(peer, data):
    check_against_transformers(peer, data.draw(batches(peer.family("transformers")), label="batch"))


@QWEN2
@given(data=st.data())
def test_rows_ending_in_a_block_match_transformers(peer, data):
    # without markers a row may end in a vision block right where the next row starts
    check_against_transformers(
        peer, data.draw(batches(peer.family("transformers"), markers=False), label="batch")
    )


@QWEN2
def test_row_ending_in_a_block_before_an_unpadded_row(peer):
    family = peer.family("transformers")
    short = build_prompt(family, [text(1), Image(2, 2)], markers=False)
    long = build_prompt(family, [text(7)], markers=False)
    for side in ("left", "right"):
        check_against_transformers(peer, pad_batch([short, long] if side == "left" else [long, short], side))


@ALL
@given(data=st.data())
def test_each_row_matches_sglang_and_positions(peer, data):
    family = peer.family("vllm")
    batch = data.draw(batches(family), label="batch")
    positions, deltas = run(family, batch)
    for row, prompt in enumerate(batch.prompts):
        context = f"{peer.name}, compat=vllm, row {row} of {batch.describe()}"
        real = batch.real(row)
        expected, expected_delta = peer.sglang(prompt.input_ids, prompt.kwargs())
        np.testing.assert_array_equal(positions[:, row, real], expected, err_msg=f"vs SGLang, {context}")
        assert deltas[row, 0] == expected_delta, (
            f"delta {deltas[row, 0]} != SGLang {expected_delta}: {context}"
        )
        alone, alone_delta = family.positions(prompt.input_ids, **prompt.kwargs())
        np.testing.assert_array_equal(positions[:, row, real], alone, err_msg=f"vs positions(), {context}")
        assert deltas[row, 0] == alone_delta, (
            f"delta {deltas[row, 0]} != positions() {alone_delta}: {context}"
        )
        padding = np.ones(positions.shape[2], dtype=bool)
        padding[real] = False
        assert not positions[:, row, padding].any(), f"padded slots must be 0: {context}"


@ALL
@given(data=st.data())
def test_holes_anywhere_in_the_mask_match_transformers(peer, data):
    # masked tokens anywhere (inside a block's placeholders too) are dropped before parsing
    family = peer.family("transformers")
    rows = data.draw(
        st.lists(prompts(family, max_images=2, max_videos=1), min_size=1, max_size=2), label="rows"
    )
    ids, mask = [], []
    for prompt in rows:
        holes = sorted(data.draw(st.lists(st.integers(0, len(prompt.input_ids)), max_size=4), label="holes"))
        row_ids, row_mask, last = [], [], 0
        for h in holes:
            row_ids += prompt.input_ids[last:h] + [family.image_token_id]
            row_mask += [1] * (h - last) + [0]
            last = h
        ids.append(row_ids + prompt.input_ids[last:])
        mask.append(row_mask + [1] * (len(prompt.input_ids) - last))
    length = max(map(len, ids))
    ids = [r + [0] * (length - len(r)) for r in ids]
    mask = [m + [0] * (length - len(m)) for m in mask]
    batch = pad_batch(rows, "right")
    batch = Batch(
        ids,
        mask,
        batch.image_grid_thw,
        batch.video_grid_thw,
        batch.second_per_grid_ts,
        batch.prompts,
        "right",
    )
    check_against_transformers(peer, batch)


@pytest.mark.parametrize("peer", ["qwen2_5_vl", "glm4v"], indirect=True)
@given(data=st.data())
def test_list_numpy_and_torch_inputs_agree(peer, data):
    import torch

    family = peer.family(data.draw(st.sampled_from(["vllm", "transformers"]), label="compat"))
    batch = data.draw(batches(family), label="batch")
    as_numpy = run(family, batch, "numpy")
    as_list = run(family, batch, "list")
    as_torch = run(family, batch, "torch")
    context = f"{peer.name}, compat={family.compat}: {batch.describe()}"
    for out in as_numpy + as_list:
        assert isinstance(out, np.ndarray) and out.dtype == np.int64, (
            f"numpy / list in -> numpy int64 out: {context}"
        )
    for out in as_torch:
        assert isinstance(out, torch.Tensor) and out.dtype == torch.int64, (
            f"torch in -> torch int64 out: {context}"
        )
    for name, got in (("list", as_list), ("torch", as_torch)):
        np.testing.assert_array_equal(
            np.asarray(got[0]), as_numpy[0], err_msg=f"positions, {name}: {context}"
        )
        np.testing.assert_array_equal(np.asarray(got[1]), as_numpy[1], err_msg=f"deltas, {name}: {context}")
    prompt = batch.prompts[0]
    reference = family.positions(prompt.input_ids, **prompt.kwargs())
    for kind in ("numpy", "torch"):
        ids = np.array(prompt.input_ids) if kind == "numpy" else torch.tensor(prompt.input_ids)
        got = family.positions(ids, **prompt.kwargs(kind))
        assert isinstance(got[0], np.ndarray), f"positions() returns numpy for {kind} input: {context}"
        np.testing.assert_array_equal(got[0], reference[0], err_msg=f"positions(), {kind} input: {context}")
        assert got[1] == reference[1], f"positions() delta, {kind} input: {context}"


@ALL
def test_no_mask_equals_an_all_ones_mask(peer):
    family = peer.family("vllm")
    prompt = build_prompt(
        family,
        [text(3), Image(2, 3), text(2), Video(3, 2, 2), text(1)],
        [1.3] if family.uses_second_per_grid_ts else None,
    )
    batch = pad_batch([prompt, prompt], "left")
    with_mask = run(family, batch)
    without = run(family, batch, mask=False)
    for a, b in zip(with_mask, without, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"{peer.name}: mask of ones vs no mask")


@ALL
def test_text_only_batch_is_plain_positions(peer):
    # compared with transformers, which needs no grids for text
    batch = pad_batch([Prompt(text(5), [], [], None), Prompt(text(2), [], [], None)], "left", extra=1)
    check_against_transformers(peer, batch)


@pytest.mark.parametrize("peer", ["qwen2_5_vl-tps4"], indirect=True)
def test_config_forms_agree(peer):
    """A transformers config, its to_dict() and a family give the same positions; configs default to
    compat="vllm"; a family asked for the other compat keeps its settings (including overrides)."""
    family = peer.family("vllm")
    prompt = build_prompt(family, [text(2), Video(5, 1, 1), text(2)], [0.7])
    batch = pad_batch([prompt], "left")
    ids = np.array(batch.input_ids)
    kwargs = batch.kwargs("numpy")
    expected = mrope.get_rope_index(family, ids, **kwargs)
    for name, config in (("config", peer.config), ("to_dict", peer.config.to_dict())):
        got = mrope.get_rope_index(config, ids, **kwargs)
        np.testing.assert_array_equal(got[0], expected[0], err_msg=f"{name} vs family, default compat")
        got = mrope.get_rope_index(config, ids, compat="transformers", **kwargs)
        np.testing.assert_array_equal(
            got[0], run(peer.family("transformers"), batch)[0], err_msg=f"{name}, compat=transformers"
        )
    # tokens_per_second 2 given as an override on a config whose vision_config says 4
    override = mrope.from_config(peer.config, compat="vllm", tokens_per_second=2)
    as_checkpoint = mrope.from_config(
        peers.transformers_config("qwen2_5_vl", tokens_per_second=2), compat="transformers"
    )
    got = mrope.get_rope_index(override, ids, compat="transformers", **kwargs)
    want = mrope.get_rope_index(as_checkpoint, ids, **kwargs)
    np.testing.assert_array_equal(
        got[0], want[0], err_msg="family with an override, switched to compat=transformers"
    )


def test_config_objects_are_read_once_and_forgotten_when_freed():
    import gc

    import mrope.families as families_module

    require("transformers")
    config = peers.transformers_config("qwen2_vl")
    ids = np.array([[1, config.image_token_id, 2]])
    kwargs = {"image_grid_thw": [[1, 2, 2]]}
    first = mrope.get_rope_index(config, ids, **kwargs)
    cached = dict(families_module._FAMILIES)
    assert [key for key in cached if key[0] == id(config)] == [(id(config), "vllm")]
    second = mrope.get_rope_index(config, ids, **kwargs)
    assert dict(families_module._FAMILIES) == cached, "the second call must reuse the family"
    np.testing.assert_array_equal(first[0], second[0])
    key = (id(config), "vllm")
    del config
    gc.collect()
    assert key not in families_module._FAMILIES, "a freed config's family must be dropped"


# -- the pipeline's own API: request inputs, place, build, render ---------------------------------------
@EVERY_FAMILY
@given(data=st.data())
def test_request_inputs_drive_every_step(peer, data):
    """Family.request_inputs checks a prompt once; each step reads that one object: the stream's
    positions, and its placed blocks (every family, the Omni ones included) built into a segment table
    and rendered, all equal family.positions (checked against the peers elsewhere)."""
    from mrope.core import build_segments
    from mrope.render import render_all

    family = peer.family("vllm")
    aiv = peer.setup.omni and data.draw(st.booleans(), label="use_audio_in_video")
    prompt = data.draw(prompts(family, use_audio_in_video=aiv), label="prompt")
    expected, delta = family.positions(prompt.input_ids, **prompt.kwargs())
    inputs = family.request_inputs(prompt.input_ids, **prompt.kwargs())
    assert isinstance(inputs, mrope.RequestInputs)
    with pytest.raises(AttributeError):
        inputs.ids = []  # immutable
    positions, deltas = family.stream_positions(inputs)
    np.testing.assert_array_equal(positions, expected, strict=True)
    placed = family.place_stream(inputs)
    rendered = render_all(build_segments(placed, inputs.length))
    placed_delta = placed.delta.tolist()
    if family.segment_rows_error("this test") is not None:  # HunYuan-VL: its rows from the table's
        rendered = family.rows(rendered, inputs.rows()[0])
        placed_delta = [max(d, 0) if family.num_dims > 3 else d for d in placed_delta]  # index rows
    np.testing.assert_array_equal(rendered, expected, strict=True)
    assert deltas.tolist() == placed_delta == [delta]


@EVERY_FAMILY
def test_family_settings_are_typed_fields(peer):
    """Settings are dataclass fields of the family, with the config's values; with_compat keeps them;
    from_config names a missing or unknown setting."""
    import dataclasses

    family = peer.family("vllm")
    assert isinstance(family, mrope.Family)
    assert set(family.settings) <= {f.name for f in dataclasses.fields(family)}
    assert family.settings["spatial_merge_size"] == family.spatial_merge_size
    other = family.with_compat("transformers")
    assert other.compat == "transformers" and other.settings == family.settings
    first = type(family).required_settings()[0]
    with pytest.raises(mrope.MRopeError, match=f"^{family.model_type} needs the setting '{first}'"):
        mrope.from_config({"model_type": family.model_type})
    with pytest.raises(
        mrope.MRopeError, match=f"^{family.model_type} takes no setting \\['not_a_setting'\\]"
    ):
        mrope.from_config(family.config, not_a_setting=1)
