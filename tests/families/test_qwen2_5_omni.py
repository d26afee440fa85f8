"""Qwen2.5-Omni (thinker) against transformers: audio, audio in video (chunked interleave, shared start
and end positions), images, videos, padding. SGLang has no Qwen2.5-Omni position code."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _peers import require_module

require_module("transformers")
from _builders import check_omni_against_transformers, omni_prompts  # noqa: E402

import mrope  # noqa: E402
from peers import transformers_omni_config  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONFIG = transformers_omni_config("qwen2_5_omni")
FAMILY = mrope.from_config(CONFIG)
VS, AS, IMG, VID, AUD = 151652, 151647, 151655, 151656, 151646


@pytest.mark.parametrize("use_audio_in_video", [False, True])
@SETTINGS
@given(data=st.data(), left=st.booleans())
def test_matches_transformers(use_audio_in_video, data, left):
    prompt = data.draw(omni_prompts(FAMILY, use_audio_in_video=use_audio_in_video))
    check_omni_against_transformers(CONFIG, prompt, use_audio_in_video=use_audio_in_video, left=left)


def audio_in_video(frames, side, seqlen, text=(1, 2)):
    nv = frames * (side // 2) ** 2
    na = int(FAMILY.audio_tokens(np.array([seqlen]))[0])
    ids = list(text) + [VS, AS] + [VID] * nv + [AUD] * na + [AS + 1, VS + 1] + list(text)
    return ids, nv, na


def test_chunk_boundary_inside_a_frame_matches_transformers():
    # 4 s per grid step: frame times 0, 100, 200, ...; the chunker takes one boundary per token, so
    # chunks 2 and 4 start one token into frames 1 and 2
    ids, nv, na = audio_in_video(4, 4, 500)
    prompt_kw = dict(video_grid_thw=[[4, 4, 4]], second_per_grid_ts=np.float32([4.0]), audio_seqlens=[500])
    positions, delta = FAMILY.positions(ids, use_audio_in_video=True, **prompt_kw)
    import torch

    from peers import as_numpy, transformers_rope_index

    t_ids = torch.tensor([ids])
    theirs = transformers_rope_index(
        FAMILY,
        CONFIG,
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


def test_audio_alone_is_text_like():
    ids = [1, AS] + [AUD] * 5 + [AS + 1, 2]
    positions, delta = FAMILY.positions(ids, audio_seqlens=[20])  # 20 -> 5 tokens
    assert (positions == np.arange(len(ids))).all() and delta == 0


def test_errors():
    ids, nv, na = audio_in_video(2, 4, 100)
    kw = dict(video_grid_thw=[[2, 4, 4]])
    with pytest.raises(
        mrope.MRopeError, match=r"video 0 is followed by its audio .* use_audio_in_video is False"
    ):
        FAMILY.positions(ids, audio_seqlens=[100], **kw)
    with pytest.raises(
        mrope.MRopeError,
        match=r"video 0 .* with its audio 0 \(26 tokens\) needs 8 video, 26 audio "
        r"placeholder tokens from stream index 4 of row 0, found 8 video, 25",
    ):
        FAMILY.positions(ids, audio_seqlens=[105], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"audio_seqlens\[0\] = -3: audio lengths must be >= 0"):
        FAMILY.positions(ids, audio_seqlens=[-3], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"audio_seqlens\[0\] = 2 gives 0 audio tokens"):
        FAMILY.positions(ids, audio_seqlens=[2], use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"found 1 audios .* but audio_seqlens describes 0"):
        FAMILY.positions(ids, use_audio_in_video=True, **kw)
    plain = [1, VS] + [VID] * 8 + [VS + 1]
    with pytest.raises(mrope.MRopeError, match=r"use_audio_in_video is True but video 0 has no audio"):
        FAMILY.positions(plain, use_audio_in_video=True, **kw)
    with pytest.raises(mrope.MRopeError, match=r"found 2 audios .* but audio_seqlens describes 1"):
        FAMILY.positions([AS, AUD, AS + 1, AS, AUD, AS + 1], audio_seqlens=[3])
    with pytest.raises(mrope.MRopeError, match=r"1 audio placeholder tokens lie outside every item"):
        FAMILY.positions([1, AUD, 2])


def test_config_forms_and_other_families_refuse_audio():
    thinker = CONFIG.thinker_config
    for config in (CONFIG, thinker, CONFIG.to_dict(), thinker.to_dict()):
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
    with pytest.raises(mrope.MRopeError, match="qwen2_vl takes no audio_seqlens .only the Omni families do."):
        qwen2.positions([5, 6], audio_seqlens=[10])
    with pytest.raises(mrope.MRopeError, match="qwen2_vl takes no use_audio_in_video"):
        mrope.get_rope_index(qwen2, np.array([[5, 6]]), use_audio_in_video=False)
