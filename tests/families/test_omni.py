"""The Omni thinkers' own cases (their matches against transformers and SGLang are in
``test_families.py``): Qwen2.5-Omni's chunked audio in video (a chunk boundary inside a frame, shared
start and end positions), audio alone, the errors and config forms; Qwen3-Omni's float32 positions
(fractional video time), audio in video merged by time, errors and config forms with
position_id_per_seconds 25 (class default) and 13 (the checkpoints). Then vLLM's rule (compat "vllm",
video_time "float64"; its match against vLLM's own code is in tests/integrations/vllm): integer
positions, vLLM's interleaving, transformers' rule kept by every other setting."""

import re

import numpy as np
import pytest

import mrope
from support.peers import require_module

require_module("transformers")
torch = require_module("torch")

from support.peers import as_numpy, transformers_omni_config, transformers_rope_index  # noqa: E402

CONFIG_2_5 = transformers_omni_config("qwen2_5_omni")
FAMILY_2_5 = mrope.from_config(CONFIG_2_5)
CONFIGS_3 = {pps: transformers_omni_config("qwen3_omni_moe", position_id_per_seconds=pps) for pps in (25, 13)}
FAMILIES_3 = {pps: mrope.from_config(config) for pps, config in CONFIGS_3.items()}
VS, AS, IMG, VID, AUD = 151652, 151647, 151655, 151656, 151646


