"""Compiling a Triton kernel down to a cubin for an H100/H200 target (sm_90) without a GPU, with
Triton's bundled ptxas: catches what the interpreter does not (types, loop-carried values, unsupported
constructs). Used by the kernels' tests (``tests/serving/test_ragged.py``, ``tests/ops``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: the start of every compile script: Triton's NVIDIA compile machinery, or ``SKIP`` and exit
PRELUDE = """
import sys
try:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    knobs.nvidia.ptxas.path
except (ImportError, AttributeError, RuntimeError) as err:
    print("SKIP", repr(err))
    sys.exit(0)
"""


def compile_for_sm90(script: str, cache: Path) -> str:
    """Run ``PRELUDE`` + ``script`` (it compiles with ``triton.compile(..., target=GPUTarget("cuda", 90,
    32))`` and prints a line ``compiled ...`` per cubin) in a fresh interpreter without
    ``TRITON_INTERPRET``; its output. Skips the test where Triton's NVIDIA compiler is missing."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")
    }
    env.update(PYTHONPATH=os.pathsep.join(sys.path), TRITON_CACHE_DIR=str(cache))
    env.update(TRITON_DEFAULT_FP_FUSION="1")
    source = PRELUDE + textwrap.dedent(script)
    run = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    if run.stdout.startswith("SKIP"):
        pytest.skip(f"Triton's NVIDIA compiler is not available: {run.stdout.strip()}")
    return run.stdout
