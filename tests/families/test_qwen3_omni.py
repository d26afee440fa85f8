"""Qwen3-Omni (thinker) against transformers and SGLang: float32 positions (fractional video time), audio,
audio in video (merged by time), images, videos, padding; position_id_per_seconds 25 (class default)
and 13 (the checkpoints)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import (  # noqa: E402
    check_omni_against_sglang,
    check_omni_against_transformers,
    omni_prompts,
    require_sglang,
)

import mrope  # noqa: E402
from peers import transformers_omni_config  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIGS = {pps: transformers_omni_config("qwen3_omni_moe", position_id_per_seconds=pps) for pps in (25, 13)}
FAMILIES = {pps: mrope.from_config(config) for pps, config in CONFIGS.items()}
VS, AS, IMG, VID, AUD = 151652, 151647, 151655, 151656, 151646


@pytest.mark.parametrize("pps", [25, 13])
@pytest.mark.parametrize("use_audio_in_video", [False, True])
@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(pps, use_audio_in_video, data, left):
    prompt = data.draw(omni_prompts(FAMILIES[pps], use_audio_in_video=use_audio_in_video))
    check_omni_against_transformers(CONFIGS[pps], prompt, use_audio_in_video=use_audio_in_video, left=left)


@pytest.mark.parametrize("use_audio_in_video", [False, True])
@SETTINGS
@given(data=st.data())
def test_matches_sglang(use_audio_in_video, data):
    require_sglang()
    prompt = data.draw(omni_prompts(FAMILIES[13], use_audio_in_video=use_audio_in_video))
    check_omni_against_sglang(CONFIGS[13], prompt, use_audio_in_video=use_audio_in_video)


def test_fractional_positions_are_float32():
    family = FAMILIES[13]
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


def test_audio_in_video_merged_by_time():
    family = FAMILIES[25]
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


def test_errors():
    family = FAMILIES[13]
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


def test_config_forms():
    config = CONFIGS[13]
    for form in (config, config.thinker_config, config.to_dict(), config.thinker_config.to_dict()):
        family = mrope.from_config(form)
        assert (family.model_type, family.position_id_per_seconds, family.n_window) == (
            "qwen3_omni_moe_thinker",
            13,
            50,
        )