# -- Qwen2.5-Omni -------------------------------------------------------------------------------------
def audio_in_video(frames, side, seqlen, text=(1, 2)):
    nv = frames * (side // 2) ** 2
    na = int(FAMILY_2_5.audio_tokens(np.array([seqlen]))[0])
    ids = list(text) + [VS, AS] + [VID] * nv + [AUD] * na + [AS + 1, VS + 1] + list(text)
    return ids, nv, na


def test_qwen2_5_omni_chunk_boundary_inside_a_frame_matches_transformers():
    # 4 s per grid step: frame times 0, 100, 200, ...; the chunker takes one boundary per token, so
    # chunks 2 and 4 start one token into frames 1 and 2
    ids, nv, na = audio_in_video(4, 4, 500)
    prompt_kw = dict(video_grid_thw=[[4, 4, 4]], second_per_grid_ts=np.float32([4.0]), audio_seqlens=[500])
    positions, delta = FAMILY_2_5.positions(ids, use_audio_in_video=True, **prompt_kw)
    t_ids = torch.tensor([ids])
    theirs = transformers_rope_index(
        FAMILY_2_5,
        CONFIG_2_5,
        t_ids,
        attention_mask=torch.ones_like(t_ids),
        use_audio_in_video=True,
        video_grid_thw=torch.tensor([[4, 4, 4]]),
        second_per_grid_ts=torch.tensor([4.0]),
        audio_seqlens=torch.tensor([500]),
    )
    np.testing.assert_array_equal(positions, as_numpy(theirs[0])[:, 0], strict=True)
    assert delta == int(theirs[1][0, 0])
    # the two start markers share a position, as do the two end markers
    assert positions[0, 2] == positions[0, 3] and positions[0, 4 + nv + na] == positions[0, 5 + nv + na]


def test_qwen2_5_omni_audio_alone_is_text_like():
    ids = [1, AS] + [AUD] * 5 + [AS + 1, 2]
    positions, delta = FAMILY_2_5.positions(ids, audio_seqlens=[20])  # 20 -> 5 tokens
    assert (positions == np.arange(len(ids))).all() and delta == 0


def test_qwen2_5_omni_errors():
    ids, nv, na = audio_in_video(2, 4, 100)
    kw = dict(video_grid_thw=[[2, 4, 4]])
    with pytest.raises(
        mrope.MRopeError, match=r"video 0 is followed by its audio .* use_audio_in_video is False"
    ):
        FAMILY_2_5.positions(ids, audio_seqlens=[100], **kw)
    with pytest.raises(
        mrope.MRopeError,
        match=r"video 0 .* with its audio 0 \(26 tokens\) needs 8 video, 26 audio "
        r"placeholder tokens from stream index 4 of row 0, found 8 video, 25",
    ):
        FAMILY_2_5.positions(ids, audio_seqlens=[105], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"audio_seqlens\[0\] = -3: audio lengths must be >= 0"):
        FAMILY_2_5.positions(ids, audio_seqlens=[-3], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"audio_seqlens\[0\] = 2 gives 0 audio tokens"):
        FAMILY_2_5.positions(ids, audio_seqlens=[2], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"found 1 audios .* but audio_seqlens describes 0"):
        FAMILY_2_5.positions(ids, use_audio_in_video=True, **kw)
    plain = [1, VS] + [VID] * 8 + [VS + 1]
    with pytest.raises(mrope.MRopeError, match=r"use_audio_in_video is True but video 0 has no audio"):
        FAMILY_2_5.positions(plain, use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"found 2 audios .* but audio_seqlens describes 1"):
        FAMILY_2_5.positions([AS, AUD, AS + 1, AS, AUD, AS + 1], audio_seqlens=[3])
    with pytest.raises(mrope.MRopeError, match=r"1 audio placeholder tokens lie outside every item"):
        FAMILY_2_5.positions([1, AUD, 2])


def test_qwen2_5_omni_config_forms_and_other_families_refuse_audio():
    thinker = CONFIG_2_5.thinker_config
    for config in (CONFIG_2_5, thinker, CONFIG_2_5.to_dict(), thinker.to_dict()):
        family = mrope.from_config(config)
        assert (family.model_type, family.image_token_id, family.audio_token_id) == (
            "qwen2_5_omni_thinker",
            IMG,
            AUD,
        )
    qwen2 = mrope.from_config(
        {
            "model_type": "qwen2_vl",
            "image_token_id": 1,
            "video_token_id": 2,
            "vision_config": {"spatial_merge_size": 2},
        }
    )
    omni = sorted(t for t, cls in mrope.families.REGISTRY.items() if "audio_seqlens" in cls.extra_inputs)
    assert {"qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"} <= set(omni)
    owners = re.escape(f"(only for {', '.join(omni)})")
    with pytest.raises(mrope.MRopeError, match=f"qwen2_vl takes no audio_seqlens {owners}$"):
        qwen2.positions([5, 6], audio_seqlens=[10])
    with pytest.raises(mrope.MRopeError, match="qwen2_vl takes no use_audio_in_video"):
        mrope.get_rope_index(qwen2, np.array([[5, 6]]), use_audio_in_video=False)


# -- Qwen3-Omni ---------------------------------------------------------------------------------------
def test_qwen3_omni_fractional_positions_are_float32():
    family = FAMILIES_3[13]
    ids = [1, VS] + [VID] * 12 + [VS + 1, 2, 3]
    positions, delta = family.positions(ids, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[1 / 3])
    assert positions.dtype == np.float32 and isinstance(delta, float)
    t = np.float32(np.arange(3, dtype=np.float32) * np.float32(1 / 3) * np.float32(13)) + np.float32(2)
    assert positions[0, 2:14].tolist() == np.repeat(t, 4).tolist()  # 2, 6.333.., 10.666..
    assert positions[0, 14] == np.float32(t[-1] + 1)  # text resumes after the block's maximum
    ids_batch = np.array([ids])
    out, deltas = mrope.get_rope_index(
        family, ids_batch, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[1 / 3]
    )
    assert out.dtype == np.float32 and deltas.dtype == np.float32 and deltas[0, 0] == np.float32(delta)


def test_qwen3_omni_audio_in_video_merged_by_time():
    family = FAMILIES_3[25]
    # 2 frames of 4 tokens at times 0 and 25; 30 audio tokens at 0..29: frame 0, audio 0..24, frame 1, rest
    ids = [VS, AS] + [VID] * 8 + [AUD] * 30 + [AS + 1, VS + 1]
    seqlen = int(np.argmax(family.audio_tokens(np.arange(400)) == 30))
    positions, _ = family.positions(
        ids,
        video_grid_thw=[[2, 4, 4]],
        second_per_grid_ts=[1.0],
        audio_seqlens=[seqlen],
        use_audio_in_video=True,
    )
    assert positions[0, :2].tolist() == [0, 1]  # the two start markers take consecutive positions
    assert positions[0, 2:6].tolist() == [2] * 4 and positions[0, 6:31].tolist() == list(range(2, 27))
    assert positions[0, 31:35].tolist() == [27] * 4 and positions[0, 35:40].tolist() == list(range(27, 32))
    assert positions[0, 40:].tolist() == [32, 33]  # end markers follow the last piece (the audio tail)


def test_qwen3_omni_errors():
    family = FAMILIES_3[13]
    with pytest.raises(mrope.MRopeError, match=r"audio_seqlens\[1\] = -1: audio lengths must be >= 0"):
        family.positions([AS, AUD, AS + 1], audio_seqlens=[1, -1])
    with pytest.raises(
        mrope.MRopeError,
        match=r"audio 0 \(1 tokens\) needs 1 audio placeholder tokens from stream "
        r"index 2 of row 0, found 2 audio",
    ):
        family.positions([7, AS, AUD, AUD, AS + 1], audio_seqlens=[1])
    with pytest.raises(
        mrope.MRopeError, match=r"vision_start token at stream index 1 is followed by a text token"
    ):
        family.positions([7, VS, 8], image_grid_thw=[[1, 2, 2]])
    with pytest.raises(
        mrope.MRopeError,
        match=r"image 0 .* needs 1 placeholder tokens and 1 end token\(s\) .* the row ends first",
    ):
        family.positions([7, VS, IMG], image_grid_thw=[[1, 2, 2]])


# -- both thinkers ------------------------------------------------------------------------------------
QWEN2_5_VL = mrope.from_config(
    {
        "model_type": "qwen2_5_vl",
        "image_token_id": IMG,
        "video_token_id": VID,
        "vision_config": {"spatial_merge_size": 2, "tokens_per_second": 2},
    }
)


def one_item(family, kind):
    """A valid prompt of one item between text, its keyword inputs and where its placeholders start."""
    na = int(family.audio_tokens(np.array([100]))[0])
    video = dict(video_grid_thw=[[1, 4, 4]], second_per_grid_ts=[1.0])
    starts, ends = [VS], [VS + 1]
    if kind == "image":
        run, kw = [IMG] * 4, dict(image_grid_thw=[[1, 4, 4]])
    elif kind == "video":
        run, kw = [VID] * 4, video
    elif kind == "audio":
        starts, ends, run, kw = [AS], [AS + 1], [AUD] * na, dict(audio_seqlens=[100])
    else:  # a video with its audio
        starts, ends, run = [VS, AS], [AS + 1, VS + 1], [VID] * 4 + [AUD] * na
        kw = dict(**video, audio_seqlens=[100], use_audio_in_video=True)
    return [1, *starts, *run, *ends, 2], kw, 1 + len(starts)


@pytest.mark.parametrize("kind", ["image", "video", "audio", "video with audio"])
@pytest.mark.parametrize("family", [FAMILY_2_5, FAMILIES_3[13]], ids=["qwen2_5_omni", "qwen3_omni"])
def test_a_foreign_token_inside_a_run_is_refused_when_a_placeholder_follows(family, kind):
    valid, kw, content = one_item(family, kind)
    family.positions(valid, **kw)
    # a foreign token inside the run (among the audio tokens of a video with audio) and a placeholder
    # where the (first) end marker belongs: the count of placeholders up to the end marker(s) is right
    end = len(valid) - (3 if kind == "video with audio" else 2)
    at = content + (5 if kind == "video with audio" else 1)
    ids = list(valid)
    ids[at], ids[end] = 7, valid[end - 1]
    name = {"image": "image 0", "audio": "audio 0"}.get(kind, "video 0")

    def message(row):
        return (
            rf"placeholder tokens in one run from stream index {content} of row {row}, but token 7 at "
            rf"stream index {at} breaks the run \(it is no placeholder of the item\)$"
        )

    with pytest.raises(mrope.MRopeError, match=rf"^{name} .* {message(0)}"):
        family.positions(ids, **kw)
    # in a batch, the second row's item is named with its row's indices
    pad = len(ids) - 3
    batch = np.array([[1, 2, 3] + [0] * pad, ids])
    mask = np.array([[1, 1, 1] + [0] * pad, [1] * len(ids)])
    with pytest.raises(mrope.MRopeError, match=message(1)):
        mrope.get_rope_index(family, batch, attention_mask=mask, **kw)
    # Qwen2.5-VL refuses the same image or video layout
    if kind in ("image", "video"):
        with pytest.raises(mrope.MRopeError, match=r"needs 4 consecutive placeholder .* found a run of 1$"):
            QWEN2_5_VL.positions(ids, **{k: v for k, v in kw.items() if k != "second_per_grid_ts"})


def test_qwen3_omni_config_forms():
    config = CONFIGS_3[13]
    for form in (config, config.thinker_config, config.to_dict(), config.thinker_config.to_dict()):
        family = mrope.from_config(form)
        assert (family.model_type, family.position_id_per_seconds, family.n_window) == (
            "qwen3_omni_moe_thinker",
            13,
            50,
        )


# -- vLLM's rule (compat="vllm", video_time="float64") -----------------------------------------------
VLLM = {"compat": "vllm", "video_time": "float64"}


def test_the_rule_is_chosen_by_the_settings():
    for config in (CONFIG_2_5, CONFIGS_3[13]):
        assert mrope.from_config(config, **VLLM).vllm_rule
        assert not mrope.from_config(config).vllm_rule  # compat "vllm", float32: transformers' (and SGLang's)
        assert not mrope.from_config(config, compat="transformers", video_time="float64").vllm_rule
        assert not mrope.from_config(config, **VLLM).with_compat("transformers").vllm_rule


def test_qwen3_omni_vllm_positions_are_integers_and_fit_an_int64_table():
    family = mrope.from_config(CONFIGS_3[13], **VLLM)
    ids = [1, VS] + [VID] * 12 + [VS + 1, 2, 3]
    kwargs = dict(video_grid_thw=[[3, 4, 4]], second_per_grid_ts=np.float32([1 / 3]))
    positions, delta = family.positions(ids, **kwargs)
    # trunc(k * (float32(1/3) * 13)) in float64: 0, 4, 8 (transformers: 0, 4.333.., 8.666..)
    assert positions.dtype == np.int64 and type(delta) is int
    assert positions[0, 2:14].tolist() == [2] * 4 + [6] * 4 + [10] * 4
    assert positions[:, 14].tolist() == [11] * 3 and delta == 13 - len(ids) + 1
    table = mrope.PositionTable(2)
    table.add(0, family, ids, **kwargs)
    out = np.zeros((3, len(ids)), dtype=np.int64)
    table.fill(out, np.array([0]), np.array([0]), np.array([len(ids)]))
    np.testing.assert_array_equal(out, positions)
    with pytest.raises(mrope.MRopeError, match="float32 positions"):
        table.add(1, FAMILIES_3[13], ids, **kwargs)  # transformers' rule: fractional
    # no second_per_grid_ts: vLLM's 2 seconds per grid step (transformers' rule: 1)
    positions, _ = family.positions(ids, video_grid_thw=[[3, 4, 4]])
    assert positions[0, 2:14:4].tolist() == [2, 28, 54]


def test_qwen3_omni_vllm_end_markers_follow_the_blocks_largest_position():
    # frames at times 0 and 6 of 12 x 12 tokens, 8 audio tokens: frame 0, audio 0..5, frame 1, audio 6, 7;
    # the block's largest position is a frame's h and w (2 + 11), past the last piece (audio 7 at 9)
    family = mrope.from_config(CONFIGS_3[25], **VLLM)
    seqlen = int(np.argmax(family.audio_tokens(np.arange(400)) == 8))
    ids = [VS, AS] + [VID] * 144 + [AUD] * 6 + [VID] * 144 + [AUD] * 2 + [AS + 1, VS + 1]
    kwargs = dict(video_grid_thw=[[2, 24, 24]], second_per_grid_ts=np.float32([0.25]), audio_seqlens=[seqlen])
    positions, delta = family.positions(ids, use_audio_in_video=True, **kwargs)
    assert positions[0, :3].tolist() == [0, 1, 2] and positions[2, 145] == 13  # frame 0 at base 2
    assert positions[:, 146:152].tolist() == [list(range(2, 8))] * 3 and positions[0, 152] == 8  # frame 1
    assert positions[:, 296:298].tolist() == [[8, 9]] * 3
    assert positions[0, 298:].tolist() == [14, 15] and delta == 16 - len(ids)
    theirs, _ = mrope.from_config(CONFIGS_3[25]).positions(ids, use_audio_in_video=True, **kwargs)
    assert theirs[0, 298:].tolist() == [10, 11]  # transformers': after the last piece


def test_qwen2_5_omni_vllm_chunks_from_the_audio_start_marker():
    # tokens_per_second 25 (vLLM's default), 2 s per chunk: frames at 0, 25, 50 fall in buckets 0, 0, 1;
    # the block starts at audio_start (stream 3, base 3) and holds the 12 video and 60 audio tokens:
    # frames 0 and 1, audio 0..49, frame 2, audio 50..59; the last placeholder and the end markers follow
    family = mrope.from_config(CONFIG_2_5, **VLLM)
    seqlen = int(np.argmax(FAMILY_2_5.audio_tokens(np.arange(400)) == 60))
    ids, nv, na = audio_in_video(3, 4, seqlen)
    assert (nv, na) == (12, 60)
    kwargs = dict(video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[1.0], audio_seqlens=[seqlen])
    positions, delta = family.positions(ids, use_audio_in_video=True, **kwargs)
    assert positions[:, :4].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]  # the markers too
    assert positions[:, 6].tolist() == [3, 4, 4] and positions[0, 7] == 28  # frames 0 and 1
    assert positions[:, 11].tolist() == [3] * 3 and positions[:, 60].tolist() == [52] * 3  # audio chunk 0
    assert positions[0, 61:65].tolist() == [53] * 4 and positions[:, 74].tolist() == [62] * 3
    assert positions[0, 75:].tolist() == [63, 64, 65, 66, 67] and delta == 68 - len(ids)
    theirs, their_delta = FAMILY_2_5.positions(ids, use_audio_in_video=True, **kwargs)
    assert their_delta != delta and theirs[0, 3] == 2  # transformers': audio_start at vision_start's


def test_qwen2_5_omni_vllm_reads_tokens_per_second():
    config = CONFIG_2_5.to_dict()
    config["thinker_config"]["vision_config"]["tokens_per_second"] = 10
    family = mrope.from_config(config, **VLLM)
    assert family.time_rate == 10 and family.tokens_per_chunk == 20
    assert mrope.from_config(config).time_rate == 25  # transformers' reads position_id_per_seconds
    ids = [VS] + [VID] * 12 + [VS + 1]
    positions, _ = family.positions(ids, video_grid_thw=[[3, 4, 4]], second_per_grid_ts=[0.7])
    assert positions[0, 1:13:4].tolist() == [1, 8, 15]  # trunc(k * 7.0) in float64
    with pytest.raises(mrope.MRopeError, match=r"tokens_per_second \* seconds_per_chunk must be >= 1"):
        mrope.from_config(config, **VLLM, tokens_per_second=0.1)
