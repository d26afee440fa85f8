"""GPU benchmark and checks of PositionTable's device path (runs where a CUDA GPU is lent; < 3 minutes).

Usage::

    PYTHONPATH=src python scripts/gpu_serving_bench.py [--sizes 1,16,64,256,1024]

For decode-only and mixed steps (one 512-token prefill chunk + decodes) of Qwen2.5-VL-3B requests
(270 text tokens + one 512x512 image), times with CUDA events:

- ``host+H2D``: the numpy ``fill`` into a pinned buffer, then a row-by-row non-blocking copy to the GPU
  (what an engine does today, without the Python loop);
- ``device``: ``fill`` on device tensors, eager;
- ``graph``: the same captured in a CUDA graph at a fixed capacity, replayed;
- ``decode``: ``decode(out, rows, seq_lens)`` on the device (decode-only rows).

Checks, before timing: device == host positions, graph replay == eager, and no synchronization under
``torch.cuda.set_sync_debug_mode("error")``. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from mrope import from_config
from mrope.serving import PositionTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _timing import cuda_event_seconds, median_us  # noqa: E402
from step import IMAGE_GRID, QWEN2_5_VL_3B  # noqa: E402


def cuda_time(fn: Callable[[], object], iters: int = 200) -> float:
    """Median microseconds per call, CUDA events around each call."""
    return median_us(cuda_event_seconds(fn, iters, warmup=10))


def run_case(table: PositionTable, kind: str, n: int, length: int) -> tuple:
    """Checks, then times, one step shape; returns a table row."""
    rows = np.arange(n, dtype=np.int64)
    nc = np.full(n, length + 17, dtype=np.int64)
    ns = np.ones(n, dtype=np.int64)
    if kind == "mixed":
        nc[0], ns[0] = 0, 512
    num = int(ns.sum())
    capacity = num + 64
    pinned = torch.zeros((3, capacity + 1), dtype=torch.int64).pin_memory()
    pinned_np = pinned.numpy()
    gpu_out = torch.zeros((3, capacity), dtype=torch.int64, device="cuda")
    d_rows, d_nc, d_ns = (torch.from_numpy(a).cuda() for a in (rows, nc, ns))
    d_seq = (d_nc + 1).contiguous()

    def host_h2d():
        table.fill(pinned_np[:, :capacity], rows, nc, ns)
        for r in range(3):  # a strided pinned slice would go through pageable memory: row by row
            gpu_out[r, :num].copy_(pinned[r, :num], non_blocking=True)

    def device():
        table.fill(gpu_out, d_rows, d_nc, d_ns, num_tokens=num)

    # checks
    host_h2d()
    torch.cuda.synchronize()
    expected = gpu_out[:, :num].clone()
    gpu_out.zero_()
    device()
    torch.cuda.synchronize()
    assert torch.equal(gpu_out[:, :num], expected), f"{kind} {n}: device != host"
    torch.cuda.set_sync_debug_mode("error")
    try:
        device()
        if kind == "decode":
            table.decode(gpu_out, d_rows, d_seq)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    graph_out = torch.zeros((3, capacity), dtype=torch.int64, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        table.fill(graph_out, d_rows, d_nc, d_ns, num_tokens=capacity)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        table.fill(graph_out, d_rows, d_nc, d_ns, num_tokens=capacity)
    graph_out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graph_out[:, :num], expected), f"{kind} {n}: graph replay != eager"
    assert int((graph_out[:, num:] != 0).sum()) == 0
    table.check()

    t_host = cuda_time(host_h2d)
    t_dev = cuda_time(device)
    t_graph = cuda_time(graph.replay)
    t_dec = cuda_time(lambda: table.decode(gpu_out, d_rows, d_seq)) if kind == "decode" else float("nan")
    del graph
    return kind, n, num, t_host, t_dev, t_graph, t_dec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,16,64,256,1024")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to do")
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    family = from_config(QWEN2_5_VL_3B)
    image = [151652] + [151655] * (IMAGE_GRID[1] * IMAGE_GRID[2] // 4) + [151653]
    ids = np.array(list(range(8)) + image + list(range(8, 270)), dtype=np.int64)
    max_requests = max(sizes)
    table = PositionTable(max_requests, device="cuda")
    for row in range(max_requests):
        table.add(row, family, ids, image_grid_thw=[IMAGE_GRID])
    length = ids.size
    rows_out = []
    for kind in ("decode", "mixed"):
        for n in sizes:
            rows_out.append(run_case(table, kind, n, length))
    print(
        "| step | requests | tokens | host fill + H2D us | device eager us | device graph us | decode() us |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind, n, num, a, b, c, d in rows_out:
        print(f"| {kind} | {n} | {num} | {a:.1f} | {b:.1f} | {c:.1f} | {d:.1f} |")
    print(
        "\nchecks passed: device == host, graph replay == eager, no sync under set_sync_debug_mode('error')"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
