"""The vLLM plugin end to end on the Omni thinkers: vLLM 0.32's CPU engine on tiny random Qwen2.5-Omni
(``Qwen2_5OmniModel``) and Qwen3-Omni (``Qwen3OmniMoeForConditionalGeneration``, MoE) checkpoints,
served as their thinkers; greedy tokens with and without the plugin.

The plugin serves the thinkers under vLLM's rule (``from_config(config, **VLLM_SETTINGS)``, admission
inputs from ``omni_inputs``). The prompts (:func:`support.vllm_harness.omni_prompts`) have images,
audio alone, a video whose scaled time passes its spatial extent, a video with its audio
(``use_audio_in_video``: interleaved in chunks by Qwen2.5-Omni, merged by time by Qwen3-Omni) and an
image with audio; prefill chunks end inside images and audio, and the small KV cache preempts requests.
Check mode compares every step's positions with vLLM's own. Negative controls, so that equal tokens
mean something: the t row copied onto h and w changes the tokens of vision prompts, and mrope serving
the thinker with a rule wrong by a little (one setting of the family changed) changes exactly the
tokens of the prompts that setting concerns.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from support import checkpoints
from support import vllm_harness as harness

VISION = {"image", "image_long", "video", "video_with_audio", "image_audio"}

# family -> [(setting of the served family changed, prompts whose tokens it must change)]
WRONG_RULES = {
    "qwen2_5_omni": [
        # the interleaving chunk one time unit short (int(25 * 1.96) = 49 of 50)
        ({"seconds_per_chunk": 1.96}, {"video_with_audio"}),
        # vLLM's video time rate 24 for 25 (images have one temporal patch: unchanged)
        ({"tokens_per_second": 24}, {"video", "video_with_audio"}),
    ],
    "qwen3_omni_moe": [
        ({"position_id_per_seconds": 12}, {"video", "video_with_audio"}),
    ],
}


def _changed(expected: list[list[int]], tokens: list[list[int]]) -> set[str]:
    """The names of the prompts whose tokens differ."""
    return {n for n, a, b in zip(harness.OMNI_PROMPT_NAMES, expected, tokens, strict=True) if a != b}


@pytest.mark.parametrize("omni_dir", checkpoints.OMNI_FAMILIES, indirect=True)
def test_omni_tokens_equal_vllm(omni_dir: Path, plugin_off: None) -> None:
    """vLLM's own path, check mode and the plugin give the same greedy tokens on every prompt; the
    plugin admitted every request and wrote every step (no fallback); wrong positions change tokens."""
    family = harness.family_of(omni_dir)
    prompts = harness.prompt_list(family)
    with harness.Engine(omni_dir) as engine:
        expected = engine.generate(prompts)
        lengths = dict(zip(harness.OMNI_PROMPT_NAMES, engine.last.prompt_lengths, strict=True))
        assert lengths["audio_long"] - lengths["audio"] > 30, lengths  # the audio is in the prompt
        assert lengths["video_with_audio"] - lengths["video"] > 30, lengths  # and beside the video
        assert engine.last.preemptions > 0, "the run must preempt requests"

        harness.check_then_serve(engine, prompts, expected)

        with harness.wrong_positions() as wrong:  # negative control, through the plugin's step
            corrupted = engine.generate(prompts)
        assert wrong.changed > 0
        changed = _changed(expected, corrupted)
        assert changed and changed <= VISION, changed

        # the Omni rule itself, wrong by a little inside the plugin (the runner's family replaced)
        served = harness.served_family(engine)
        for setting, concerned in WRONG_RULES[family]:
            with harness.serving(engine, dataclasses.replace(served, **setting)):
                assert _changed(expected, engine.generate(prompts)) == concerned, setting
        assert engine.generate(prompts) == expected

        harness.disabled_gives(engine, prompts, expected)
