"""Run the Triton kernels through the interpreter where no GPU exists (set before triton is imported)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
