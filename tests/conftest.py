"""Shared test set-up: hypothesis profiles, and the ``peer`` fixture (a :class:`_peers.PeerSetup`: a
model type's config, its mrope families under both conventions, and the peers' own answers).

Hypothesis profiles: ``dev`` (default: random, few examples) and ``ci`` (loaded when the ``CI``
environment variable is set: derandomized, more examples); ``HYPOTHESIS_PROFILE`` overrides both.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from _peers import PeerSetup, peer_setup, require

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("dev", max_examples=20, **_COMMON)
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(scope="session")
def peer(request: pytest.FixtureRequest) -> PeerSetup:
    """The :class:`PeerSetup` named by indirect parametrization, e.g.
    ``@pytest.mark.parametrize("peer", ["glm4v", "glm4v_moe"], indirect=True)``."""
    require("torch", "transformers", "sglang")
    return peer_setup(request.param)
