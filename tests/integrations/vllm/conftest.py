"""Set-up of the vLLM end-to-end tests (run in ``.venv-vllm`` by ``make test``).

At import, where vLLM is installed, before it is imported anywhere: offline Hugging Face
settings, quiet vLLM, and ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so that in-process engines keep
the engine core and the worker in this process (patches applied here reach the model runner).
``MROPE_VLLM`` is removed from this process's environment: in-process tests switch the plugin
with ``enable()`` / ``disable()``; subprocess runs pass it explicitly
(``harness.run_subprocess(..., env=...)``).

Fixtures (session scope): ``vllm_env`` (the settings applied), ``checkpoint`` (a factory:
family -> checkpoint folder, built once), ``qwen2_5_vl_dir``, ``qwen3_vl_dir``, ``glm4v_dir``,
``omni_dir`` (the same for ``checkpoints.OMNI_FAMILIES``), ``vllm_only_dir`` (for
``checkpoints_vllm_only.VLLM_ONLY_FAMILIES``),
``model_dir`` (indirect parametrization by family name), and ``vllm_model_info`` (vLLM's
model-info cache filled in-process, saving vLLM's 20 s inspection subprocess per architecture);
per test: ``plugin_off`` (the plugin disabled and its counters zeroed before and after).

Without vLLM installed the test files here are not collected (under ``CI`` they are, and fail).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from support import checkpoints
from support import vllm_harness as harness

VLLM_ENV = {**harness.BASE_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
if HAVE_VLLM:
    for _key, _value in harness.BASE_ENV.items():
        os.environ.setdefault(_key, _value)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.pop("MROPE_VLLM", None)
elif not os.environ.get("CI"):
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header(config: pytest.Config) -> str | None:
    if not HAVE_VLLM:
        return "tests/integrations/vllm: vLLM is not installed here (make test runs them in .venv-vllm)"
    return None


@pytest.fixture
def plugin_off() -> Iterator[None]:
    """The plugin disabled and its counters zeroed before and after the test."""
    from mrope.integrations import vllm as plugin

    plugin.disable()
    plugin.reset_stats()
    yield
    plugin.disable()
    plugin.reset_stats()


@pytest.fixture(scope="session")
def vllm_env() -> dict[str, str]:
    """The environment settings of in-process vLLM runs (already applied to ``os.environ``)."""
    return dict(VLLM_ENV)


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``checkpoint(family) -> Path``: the tiny checkpoint of ``family`` (one of
    ``checkpoints.FAMILIES``, ``checkpoints.OMNI_FAMILIES`` or ``checkpoints_vllm_only.VLLM_ONLY_FAMILIES``),
    built on first use in a session
    temporary folder."""
    built: dict[str, Path] = {}
    root = tmp_path_factory.mktemp("vllm-checkpoints")

    def get(family: str) -> Path:
        if family not in built:
            built[family] = checkpoints.build(family, root / family, seed=0)
        return built[family]

    return get


@pytest.fixture(scope="session")
def vllm_model_info() -> list[str]:
    """Fill vLLM's model-info cache for the three architectures in this process (see
    ``harness.warm_model_info_cache``); returns the architectures inspected."""
    return harness.warm_model_info_cache()


@pytest.fixture(scope="session")
def qwen2_5_vl_dir(checkpoint: Callable[[str], Path], vllm_model_info: list[str]) -> Path:
    return checkpoint("qwen2_5_vl")


@pytest.fixture(scope="session")
def qwen3_vl_dir(checkpoint: Callable[[str], Path], vllm_model_info: list[str]) -> Path:
    return checkpoint("qwen3_vl")


@pytest.fixture(scope="session")
def glm4v_dir(checkpoint: Callable[[str], Path], vllm_model_info: list[str]) -> Path:
    return checkpoint("glm4v")


@pytest.fixture(scope="session")
def omni_dir(request: pytest.FixtureRequest, checkpoint: Callable[[str], Path]) -> Path:
    """The tiny Omni checkpoint named by indirect parametrization (``checkpoints.OMNI_FAMILIES``), its
    architecture inspected in this process first."""
    harness.warm_model_info_cache([harness.OMNI_ARCHITECTURES[request.param]])
    return checkpoint(request.param)


@pytest.fixture(scope="session")
def vllm_only_dir(request: pytest.FixtureRequest, checkpoint: Callable[[str], Path]) -> Path:
    """The tiny checkpoint of a family with vLLM as its only peer, named by indirect parametrization
    (``checkpoints_vllm_only.VLLM_ONLY_FAMILIES``), its architecture inspected in this process first."""
    harness.warm_model_info_cache([harness.VLLM_ONLY_ARCHITECTURES[request.param]])
    return checkpoint(request.param)


@pytest.fixture(scope="session")
def model_dir(
    request: pytest.FixtureRequest, checkpoint: Callable[[str], Path], vllm_model_info: list[str]
) -> Path:
    """The checkpoint named by indirect parametrization, e.g.
    ``@pytest.mark.parametrize("model_dir", checkpoints.FAMILIES, indirect=True)``."""
    return checkpoint(request.param)
