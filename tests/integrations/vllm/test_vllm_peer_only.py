"""The vLLM plugin end to end on the families whose only peer is vLLM: vLLM 0.32's CPU engine on tiny
random checkpoints (:mod:`support.checkpoints_vllm_only`), greedy tokens with and without the plugin.

Which of these vLLM's CPU backend runs from an offline checkpoint: Qwen3-ASR and MiniCPM-V 4.6 (every
token in order, the three rows equal; audio and image placeholders positioned as text). The others do
not start here (README, "Use with vLLM" says why): Keye-VL, Keye-VL-1.5 and OpenPangu-VL need their
vendors' remote code (config and processor), BailingMoeV3-VL fails at engine start (its hybrid
linear-attention / MLA KV blocks are aligned to 128 tokens, which the CPU MLA backend refuses) and takes a
remote-code processor, and the plugin keeps vLLM's path for Isaac (its config lacks the placeholder id).

The prompts have text alone, items (audio, images) of several sizes (a prefill chunk ends inside the long
prompts' item), a prefix-cache hit and two items in one prompt; the small KV cache preempts Qwen3-ASR's
requests (MiniCPM-V 4.6's hybrid KV blocks hold a whole prompt: its requests queue). Check mode compares
every step with vLLM's positions. Negative controls: the t row copied onto h and w changes nothing here
(the rows are equal), and mrope serving a rule wrong by a little (each placeholder run laid out as a
``(1, 1, n)`` block: its w row counts on, its t and h rows stay at the run's first position) changes
the tokens of the prompts with items (all, or all but one: a tiny random model's greedy tokens may keep
one prompt's on some CPUs), and of no other.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mrope.core import Blocks
from mrope.families import Family
from mrope.families.inputs import RequestInputs
from support import checkpoints
from support import vllm_harness as harness
from support.checkpoints_vllm_only import VLLM_ONLY_FAMILIES

_AUDIO = "<|audio_start|><|audio_pad|><|audio_end|>"
_LONG_TEXT = "You are a helpful assistant. The quick brown fox jumps over the lazy dog. Tell me a story."

# name -> vLLM prompt (Qwen3-ASR: 16 kHz audio; 1.3 s is 17 placeholder tokens, 4.5 s 59)
ASR_PROMPTS: dict[str, dict[str, Any]] = {
    "text": harness.TEXT_PROMPT,
    "audio": {
        "prompt": f"Listen. {_AUDIO} What is it?",
        "multi_modal_data": {"audio": harness.audio(1.3, seed=3)},
    },
    "audio_long": {
        "prompt": f"{_LONG_TEXT} {_AUDIO} one two three",
        "multi_modal_data": {"audio": harness.audio(4.5, seed=4)},
    },
    "audio_long_again": {
        "prompt": f"{_LONG_TEXT} {_AUDIO} four five six seven",
        "multi_modal_data": {"audio": harness.audio(4.5, seed=4)},
    },
    "two_audios": {
        "prompt": f"Compare {_AUDIO} and {_AUDIO} please.",
        "multi_modal_data": {"audio": [harness.audio(1.0, seed=5), harness.audio(2.2, seed=6)]},
    },
}
_IMAGE = "<|image_pad|>"
# MiniCPM-V 4.6: an image of 224 x 224 pixels (or less) is 16 placeholder tokens
MINICPMV4_6_PROMPTS: dict[str, dict[str, Any]] = {
    "text": ASR_PROMPTS["text"],
    "image": {
        "prompt": f"Describe the image. {_IMAGE} What is in the picture?",
        "multi_modal_data": {"image": harness.image(224, 224, seed=1)},
    },
    "image_long": {
        "prompt": f"{_LONG_TEXT} {_IMAGE} one two three",
        "multi_modal_data": {"image": harness.image(168, 224, seed=2)},
    },
    "image_long_again": {
        "prompt": f"{_LONG_TEXT} {_IMAGE} four five six seven",
        "multi_modal_data": {"image": harness.image(168, 224, seed=2)},
    },
    "two_images": {
        "prompt": f"Compare {_IMAGE} and {_IMAGE} please.",
        "multi_modal_data": {"image": [harness.image(224, 168, seed=3), harness.image(112, 224, seed=4)]},
    },
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A family's prompts, its placeholder token, the prompts with items (those a wrong rule for the
    placeholders concerns), and whether its runs preempt requests (a hybrid model's KV block holds a
    whole prompt: it queues them instead)."""

    prompts: dict[str, dict[str, Any]]
    placeholder: str
    with_items: frozenset[str]
    preempts: bool = True


