"""Set-up of the SGLang end-to-end tests (run in ``.venv-sglang`` by ``make test``).

Engines run in subprocesses (``sglang_engine.py``): SGLang's scheduler is a process of its own, which reads
``MROPE_SGLANG`` when it starts, and a scheduler that fails (check mode's negative control) takes its
parent down. The tiny checkpoints are the vLLM tests' (``tests/integrations/vllm/checkpoints.py``),
with Qwen2.5-VL's weights under the released checkpoints' names (``model.layers.*``, ``visual.*``),
which SGLang's loader expects.

Fixtures (session scope): ``checkpoint`` (family -> folder, built once); ``run_engines`` (a function
running engines in a subprocess); per test: ``sglang_exec`` (SGLang's runtime context, for its step
methods run without an engine). Without SGLang installed the test files here are not collected
(under ``CI`` they are, and fail).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from support import sglang_engine

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None
if not HAVE_SGLANG and not os.environ.get("CI"):
    collect_ignore_glob = ["test_*.py"]

FAULT_VAR = "MROPE_SGLANG_TEST_FAULT"  # read by tests/sglang_env/_mrope_sglang_env.py
ENGINE_TIMEOUT_S = 900


def pytest_report_header(config: pytest.Config) -> str | None:
    if not HAVE_SGLANG:
        return "tests/integrations/sglang: SGLang is not installed here (make test runs them in .venv-sglang)"
    return None


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``checkpoint(family) -> Path``: the tiny checkpoint of ``qwen2_5_vl``, ``qwen3_vl`` or ``glm4v``."""
    from support import checkpoints

    built: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("sglang-checkpoints")

    def get(family: str) -> Path:
        if family not in built:
            folder = checkpoints.build(family, root / family, seed=0)
            if family == "qwen2_5_vl":
                sglang_engine.released_names(folder)
            built[family] = folder
        return built[family]

    return get


@pytest.fixture(scope="session")
def run_engines(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., tuple[int, str, list[dict[str, Any]]]]:
    """``run_engines(model_dir, modes, fault=None) -> (returncode, output, results)``: the engines of
    ``modes`` run one after another in a subprocess (``sglang_engine.py``), with the test environment's fault
    (``"wrong"``, ``"raise"``) in its scheduler processes; ``results`` is empty when the process failed."""
    root = tmp_path_factory.mktemp("sglang-runs")
    count = [0]

    def run(model_dir: Path, modes: Sequence[str], fault: str | None = None) -> tuple[int, str, list[dict]]:
        count[0] += 1
        spec = root / f"run{count[0]}.json"
        model_type = json.loads((model_dir / "config.json").read_text())["model_type"]
        spec.write_text(
            json.dumps({"model_dir": str(model_dir), "model_type": model_type, "modes": list(modes)})
        )
        env = {**os.environ, **sglang_engine.ENV, "SGLANG_CACHE_DIR": str(root / "cache")}
        env.pop(FAULT_VAR, None)
        if fault is not None:
            env[FAULT_VAR] = fault
        done = subprocess.run(
            [sys.executable, sglang_engine.__file__, str(spec)],
            env=env,
            capture_output=True,
            text=True,
            timeout=ENGINE_TIMEOUT_S,
        )
        output = done.stdout + done.stderr
        results: list[dict[str, Any]] = []
        for line in done.stdout.splitlines():
            if line.startswith(sglang_engine.RESULT_MARKER):
                results = json.loads(line[len(sglang_engine.RESULT_MARKER) :])
        return done.returncode, output, results

    return run


@pytest.fixture
def sglang_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's runtime context as an engine publishes it (no ``rl_on_policy_target``)."""
    from sglang.srt import runtime_context
    from sglang.srt.model_executor import forward_batch_info

    context = SimpleNamespace(deterministic=SimpleNamespace(rl_on_policy_target=None))
    monkeypatch.setattr(runtime_context, "get_exec", lambda: context)
    monkeypatch.setattr(forward_batch_info, "get_exec", lambda: context)
