"""The vLLM integration under Model Runner V2 (``vllm/v1/worker/gpu/``, vLLM's default runner), end to
end: vLLM 0.32's CPU engine runs V2 here with its Triton kernels in Triton's interpreter (the test
environment's start-up hook gives Triton a ``"cpu"`` backend), on the tiny Qwen2.5-VL, Qwen3-VL and
GLM-4.1V checkpoints.

Every run has chunked prefill ending inside images and videos, prefix-cache hits and preemption
(:mod:`support.vllm_harness`), videos whose scaled time passes their spatial extent and a text-only prompt.
Negative controls: wrong positions change the tokens; check mode catches a wrong mrope step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import mrope
from mrope.integrations import vllm as plugin
from mrope.integrations.vllm import models
from mrope.integrations.vllm import v2 as _vllm_v2
from support import checkpoints
from support import vllm_harness as harness


def _causes(error: BaseException) -> Iterator[BaseException]:
    yield error
    while (error := error.__cause__ or error.__context__) is not None:
        yield error


def _v2_worker(engine: harness.Engine) -> dict:
    (worker,) = engine.worker_info()
    assert worker["v2"], worker  # vLLM chose Model Runner V2 by its own defaults
    return worker


@pytest.mark.parametrize("model_dir", checkpoints.FAMILIES, indirect=True)
def test_v2_tokens_equal_vllm(model_dir: Path, plugin_off: None) -> None:
    """vLLM's own V2 path, check mode and mrope give the same greedy tokens; mrope's state replaced
    vLLM's per-token buffer and served every request and step; wrong positions change the tokens;
    after disable() the runner goes on with vLLM's own state and the same tokens."""
    prompts = harness.prompt_list(harness.family_of(model_dir))
    with harness.Engine(model_dir, runner="default") as engine:
        assert _v2_worker(engine)["rope_state"] == "RopeState"
        expected = engine.generate(prompts)
        assert engine.last.preemptions > 0, "the run must preempt requests"

    plugin.enable("check")
    with harness.Engine(model_dir, runner="default") as engine:
        worker = _v2_worker(engine)
        assert worker["rope_state"] == "TableRopeState"
        assert not worker["rope_state_has_prefill_positions"]
        assert engine.generate(prompts) == expected
        checked = plugin.stats()
        assert checked["runner"] == "v2"
        assert checked["checked_steps"] > 0 and checked["checked_steps"] == checked["steps"]
        assert checked["admitted"] >= len(prompts)  # preempted requests come back as new admissions

        plugin.enable("mrope")
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert engine.last.preemptions > 0
        served = plugin.stats()
        assert served["admitted"] == len(prompts) + engine.last.preemptions
        assert served["steps"] > 0 and served["checked_steps"] == 0
        assert served["fallback_requests"] == served["fallback_steps"] == served["fallback_runners"] == 0

        with harness.wrong_v2_positions() as wrong:  # negative control, through mrope's step
            corrupted = engine.generate(prompts)
        assert wrong.changed > 0
        pairs = zip(expected, corrupted, prompts, strict=True)
        assert any(a != b for a, b, p in pairs if harness.has_vision(p))

        plugin.disable()  # the runner hands over to vLLM's RopeState, live requests included
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert plugin.stats()["steps"] == 0 and plugin.stats()["fallback_steps"] > 0


