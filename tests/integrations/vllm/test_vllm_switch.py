"""The plugin switched while requests run (off -> on, on -> check, check -> on, on -> off, again), in
both model runners: every request ends with vLLM's own tokens, the engine never fails, and mrope serves
the steps it is on for (requests admitted by vLLM's path before the switch are adopted from vLLM's
positions). Negative control: without that adoption the V1 runner falls back and the test fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from mrope.integrations import vllm as plugin
from mrope.integrations.vllm import v1
from support import vllm_harness as harness

# before step k: the plugin's mode (None: off); a switch every few steps, while requests run
SWITCHES = {2: "mrope", 5: "check", 8: "mrope", 11: None, 14: "mrope", 17: "check"}


def _switch(mode: str | None):
    def apply() -> None:
        if mode is None:
            plugin.disable()
        else:
            plugin.enable(mode)

    return apply


def _run(
    model_dir: Path, runner: str, switches: dict, *, on_at_start: bool = False
) -> tuple[list[list[int]], list[list[int]], dict]:
    """vLLM's own tokens (plugin off), then a stepwise run with the switches (the plugin enabled
    before the engine starts with ``on_at_start``, as a V2 runner needs), and the counters of that run."""
    prompts = harness.prompt_list(harness.family_of(model_dir))
    with harness.Engine(model_dir, runner=runner) as engine:
        expected = engine.generate(prompts)
    if on_at_start:
        plugin.enable()
    with harness.Engine(model_dir, runner=runner) as engine:
        plugin.reset_stats()
        got = engine.generate_stepwise(prompts, {k: _switch(m) for k, m in switches.items()})
        stats = plugin.stats()
    return expected, got, stats


def test_v1_switched_while_requests_run(qwen2_5_vl_dir: Path, plugin_off: None) -> None:
    expected, got, stats = _run(qwen2_5_vl_dir, "v1", SWITCHES)
    assert got == expected
    assert stats["steps"] > 0 and stats["checked_steps"] > 0
    assert stats["fallback_steps"] > 0  # the steps while off
    assert stats["fallback_requests"] == 0


def test_v1_switch_without_adoption_is_caught(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: requests admitted before the switch left without a slot make the first step
    fall back (the runner goes to vLLM's path), which the counters show."""
    monkeypatch.setattr(v1._RunnerState, "adopt", lambda self, runner: None)
    expected, got, stats = _run(qwen2_5_vl_dir, "v1", {2: "mrope"})
    assert got == expected  # never a failed engine
    assert stats["steps"] == 0 and stats["fallback_steps"] > 0


def test_v2_switched_while_requests_run(qwen2_5_vl_dir: Path, plugin_off: None) -> None:
    """V2 builds its M-RoPE state at engine start: with the plugin on then, every later switch (check,
    on, off: a hand-over to vLLM's state with the live requests) keeps vLLM's tokens."""
    switches = {3: "check", 6: "mrope", 9: None}
    expected, got, stats = _run(qwen2_5_vl_dir, "v2", switches, on_at_start=True)
    assert got == expected
    assert stats["runner"] == "v2"
    assert stats["steps"] > 0 and stats["checked_steps"] > 0 and stats["fallback_steps"] > 0
