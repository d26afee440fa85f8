"""vLLM 0.34's own M-RoPE states against the state mrope's :func:`enable` installs in vLLM 0.34's modules,
over runner call sequences drawn by hypothesis: equal positions at every step, and at every read of video
token pruning.

Both of vLLM 0.34's V2-style runners: the CPU runner (``vllm/v1/worker/cpu/rope.py``, its step the C++ op
``prepare_mrope_positions_cpu`` compiled from vLLM's source) and Model Runner V2 (``gpu/mm/rope.py``, its
Triton kernel in Triton's interpreter, its pinned host buffers stood in by plain ones). The model is
vLLM 0.34's Qwen2.5-VL class (its ``get_mrope_input_positions`` on a stand-in ``self``), the prompts
laid out as its processor lays them out, with images and videos of varied ``second_per_grid_ts``.

A sequence admits requests into request indices (reusing freed ones, as vLLM does: no remove hook),
schedules chunked prefill that ends inside items, decode steps with speculative tokens, preempts
requests and admits them again with prompt + generated ids (and prefix-cache hits), and runs pruning's
read and update. Negative control: check mode catches a table whose step is wrong.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrope
from mrope.integrations import vllm as plugin
from mrope.integrations.vllm import v2
from mrope.integrations.vllm.features import feature_spec
from support import vllm034
from support.vllm_models import stand_in

torch = pytest.importorskip("torch")

MAX_REQS, MAX_TOKENS, MAX_LEN = 4, 96, 512
TEXT = st.integers(1000, 9000)
SECONDS = st.one_of(st.sampled_from([2 / 24, 2 / 25, 0.5, 1.0, 2.0, 0.7]), st.floats(0, 3, width=32))


class Setup(SimpleNamespace):
    def __repr__(self) -> str:  # (the stand-in model has no repr)
        return "Setup(qwen2_5_vl)"


@pytest.fixture(scope="module")
def qwen2_5_vl() -> SimpleNamespace:
    """vLLM 0.34's Qwen2.5-VL model class on a stand-in ``self`` and the model config its states read."""
    from transformers import Qwen2_5_VLConfig

    config = Qwen2_5_VLConfig(vision_config={"tokens_per_second": 2, "spatial_merge_size": 2})
    model = stand_in("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", config)
    model_config = SimpleNamespace(
        uses_mrope=True, mrope_num_dims=3, hf_config=config, multimodal_config=None
    )
    return Setup(config=config, model=model, model_config=model_config)


@pytest.fixture(params=["v2-cpu", "v2"])
def runner(request: pytest.FixtureRequest) -> Iterator[str]:
    """Which of vLLM 0.34's runners: its CPU runner (its C++ op compiled), or Model Runner V2 (GPU code
    on CPU tensors: its pinned and UVA buffers stood in for the whole test, they grow at writes)."""
    if request.param == "v2-cpu":
        vllm034.load_prepare_mrope_positions()
        yield request.param
        return
    with vllm034.uva_on_cpu():
        yield request.param


@pytest.fixture
def enabled() -> Any:
    plugin.disable()
    plugin.reset_stats()
    yield plugin
    plugin.disable()
    plugin.reset_stats()


def make_states(runner: str, setup: SimpleNamespace, mode: str) -> tuple[Any, Any]:
    """vLLM 0.34's own state and the one its model-state module builds with mrope enabled."""
    import importlib

    cpu = runner == "v2-cpu"
    rope = importlib.import_module("vllm.v1.worker.cpu.rope" if cpu else "vllm.v1.worker.gpu.mm.rope")
    module = importlib.import_module(v2.MODEL_STATE_MODULES[runner])
    plugin.enable(mode)
    sizes = (MAX_REQS, MAX_TOKENS, MAX_LEN, torch.device("cpu"))
    theirs = rope.get_rope_state(setup.model_config, setup.model, *sizes)
    ours = module.get_rope_state(setup.model_config, setup.model, *sizes)
    assert type(theirs).__name__ == "RopeState" and isinstance(ours, v2.TableRopeState)
    return theirs, ours


# -- prompts as vLLM 0.34's Qwen2.5-VL processor lays them out ------------------------------------------
@st.composite
def prompts(draw: st.DrawFn, config: Any) -> tuple[list[int], list[Any]]:
    ids: list[int] = draw(st.lists(TEXT, max_size=4))
    features: list[Any] = []
    for _ in range(draw(st.integers(0, 3))):
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        ids.append(config.vision_start_token_id)
        if draw(st.booleans()):
            grid = torch.tensor([1, 2 * h, 2 * w])
            features.append(feature_spec("image", len(ids), h * w, {"image_grid_thw": grid}))
            ids += [config.image_token_id] * (h * w)
        else:
            frames = draw(st.integers(1, 8))
            data = {"video_grid_thw": torch.tensor([frames, 2 * h, 2 * w])}
            data["second_per_grid_ts"] = torch.tensor(draw(SECONDS), dtype=torch.float32)
            features.append(feature_spec("video", len(ids), frames * h * w, data))
            ids += [config.video_token_id] * (frames * h * w)
        ids.append(config.vision_end_token_id)
        ids += draw(st.lists(TEXT, max_size=4))
    if not ids:
        ids = [1000]
    random.Random(draw(st.integers(0, 99))).shuffle(features)
    return ids, features


