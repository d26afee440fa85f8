"""mrope inside SGLang's engine, end to end: greedy tokens with and without the integration, through the
entry point (``MROPE_SGLANG`` read by SGLang's plugin loading in every process) and in check mode, with
chunked prefill ending inside an image, radix-cache hits, batched decode, text-only prompts and reused
request slots; negative controls: wrong positions change the tokens, check mode raises on a wrong step,
and a failing step falls back to SGLang's path with the same tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

FAMILIES = ("qwen2_5_vl", "qwen3_vl", "glm4v")
NUM_PROMPTS = 7  # both rounds of _engine.prompts
# get_rope_index calls at least (the first round's three image prompts; SGLang caches the positions of a
# prompt text and image grids it has seen); Qwen3-VL image-only prompts take SGLang's own offsets path
SERVED_PROMPTS = {"qwen2_5_vl": 3, "qwen3_vl": 0, "glm4v": 3}
IMAGE_PROMPTS = (0, 2, 3)  # first round's prompts with images


@pytest.fixture(scope="session")
def family_runs(checkpoint: Any, run_engines: Any) -> Any:
    """``family_runs(family)``: SGLang alone, with mrope, in check mode (one subprocess per family, run
    once): ``{"family": ..., "0": ..., "1": ..., "check": ...}``."""
    done: dict[str, dict[str, Any]] = {}

    def get(family: str) -> dict[str, Any]:
        if family not in done:
            code, output, results = run_engines(checkpoint(family), ["0", "1", "check"])
            assert code == 0 and results, output[-4000:]
            done[family] = {"family": family, **{r["mode"]: r for r in results}}
        return done[family]

    return get


@pytest.fixture(scope="module", params=FAMILIES)
def runs(request: pytest.FixtureRequest, family_runs: Any) -> dict[str, Any]:
    return family_runs(request.param)


def test_tokens_equal_with_mrope(runs: dict[str, Any]) -> None:
    assert runs["1"]["tokens"] == runs["0"]["tokens"], runs["family"]


def test_mrope_serves_every_step(runs: dict[str, Any]) -> None:
    scheduler, main = runs["1"]["scheduler"], runs["1"]["main"]
    assert scheduler["admitted"] == NUM_PROMPTS
    assert scheduler["reused_slots"] >= 2  # the second round's requests took the first round's slots
    assert scheduler["extend_steps"] > 0 and scheduler["decode_steps"] >= NUM_PROMPTS // 2
    assert scheduler["fallback_steps"] == scheduler["fallback_requests"] == 0
    # every request registered by copying its packed prompt (image prompts packed by the tokenizer
    # process, text-only ones one segment), SGLang's (3, L) positions neither shipped nor rebuilt
    assert scheduler["from_packed"] == NUM_PROMPTS and scheduler["from_positions"] == 0
    assert scheduler["materialized"] == 0
    assert main["packed"] >= len(IMAGE_PROMPTS) and main["fallback_packs"] == 0
    assert main["prompts"] >= SERVED_PROMPTS[runs["family"]] and main["fallback_prompts"] == 0


def test_check_mode_compares_every_step(runs: dict[str, Any]) -> None:
    check = runs["check"]
    assert check["tokens"] == runs["0"]["tokens"]
    scheduler = check["scheduler"]
    assert scheduler["checked_steps"] == scheduler["extend_steps"] + scheduler["decode_steps"] > 0
    assert check["main"]["checked_prompts"] == check["main"]["prompts"] >= SERVED_PROMPTS[runs["family"]]


def test_radix_cache_hit_through_the_image(runs: dict[str, Any]) -> None:
    """The second round's long prompt reuses the first's prefix, image included (more than a chunk)."""
    for mode in ("0", "1"):
        assert runs[mode]["cached"][1][0] > 32, runs[mode]["cached"]


@pytest.fixture(scope="module")
def qwen2_5_vl(checkpoint: Any) -> Path:
    return checkpoint("qwen2_5_vl")


@pytest.fixture(scope="module")
def reference(family_runs: Any) -> list[list[list[int]]]:
    """SGLang's own tokens on the Qwen2.5-VL prompts."""
    return family_runs("qwen2_5_vl")["0"]["tokens"]


def test_wrong_positions_change_the_tokens(qwen2_5_vl: Path, run_engines: Any, reference: Any) -> None:
    """Negative control: mrope's step positions with the h and w rows replaced by the t row."""
    code, output, results = run_engines(qwen2_5_vl, ["1"], fault="wrong")
    assert code == 0 and results, output[-4000:]
    tokens = results[0]["tokens"][0]
    assert results[0]["scheduler"]["extend_steps"] > 0
    assert any(tokens[i] != reference[0][i] for i in IMAGE_PROMPTS)


def test_check_mode_raises_on_a_wrong_step(qwen2_5_vl: Path, run_engines: Any) -> None:
    code, output, _ = run_engines(qwen2_5_vl, ["check"], fault="wrong")
    assert code != 0
    assert "MRopeError: mrope check: request" in output and "from SGLang" in output


def test_failing_step_falls_back_to_sglang(qwen2_5_vl: Path, run_engines: Any, reference: Any) -> None:
    """Any exception in mrope's step hands the batch to SGLang's path: same tokens, counted."""
    code, output, results = run_engines(qwen2_5_vl, ["1"], fault="raise")
    assert code == 0 and results, output[-4000:]
    assert results[0]["tokens"] == reference
    scheduler = results[0]["scheduler"]
    assert scheduler["extend_steps"] == scheduler["decode_steps"] == 0
    assert scheduler["fallback_steps"] > 0
    # SGLang's path read the stored positions of the prompts shipped packed: rendered from them
    assert scheduler["materialized"] >= len(IMAGE_PROMPTS)
