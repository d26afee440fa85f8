"""The ``backend`` fixture: each serving test that takes it runs on both steps of an int64 table, the
compiled one (numba; skipped where numba is missing, failed under ``CI``, where ``make test`` installs
it) and the numpy one."""

from __future__ import annotations

import pytest

from _peers import require


@pytest.fixture(scope="session", params=["numba", "numpy"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "numba":
        require("numba")
    return request.param
