"""The ``backend`` fixture: each serving test that takes it runs on both steps of an int64 table, the
compiled one (numba; skipped where numba is missing, failed under ``CI``, where ``make test`` installs
it) and the numpy one.

Where no GPU exists, the Triton step of ``fill_ragged`` (test_ragged.py) runs under Triton's
interpreter: ``TRITON_INTERPRET`` is set here, before the kernel is decorated (as in tests/ops)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from support.peers import require

if importlib.util.find_spec("torch") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", params=["numba", "numpy"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "numba":
        require("numba")
    return request.param
