"""Run the Triton kernels through the interpreter where no GPU exists (set before triton is imported).
Without torch the modules here are skipped (tests/conftest.py), so torch is imported only if present."""

import importlib.util
import os

if importlib.util.find_spec("torch") is not None:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
