"""The vLLM plugin end to end: vLLM 0.32's CPU engine on tiny random Qwen2.5-VL, Qwen3-VL and
GLM-4.1V checkpoints, greedy tokens with and without the plugin.

Every run has chunked prefill ending inside images and videos, prefix-cache hits and preemption
(:mod:`support.vllm_harness`), images of several sizes, videos whose scaled time reaches past their spatial
extent and a text-only prompt. Negative controls: the same runs with deliberately wrong positions
must change the tokens (so equal tokens mean something), and check mode must catch a wrong mrope.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import mrope
from mrope.integrations import vllm as plugin
from mrope.integrations.vllm import models, v1
from support import checkpoints
from support import vllm_harness as harness


def _vision_changed(base: list[list[int]], other: list[list[int]], prompts: list[dict]) -> int:
    """How many vision prompts got other tokens."""
    return sum(a != b for a, b, p in zip(base, other, prompts, strict=True) if harness.has_vision(p))


@pytest.mark.parametrize("model_dir", checkpoints.FAMILIES, indirect=True)
def test_tokens_equal_vllm_in_process(model_dir: Path, plugin_off: None) -> None:
    """vLLM's own path, check mode and the plugin give the same greedy tokens; the plugin served
    every request and step (no fallback); wrong positions change them."""
    prompts = harness.prompt_list(harness.family_of(model_dir))
    with harness.Engine(model_dir) as engine:
        expected = engine.generate(prompts)
        assert engine.last.preemptions > 0, "the run must preempt requests"

        plugin.enable("check")
        assert engine.generate(prompts) == expected
        checked = plugin.stats()
        assert checked["checked_steps"] > 0 and checked["admitted"] == len(prompts)

        plugin.enable("mrope")  # switches mode
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert engine.last.preemptions > 0
        served = plugin.stats()
        assert served["admitted"] == len(prompts)
        assert served["steps"] > 0 and served["checked_steps"] == 0
        assert served["fallback_requests"] == served["fallback_steps"] == 0

        with harness.wrong_positions() as wrong:  # negative control, through the plugin's step
            corrupted = engine.generate(prompts)
        assert wrong.changed > 0
        assert _vision_changed(expected, corrupted, prompts) > 0

        plugin.disable()
        before = plugin.stats()
        assert engine.generate(prompts) == expected  # vLLM's own path again
        assert plugin.stats() == before


def test_check_mode_names_the_first_wrong_column(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check mode compares every step: an mrope that writes a wrong h row is reported with the
    request, the step and the column."""
    fill = mrope.PositionTable.fill

    def wrong_fill(self, out, *args, **kwargs):
        num = fill(self, out, *args, **kwargs)
        out[1, :num] += 1
        return num

    monkeypatch.setattr(mrope.PositionTable, "fill", wrong_fill)
    prompts = harness.prompt_list("qwen2_5_vl", ["image"])
    plugin.enable("check")
    with harness.Engine(qwen2_5_vl_dir) as engine, pytest.raises(Exception) as caught:
        engine.generate(prompts)
    chain = [caught.value, *_causes(caught.value)]
    assert any(
        isinstance(e, mrope.MRopeError) and "mrope check: request" in str(e) and "step 1: column 0" in str(e)
        for e in chain
    ), chain


def _causes(error: BaseException) -> Iterator[BaseException]:
    while (error := error.__cause__ or error.__context__) is not None:
        yield error


def test_entry_point_with_vllm_multiprocessing(qwen2_5_vl_dir: Path, plugin_off: None) -> None:
    """``MROPE_VLLM=1``: vLLM loads the plugin in its engine-core process by itself (default
    multiprocessing); the tokens equal vLLM's, the plugin's counters there show it served the run.
    Without the variable, the plugin stays off."""
    prompts = harness.prompt_list("qwen2_5_vl")
    with harness.Engine(qwen2_5_vl_dir) as engine:
        expected = engine.generate(prompts)
    served = harness.run_subprocess_full(qwen2_5_vl_dir, prompts, env={"MROPE_VLLM": "1"})
    assert served.tokens == expected
    assert served.preemptions > 0
    (worker,) = served.workers
    assert worker["mrope_stats"]["admitted"] == len(prompts)
    assert worker["mrope_stats"]["steps"] > 0
    assert worker["mrope_stats"]["fallback_steps"] == 0

    off = harness.run_subprocess_full(qwen2_5_vl_dir, prompts[:2], env={"MROPE_VLLM": None})
    assert off.workers[0]["mrope_stats"]["steps"] == 0