def test_v2_check_mode_names_the_wrong_column(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Check mode compares every V2 step: a wrong h row from mrope is reported with the request, the
    step and the column."""
    fill_ragged = mrope.PositionTable.fill_ragged

    def wrong_fill_ragged(self, out, slots, query_start_loc, num_computed):
        fill_ragged(self, out, slots, query_start_loc, num_computed)
        out[1, : int(query_start_loc[slots.shape[0]])] += 1

    monkeypatch.setattr(mrope.PositionTable, "fill_ragged", wrong_fill_ragged)
    plugin.enable("check")
    prompts = harness.prompt_list("qwen2_5_vl", ["image"])
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine, pytest.raises(Exception) as caught:
        engine.generate(prompts)
    assert any(
        isinstance(e, mrope.MRopeError) and "check: request '" in str(e) and "step 1: column 0" in str(e)
        for e in _causes(caught.value)
    ), list(_causes(caught.value))


def test_v2_entry_point_with_vllm_multiprocessing(qwen2_5_vl_dir: Path, plugin_off: None) -> None:
    """``MROPE_VLLM=1`` under vLLM's default multiprocessing and runner choice: the engine-core
    process serves V2 from mrope's state, with vLLM's tokens; ``MROPE_VLLM=check`` compares every step."""
    prompts = harness.prompt_list("qwen2_5_vl")
    with harness.Engine(qwen2_5_vl_dir, runner="default") as engine:
        expected = engine.generate(prompts)
    for mode in ("1", "check"):
        env = {"MROPE_VLLM": mode}
        served = harness.run_subprocess_full(qwen2_5_vl_dir, prompts, env=env, runner="default")
        assert served.tokens == expected, mode
        assert served.preemptions > 0
        (worker,) = served.workers
        assert worker["v2"] and worker["rope_state"] == "TableRopeState", worker
        stats = worker["mrope_stats"]
        assert stats["runner"] == "v2" and stats["steps"] > 0 and stats["fallback_steps"] == 0, stats
        assert (stats["checked_steps"] > 0) == (mode == "check"), stats


def test_v2_model_without_rule_is_served_in_positions_mode(
    qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model mrope has no rule for (forced: ``unsupported_reason`` names one): mrope's state serves it
    in positions mode (the model's ``get_mrope_input_positions`` registered, every step one
    ``fill_ragged``); check mode compares each step with vLLM's ``RopeState``; the tokens equal vLLM's
    through preemption and prefix-cache hits; registered positions corrupted change the tokens of the
    prompts with images."""
    prompts = harness.prompt_list("qwen2_5_vl")
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        expected = engine.generate(prompts)
    monkeypatch.setattr(models, "unsupported_reason", lambda family: f"{family.model_type}: pretend no rule")
    plugin.enable("check")
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        assert _v2_worker(engine)["rope_state"] == "TableRopeState"
        assert engine.generate(prompts) == expected
        checked = plugin.stats()
        assert checked["positions_runners"] == 1 and checked["fallback_runners"] == 0
        assert checked["positions_requests"] == checked["admitted"] >= len(prompts)
        assert checked["checked_steps"] == checked["steps"] > 0

        plugin.enable("mrope")
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        assert engine.last.preemptions > 0
        served = plugin.stats()
        assert served["positions_requests"] == served["admitted"] == len(prompts) + engine.last.preemptions
        assert served["steps"] > 0 and served["checked_steps"] == 0
        assert served["fallback_requests"] == served["fallback_steps"] == 0

        with harness.flattened_positions() as flattened:  # negative control, through add_positions
            corrupted = engine.generate(prompts)
        assert flattened.changed > 0
        pairs = zip(expected, corrupted, prompts, strict=True)
        assert any(a != b for a, b, p in pairs if harness.has_vision(p))


def test_v2_pruning_keeps_vllm_state(qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch) -> None:
    """A runner no table serves (forced: video token pruning, or other than 3 rows): vLLM's own
    ``RopeState`` is built (logged, counted), the tokens are vLLM's."""
    prompts = harness.prompt_list("qwen2_5_vl", ["image", "text"])
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        expected = engine.generate(prompts)
    monkeypatch.setattr(_vllm_v2, "vllm_path_reason", lambda config, pruning: "pretend pruning")
    plugin.enable()
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        assert _v2_worker(engine)["rope_state"] == "RopeState"
        assert engine.generate(prompts) == expected
    stats = plugin.stats()
    assert stats["fallback_runners"] == 1 and stats["steps"] == stats["admitted"] == 0
    assert stats["positions_runners"] == 0


def test_v2_refused_request_and_hand_over(qwen2_5_vl_dir: Path, plugin_off: None, monkeypatch) -> None:
    """A request whose inputs mrope refuses (a plain exception, not only MRopeError) is served from
    vLLM's positions in the table; when the table cannot hold those either, the runner hands every
    live request over to vLLM's own state. The tokens stay vLLM's; nothing fails the engine."""
    prompts = harness.prompt_list("qwen2_5_vl")
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        expected = engine.generate(prompts)

    inputs = _vllm_v2.admission_inputs

    def refuse_videos(family, features):
        if any(f.modality == "video" for f in features):
            raise ValueError("pretend malformed video feature")
        return inputs(family, features)

    monkeypatch.setattr(_vllm_v2, "admission_inputs", refuse_videos)
    plugin.enable()
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        assert engine.generate(prompts) == expected
        stats = plugin.stats()
        videos = sum("video" in p.get("multi_modal_data", {}) for p in prompts)
        assert stats["fallback_requests"] >= videos and stats["steps"] > 0 and stats["fallback_steps"] == 0

        def refuse_positions(self, *args, **kwargs):
            raise mrope.MRopeError("pretend these positions are not text runs and frames")

        monkeypatch.setattr(mrope.PositionTable, "add_positions", refuse_positions)
        plugin.reset_stats()
        assert engine.generate(prompts) == expected
        stats = plugin.stats()
        assert stats["fallback_steps"] > 0


def test_v2_state_holds_no_per_token_buffer(qwen2_5_vl_dir: Path, plugin_off: None) -> None:
    """The V2 worker's M-RoPE state under mrope: no (max_num_reqs * 3, max_model_len) buffer. States
    made by the engine's own ``get_rope_state`` (mrope's, and vLLM's original) for 256 requests of
    32,768 tokens: vLLM's holds at least that buffer, mrope's (bytes read from the live objects)
    less than 1 % of it."""
    from vllm.v1.worker.gpu.model_states import default

    plugin.enable()
    with harness.Engine(qwen2_5_vl_dir, runner="v2") as engine:
        engine.generate(harness.prompt_list("qwen2_5_vl", ["image", "video"]))
        runner = harness.in_process_runner(engine)
        state = runner.model_state.rope_state
        assert isinstance(state, _vllm_v2.TableRopeState)
        assert not hasattr(state, "prefill_positions") and state.vllm is None
        model_state = runner.model_state
        args = (model_state.model_config, runner.model, 256, 64, 32_768, model_state.device)
        ours = default.get_rope_state(*args)
        assert isinstance(ours, _vllm_v2.TableRopeState)
        ours_bytes = ours.nbytes()
        theirs_bytes = _vllm_v2.tensor_bytes(ours.make_vllm_state())
    per_token = 256 * 3 * 32_768 * 4
    assert theirs_bytes >= per_token
    assert ours_bytes < per_token // 100, (ours_bytes, theirs_bytes)