CASES = {
    "qwen3_asr": Case(ASR_PROMPTS, "<|audio_pad|>", frozenset(ASR_PROMPTS) - {"text"}),
    "minicpmv4_6": Case(MINICPMV4_6_PROMPTS, _IMAGE, frozenset(MINICPMV4_6_PROMPTS) - {"text"}, False),
}


class _RunsAsBlocks:
    """Mixin of the wrong rule: each run of ``placeholder_id`` is a ``(1, 1, n)`` block (w counts on,
    t and h stay at the run's first position; text resumes where it would have)."""

    placeholder_id: int

    def parse(self, inputs: RequestInputs) -> Blocks:
        mask = np.concatenate([[0], (inputs.array == self.placeholder_id).astype(np.int8), [0]])
        edges = np.flatnonzero(np.diff(mask))
        start, width = edges[0::2].astype(np.int64), (edges[1::2] - edges[0::2]).astype(np.int64)
        ones = np.ones_like(width)
        interval = np.ones(width.size, dtype=np.float32)
        return Blocks(start=start, frames=ones, height=ones, width=width, interval=interval, num_tokens=width)


def runs_as_blocks(family: Family, placeholder_id: int) -> Family:
    """``family`` with the wrong rule of :class:`_RunsAsBlocks` (its settings kept)."""
    wrong_class = type(f"{type(family).__name__}RunsAsBlocks", (_RunsAsBlocks, type(family)), {})
    fields = {f.name: getattr(family, f.name) for f in dataclasses.fields(family) if f.init}
    wrong = wrong_class(**fields)
    wrong.placeholder_id = placeholder_id
    return wrong


def _changed(names: list[str], expected: list[list[int]], tokens: list[list[int]]) -> set[str]:
    """The names of the prompts whose tokens differ."""
    return {n for n, a, b in zip(names, expected, tokens, strict=True) if a != b}


@pytest.mark.parametrize("vllm_only_dir", VLLM_ONLY_FAMILIES, indirect=True)
def test_peer_only_tokens_equal_vllm(vllm_only_dir: Path, plugin_off: None) -> None:
    """vLLM's own path, check mode and the plugin give the same greedy tokens on every prompt; the
    plugin admitted every request and wrote every step (no fallback); a wrong rule changes the
    tokens of the prompts it concerns."""
    case = CASES[harness.family_of(vllm_only_dir)]
    names, prompts = list(case.prompts), list(case.prompts.values())
    with harness.Engine(vllm_only_dir) as engine:
        expected = engine.generate(prompts)
        lengths = dict(zip(names, engine.last.prompt_lengths, strict=True))
        assert lengths["two_images" if "two_images" in lengths else "two_audios"] > 40, lengths  # the items
        assert (engine.last.preemptions > 0) == case.preempts, engine.last.preemptions

        harness.check_then_serve(engine, prompts, expected)

        with harness.wrong_positions() as wrong:  # the rows are equal: copying t onto h and w is a no-op
            assert engine.generate(prompts) == expected
        assert wrong.steps > 0 and wrong.changed == 0

        placeholder = checkpoints.special_ids(vllm_only_dir)[case.placeholder]
        with harness.serving(engine, runs_as_blocks(harness.served_family(engine), placeholder)):
            # only prompts with items change, most of them: a tiny random model's greedy tokens (bfloat16
            # for MiniCPM-V 4.6) may keep one prompt's tokens on some CPUs, as seen for image_long
            changed = _changed(names, expected, engine.generate(prompts))
            assert changed <= case.with_items and len(changed) >= len(case.with_items) - 1, changed
        assert engine.generate(prompts) == expected

        harness.disabled_gives(engine, prompts, expected)


@pytest.mark.parametrize("vllm_only_dir", VLLM_ONLY_FAMILIES, indirect=True)
def test_peer_only_entry_point(vllm_only_dir: Path, plugin_off: None) -> None:
    """``MROPE_VLLM=1`` under vLLM's multiprocessing: the plugin, loaded by vLLM's entry point in the
    engine-core process, serves every request; the tokens equal vLLM's own."""
    prompts = list(CASES[harness.family_of(vllm_only_dir)].prompts.values())
    with harness.Engine(vllm_only_dir) as engine:
        expected = engine.generate(prompts)
    served = harness.run_subprocess_full(vllm_only_dir, prompts, env={"MROPE_VLLM": "1"})
    assert served.tokens == expected
    (worker,) = served.workers
    stats = worker["mrope_stats"]
    assert stats["admitted"] == len(prompts) and stats["steps"] > 0
    assert stats["fallback_requests"] == stats["fallback_steps"] == 0