@dataclass
class Request:
    prompt: list[int]
    features: list[Any]
    generated: list[int] = field(default_factory=list)
    index: int = -1  # its request index while admitted
    computed: int = 0
    prefill_len: int = 0


class Driver:
    """A V2-style runner's calls of its M-RoPE state, made on vLLM's state and mrope's alike."""

    def __init__(self, states: tuple[Any, Any], model: Any) -> None:
        self.states, self.model = states, model
        self.free = list(range(MAX_REQS))
        self.running: list[Request] = []
        self.waiting: list[Request] = []
        self.prefill_lens = torch.zeros(MAX_REQS, dtype=torch.int32)
        self.num_computed = torch.zeros(MAX_REQS, dtype=torch.int32)

    def admit(self, request: Request, cached: int) -> None:
        """A new request, or a preempted one again (prefill ids: prompt + generated; ``cached`` tokens
        of them a prefix-cache hit holds)."""
        request.index = self.free.pop(0)
        ids = request.prompt + request.generated
        request.prefill_len, request.computed = len(ids), min(cached, len(ids) - 1)
        for state in self.states:
            state.init_prefill_positions(request.index, self.model, ids, request.features)
        self.running.append(request)

    def preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.free.append(request.index)
        request.index, request.computed = -1, 0
        self.waiting.append(request)

    def finish(self, request: Request) -> None:
        self.running.remove(request)
        self.free.append(request.index)

    def step(self, counts: list[int]) -> int:
        """One step: ``counts[i]`` tokens of running request i (a prefill chunk, or decode plus
        speculative tokens); the positions of both states compared."""
        for state in self.states:
            if hasattr(state, "apply_staged_writes"):
                state.apply_staged_writes()
        for request in self.running:
            self.prefill_lens[request.index] = request.prefill_len
            self.num_computed[request.index] = request.computed
        idx = torch.tensor([r.index for r in self.running], dtype=torch.int64)
        starts = torch.tensor(np.concatenate([[0], np.cumsum(counts)]), dtype=torch.int32)
        for state in self.states:
            state.prepare_positions(idx, starts, self.prefill_lens, self.num_computed)
        num = int(starts[-1])
        positions = [state.get_positions(num).clone() for state in self.states]
        assert all(torch.equal(p, positions[0]) for p in positions), positions
        for request, count in zip(self.running, counts, strict=True):
            request.computed += count  # each token past the prompt was sampled (id 7)
            sampled = max(len(request.generated), request.computed - len(request.prompt))
            request.generated = [7] * sampled
        return num

    def prune(self, request: Request, rng: random.Random) -> None:
        """Video token pruning's read (compared) and update (recomputed positions: the read ones with
        the vision tokens moved, and a new delta)."""
        read = [state.read_prefill_positions(request.index, request.prefill_len) for state in self.states]
        assert torch.equal(read[0].long(), read[1].long())
        new = read[0].long().clone()
        new[:, new.shape[1] // 2 :] += rng.randint(0, 5)
        delta = int(new.max()) + 1 - new.shape[1]
        for state in self.states:
            state.update_prefill_positions(request.index, new, delta)


@pytest.mark.parametrize("mode", ["mrope", "check"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_states_give_vllms_positions(
    runner: str, mode: str, qwen2_5_vl: SimpleNamespace, enabled: Any, data
) -> None:
    """Every step and every pruning read equal vLLM's; in check mode mrope's state also compares them
    itself (and hands out vLLM's), raising nothing."""
    states = make_states(runner, qwen2_5_vl, mode)
    driver = Driver(states, qwen2_5_vl.model)
    rng = random.Random(data.draw(st.integers(0, 2**16), label="seed"))
    for _ in range(data.draw(st.integers(1, 14), label="steps")):
        while driver.free and (not driver.running or rng.random() < 0.4):
            if driver.waiting and rng.random() < 0.6:
                request = driver.waiting.pop(0)
            else:
                ids, features = data.draw(prompts(qwen2_5_vl.config), label="prompt")
                request = Request(ids, features)
            driver.admit(request, cached=rng.choice([0, 0, rng.randint(0, 40)]))
        counts = []
        for request in driver.running:
            left = request.prefill_len - request.computed
            counts.append(rng.randint(1, min(left, 40)) if left > 0 else 1 + rng.choice([0, 0, 2]))
        while sum(counts) > MAX_TOKENS:
            counts[counts.index(max(counts))] //= 2
        counts = [max(c, 1) for c in counts]
        driver.step(counts)
        for request in list(driver.running):
            if request.computed < request.prefill_len and rng.random() < 0.15:
                driver.prune(request, rng)
            if request.computed > request.prefill_len + rng.randint(2, 12):
                driver.finish(request)
            elif rng.random() < 0.1:
                driver.preempt(request)
    stats = plugin.stats()
    assert stats["runner"] == runner and stats["steps"] > 0
    assert stats["fallback_requests"] == stats["fallback_steps"] == 0
    assert (stats["checked_steps"] == stats["steps"]) if mode == "check" else stats["checked_steps"] == 0


def test_check_mode_follows_a_pruning_update(runner: str, qwen2_5_vl: SimpleNamespace, enabled: Any) -> None:
    """Check mode after video pruning's update: vLLM's own state takes the update too (the GPU runner
    stages it: applied at the next step), so the steps after it compare equal."""
    config = qwen2_5_vl.config
    ids = [1000, config.vision_start_token_id] + [config.image_token_id] * 4 + [config.vision_end_token_id]
    ids += [1001, 1002, 1003]
    image = feature_spec("image", 2, 4, {"image_grid_thw": torch.tensor([1, 4, 4])})
    driver = Driver(make_states(runner, qwen2_5_vl, "check"), qwen2_5_vl.model)
    request = Request(ids, [image])
    driver.admit(request, cached=0)
    driver.step([4])
    driver.prune(request, random.Random(3))  # the second half of the positions moved up, a new delta
    driver.step([len(ids) - 4])
    driver.step([1])
    assert plugin.stats()["pruning_updates"] == 1 and plugin.stats()["checked_steps"] == 3


def test_check_mode_catches_a_wrong_state(
    runner: str, qwen2_5_vl: SimpleNamespace, enabled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: in check mode a table whose step writes a wrong h row raises, naming the
    request and the column; without the fault the same calls pass."""
    ids = [1000, 1001, qwen2_5_vl.config.vision_start_token_id] + [qwen2_5_vl.config.image_token_id] * 4
    ids += [qwen2_5_vl.config.vision_end_token_id, 1002]
    image = feature_spec("image", 3, 4, {"image_grid_thw": torch.tensor([1, 4, 4])})
    _, state = make_states(runner, qwen2_5_vl, "check")
    driver = Driver((state,), qwen2_5_vl.model)
    driver.admit(Request(ids, [image]), cached=0)
    driver.step([len(ids)])
    fill_ragged = mrope.PositionTable.fill_ragged

    def wrong(self, out, slots, query_start_loc, num_computed):
        fill_ragged(self, out, slots, query_start_loc, num_computed)
        out[1, : int(query_start_loc[slots.shape[0]])] += 1

    monkeypatch.setattr(mrope.PositionTable, "fill_ragged", wrong)
    with pytest.raises(mrope.MRopeError, match=r"mrope check: request at index 0, step 2: column 0"):
        driver.step([1])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_disable_hands_live_requests_to_vllms_state(
    runner: str, qwen2_5_vl: SimpleNamespace, enabled: Any, data
) -> None:
    """:func:`disable` while requests are mid-prefill: mrope's state hands over to a vLLM ``RopeState``
    holding every live request's positions (written through its own ``update_prefill_positions``), and
    the next steps and pruning reads still equal vLLM's."""
    theirs, ours = make_states(runner, qwen2_5_vl, "mrope")
    driver = Driver((theirs, ours), qwen2_5_vl.model)
    for _ in range(3):
        ids, features = data.draw(prompts(qwen2_5_vl.config), label="prompt")
        driver.admit(Request(ids, features), cached=0)
    driver.step([max(1, r.prefill_len // 2) for r in driver.running])
    plugin.disable()
    driver.step([max(1, r.prefill_len - r.computed) for r in driver.running])
    assert ours.handed_over and ours.vllm is not None
    for request in driver.running:
        read = [state.read_prefill_positions(request.index, request.prefill_len) for state in driver.states]
        assert torch.equal(read[0].long(), read[1].long())
    driver.step([1] * len(driver.running))


def test_a_runner_whose_code_differs_is_left_to_vllm_and_the_other_served(
    enabled: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """vLLM 0.34 with Model Runner V2's step kernel changed (its digest): ``enable()`` patches the CPU
    runner's model-state module only, and the warning names the changed target."""
    import importlib
    import logging

    from mrope.integrations.vllm import audit, models

    changed = "vllm.v1.worker.gpu.mm.rope:_prepare_rope_positions_kernel"
    installed = dict(audit.AUDITED["0.34.0"], **{changed: "0" * 64})
    monkeypatch.setattr(models, "installed_digests", lambda targets: {t: installed[t] for t in targets})
    models.runner_verdicts.cache_clear()
    gpu, cpu = (importlib.import_module(v2.MODEL_STATE_MODULES[r]) for r in ("v2", "v2-cpu"))
    vllm_gpu, vllm_cpu = gpu.get_rope_state, cpu.get_rope_state
    try:
        with caplog.at_level(logging.WARNING, logger="mrope.integrations.vllm"):
            plugin.enable()
        assert gpu.get_rope_state is vllm_gpu and cpu.get_rope_state is not vllm_cpu
        assert changed in caplog.text and "Model Runner V2 (GPU)" in caplog.text
    finally:
        plugin.disable()
        models.runner_verdicts.cache_clear()
    assert cpu.get_rope_state is vllm_cpu
