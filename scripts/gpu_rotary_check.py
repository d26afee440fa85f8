"""GPU check for the rotary op: its tests on CUDA (compiled kernel, no interpreter), then the benchmark.

Usage::

    PYTHONPATH=src python scripts/gpu_rotary_check.py [--quick]

Exits non-zero if a test fails or no GPU is visible.
"""

import os
import subprocess
import sys

import torch


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    env = {**os.environ, "PYTHONPATH": "src", "TRITON_INTERPRET": "0"}
    tests = [
        sys.executable,
        "-m",
        "pytest",
        "tests/test_rotary.py",
        "tests/ops/test_mrope_rotary.py",
        "tests/ops/test_rotary_cuda.py",  # sync-debug mode and CUDA graph capture of the rotary path
        "-q",
    ]
    rc = subprocess.call(tests, env=env)
    bench = [sys.executable, "benchmarks/rotary.py", "--json", "bench-results/rotary-gpu.json"]
    rc_bench = subprocess.call(bench + sys.argv[1:], env=env)
    return rc or rc_bench


if __name__ == "__main__":
    sys.exit(main())
