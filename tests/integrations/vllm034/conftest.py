"""Set-up of the vLLM 0.34.0 tests (``make test`` runs them in ``.venv-vllm`` with
``PYTHONPATH=.venv-vllm/vllm-0.34.0``: 0.34's Python source on vLLM 0.32's installed dependencies).

Without vLLM 0.34's source importable (:func:`support.vllm034.missing_reason`: another vLLM, or none,
on ``sys.path``; or its ``csrc/cpu`` missing) the test files here are not collected; under ``CI`` they
are, and each fails with the reason.

Fixtures: ``prepare_op`` (session): ``torch.ops._C.prepare_mrope_positions_cpu`` compiled from 0.34's
``csrc/cpu/input_batch.cpp`` (:func:`support.vllm034.load_prepare_mrope_positions`; the build is
kept in the environment, so only the first run compiles).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from support import vllm034

REASON = vllm034.missing_reason()
if REASON is not None and not os.environ.get("CI"):
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header(config: pytest.Config) -> str | None:
    if REASON is not None:
        return f"tests/integrations/vllm034: vLLM {vllm034.VERSION}'s source is not importable: {REASON}"
    return None


def _require() -> None:
    if REASON is not None:
        pytest.fail(f"vLLM {vllm034.VERSION}'s source is not importable: {REASON} (make test-vllm034)")


@pytest.fixture(autouse=True)
def _vllm034_present() -> None:
    """Under CI the tests are collected without vLLM 0.34: each fails, naming why."""
    _require()


@pytest.fixture(scope="session")
def prepare_op() -> Any:
    """vLLM 0.34's ``torch.ops._C.prepare_mrope_positions_cpu``, compiled from its source."""
    _require()
    return vllm034.load_prepare_mrope_positions()
