"""GPU benchmark and checks of the SGLang integration's decode step: SGLang 0.5.23's decode positions
against mrope's ``PositionTable.decode`` on the device, on the same batches.

Usage (where a CUDA GPU is lent; under a minute)::

    PYTHONPATH=src python scripts/gpu_sglang_decode.py [--sizes 8,64,256] [--device cuda]

SGLang's step (``ForwardBatch._compute_mrope_positions_decode``, multimodal requests without precomputed
decode positions) reads each request's delta with ``.item()`` in a Python loop, builds a device tensor
from the list (a blocking host-to-device copy) and adds ``seq_lens - 1``; it is written out below as in
0.5.23 (so that the check needs no SGLang on the GPU machine). mrope's is one
``table.decode(out, req_pool_indices, seq_lens)`` from device tensors, deltas kept on the device.
Checks before timing: both give the same positions; mrope's step runs with no host synchronization
(``torch.cuda.set_sync_debug_mode("error")``) and replays from a CUDA graph with new inputs. Times:
wall-clock medians per step (host and device, synchronized after each call). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from _timing import format_table, median_us  # noqa: E402
from mrope import PositionTable  # noqa: E402

PROMPT = 300  # tokens per prompt: text, then a 16 x 16 image, then text


def sglang_decode(seq_lens: torch.Tensor, deltas: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """SGLang 0.5.23's decode positions for multimodal requests, as ``_compute_mrope_positions_decode``
    writes them (the per-request ``.item()`` loop, a tensor from the list, ``seq_lens - 1 + delta``)."""
    deltas_list = [0] * len(deltas)
    for i, delta in enumerate(deltas):
        deltas_list[i] = delta.item()
    delta_tensor = torch.tensor(deltas_list, dtype=torch.int64, device=device)
    return ((delta_tensor - 1) + seq_lens.to(torch.int64)).unsqueeze(0).repeat(3, 1)


def build(size: int, device: torch.device) -> tuple[PositionTable, dict[str, Any]]:
    """A table of ``size`` requests in slots 1..size (SGLang's row 0 is padding), their tensors."""
    table = PositionTable(size + 1, device=device)
    positions = torch.arange(PROMPT).repeat(3, 1)
    image = torch.arange(256)
    positions[:, 20:276] = torch.stack([image * 0, image // 16, image % 16]) + 20
    positions[:, 276:] = torch.arange(PROMPT - 276) + 36
    delta = int(positions.max()) + 1 - PROMPT
    for slot in range(1, size + 1):
        table.add_positions(slot, positions, delta)
    slots = torch.arange(1, size + 1, device=device)
    seq_lens = torch.full((size,), PROMPT + 10, device=device) + torch.arange(size, device=device) % 7
    deltas = [torch.tensor([[delta]]) for _ in range(size)]  # SGLang keeps them on the host, per request
    return table, {"slots": slots, "seq_lens": seq_lens, "deltas": deltas}


def check(table: PositionTable, inputs: dict[str, Any], device: torch.device) -> None:
    out = torch.empty((3, inputs["slots"].shape[0]), dtype=torch.int64, device=device)
    table.decode(out, inputs["slots"], inputs["seq_lens"])
    expected = sglang_decode(inputs["seq_lens"], inputs["deltas"], device)
    assert torch.equal(out, expected), "mrope's decode differs from SGLang's"
    if device.type != "cuda":
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        table.decode(out, inputs["slots"], inputs["seq_lens"])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table.decode(out, inputs["slots"], inputs["seq_lens"])
    inputs["seq_lens"] += 1
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, sglang_decode(inputs["seq_lens"], inputs["deltas"], device)), "graph replay"


def timed(fn: Any, device: torch.device, repeats: int = 200) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return samples


def row(size: int, device: torch.device) -> list[float]:
    """``[size, SGLang us, mrope us, ratio]`` after the checks."""
    table, inputs = build(size, device)
    check(table, inputs, device)
    out = torch.empty((3, size), dtype=torch.int64, device=device)
    slots, seq_lens, deltas = inputs["slots"], inputs["seq_lens"], inputs["deltas"]
    ours = median_us(timed(lambda: table.decode(out, slots, seq_lens), device))
    theirs = median_us(timed(lambda: sglang_decode(seq_lens, deltas, device), device))
    return [size, theirs, ours, theirs / ours]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="8,64,256")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = [row(int(size), device) for size in args.sizes.split(",")]
    print(f"SGLang decode positions on {device} (per step, synchronized; no host sync inside mrope's)")
    print(format_table(["running requests", "SGLang us", "mrope us", "SGLang / mrope"], rows))


if __name__ == "__main__":
    main()
