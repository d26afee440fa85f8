"""Shared test set-up: hypothesis profiles, the ``peer`` fixture (a :class:`support.peers.PeerSetup`: a
model type's config, its mrope families under both conventions, and the peers' own answers), and the
skip of test modules whose optional packages are missing.

Hypothesis profiles: ``dev`` (default: random, few examples), ``ci`` (loaded when the ``CI``
environment variable is set: derandomized, so a run is reproducible, more examples) and ``long``
(``make test-long``: many more examples, random); ``HYPOTHESIS_PROFILE`` picks one.

Only numpy, pytest and hypothesis are needed to run the suite: outside CI, a test module (or a folder's
conftest) that cannot be imported because torch, triton, numba, transformers, SGLang or vLLM is missing
is reported as skipped, and the tests that call a peer skip through :func:`support.peers.require`. Under
``CI`` (where ``make test`` installs everything) both stay failures.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

from mrope.render.choose import NUMBA_ENV, read_numba_env_again
from support.peers import PeerSetup, peer_setup, require

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("dev", max_examples=20, **_COMMON)
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=1000, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def peer(request: pytest.FixtureRequest) -> PeerSetup:
    """The :class:`PeerSetup` named by indirect parametrization, e.g.
    ``@pytest.mark.parametrize("peer", ["glm4v", "glm4v_moe"], indirect=True)``."""
    require("torch", "transformers", "sglang")
    return peer_setup(request.param)


@pytest.fixture
def numba_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str | None], None]]:
    """A function that sets ``MROPE_NUMBA`` for this test (``None``: unsets it) and has mrope read it again
    (it reads it once per process: :func:`mrope.render.choose.read_numba_env_again`); put back afterwards."""

    def set_numba(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(NUMBA_ENV, raising=False)
        else:
            monkeypatch.setenv(NUMBA_ENV, value)
        read_numba_env_again()

    yield set_numba
    monkeypatch.undo()
    read_numba_env_again()


# packages a test module may need beyond numpy, pytest and hypothesis
OPTIONAL_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "triton",
        "numba",
        "transformers",
        "sglang",
        "vllm",
        "liger_kernel",
        "matplotlib",
    }
)
_MISSING_MODULE = re.compile(r"No module named '([A-Za-z0-9_]+)")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module or folder whose import failed only because an optional package is not installed is
    skipped (outside CI), naming the package; any other collection error stays an error."""
    report = yield
    if report.failed and not os.environ.get("CI"):
        match = _MISSING_MODULE.search(str(report.longrepr))
        name = match.group(1) if match else None
        if name in OPTIONAL_PACKAGES and importlib.util.find_spec(name) is None:
            report.outcome = "skipped"
            report.longrepr = (
                str(collector.path),
                0,
                f"Skipped: {name} is not installed (make test installs it)",
            )
    return report