def test_model_without_rule_is_served_in_positions_mode(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model mrope has no rule for (forced: ``unsupported_reason`` names one) is served in positions
    mode: vLLM's own prompt positions registered, every step the table's. Check mode compares each
    step with vLLM's; the tokens equal vLLM's through preemption and prefix-cache hits; registered
    positions corrupted (h and w rows made the t row) change the tokens of the prompts with images."""
    prompts = harness.prompt_list("qwen2_5_vl")
    with harness.Engine(qwen2_5_vl_dir) as engine:
        expected = engine.generate(prompts)
        monkeypatch.setattr(
            models, "unsupported_reason", lambda family: f"{family.model_type}: pretend no rule"
        )

        plugin.enable("check")
        assert engine.generate(prompts) == expected
        checked = plugin.stats()
        assert checked["positions_runners"] == 1
        assert checked["positions_requests"] == checked["admitted"] == len(prompts)
        assert checked["checked_steps"] == checked["steps"] > 0
        assert checked["fallback_requests"] == checked["fallback_steps"] == 0

        plugin.enable("mrope")
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert engine.last.preemptions > 0
        served = plugin.stats()
        assert served["positions_requests"] == served["admitted"] == len(prompts)
        assert served["steps"] > 0 and served["checked_steps"] == 0
        assert served["fallback_requests"] == served["fallback_steps"] == 0

        with harness.flattened_positions() as flattened:  # negative control, through add_positions
            corrupted = engine.generate(prompts)
        assert flattened.changed > 0
        assert _vision_changed(expected, corrupted, prompts) > 0


def test_pruning_keeps_vllms_path(qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch) -> None:
    """A runner no table serves (forced: video token pruning, or other than 3 rows): vLLM's own path
    computes every position (counted, logged), the tokens are vLLM's."""
    prompts = harness.prompt_list("qwen2_5_vl", ["image", "text"])
    with harness.Engine(qwen2_5_vl_dir) as engine:
        expected = engine.generate(prompts)
        monkeypatch.setattr(v1, "vllm_path_reason", lambda config, pruning: "pretend pruning")
        plugin.enable()
        assert engine.generate(prompts) == expected
    stats = plugin.stats()
    assert stats["fallback_requests"] == len(prompts) and stats["fallback_steps"] > 0
    assert stats["steps"] == stats["admitted"] == stats["positions_runners"] == 0


def test_refused_request_is_served_from_vllms_positions(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request whose inputs mrope's rule refuses (a plain exception) gets vLLM's positions in the
    table, the runner keeps serving the others by the rule; when the table refuses those positions
    too, the runner hands every request to vLLM's path. The tokens stay vLLM's."""
    prompts = harness.prompt_list("qwen2_5_vl")
    inputs = v1.admission_inputs

    def refuse_videos(family, features):
        if any(f.modality == "video" for f in features):
            raise ValueError("pretend malformed video feature")
        return inputs(family, features)

    with harness.Engine(qwen2_5_vl_dir) as engine:
        expected = engine.generate(prompts)
        monkeypatch.setattr(v1, "admission_inputs", refuse_videos)
        plugin.enable()
        assert engine.generate(prompts) == expected
        stats = plugin.stats()
        videos = sum("video" in p.get("multi_modal_data", {}) for p in prompts)
        assert videos > 0 and stats["fallback_requests"] == videos
        assert stats["admitted"] == len(prompts) and stats["positions_requests"] == 0
        assert stats["steps"] > 0 and stats["fallback_steps"] == 0

        def refuse_positions(self, *args, **kwargs):
            raise mrope.MRopeError("pretend these positions cannot be held")

        monkeypatch.setattr(mrope.PositionTable, "add_positions", refuse_positions)
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert plugin.stats()["fallback_steps"] > 0


def test_enable_patches_a_runner_where_one_is_imported() -> None:
    """enable() in a process that never imports a model runner (vLLM's API server) loads neither the
    runner's modules nor numba (they made its heap 20% larger for its garbage collector); importing the
    V1 runner there, as vLLM's engine core does, patches it and loads its compiled step before any runner
    exists (not at the first admission, where the first request after a server's start waited ~0.4 s)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from mrope.integrations import vllm as plugin\n"
        "if sys.argv[1] == 'enable':\n"
        "    plugin.enable()\n"
        "print('BEFORE', 'numba' in sys.modules, 'vllm.v1.worker.gpu_model_runner' in sys.modules)\n"
        "from vllm.v1.worker.gpu_model_runner import GPUModelRunner\n"
        "compiled = sys.modules.get('mrope.serving.compiled_step')\n"
        "print('OVERLOADS', 0 if compiled is None else len(compiled.fill.overloads))\n"
        "from mrope.integrations.vllm import v1\n"
        "print('PATCHED', v1.vllm_init_positions() is not None)\n"
    )
    found = {}
    for how in ("enable", "import"):
        done = subprocess.run([sys.executable, "-c", probe, how], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        found[how] = [line.split(maxsplit=1)[1] for line in done.stdout.splitlines() if line[:1].isupper()]
    assert found == {
        "enable": ["False False", "1", "True"],
        "import": ["False False", "0", "False"],
    }
