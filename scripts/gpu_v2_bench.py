"""GPU benchmark and checks of vLLM Model Runner V2's M-RoPE step: vLLM's ``prepare_positions`` kernel
against mrope's ``PositionTable.fill_ragged`` (one Triton launch each), on the same steps.

Usage (where a CUDA GPU is lent; about a minute)::

    PYTHONPATH=src python scripts/gpu_v2_bench.py [--sizes 8,64,256]

vLLM's kernel is imported from vLLM where it is installed, else taken from ``scripts/_vllm_rope_kernel.py``
after checking that its source digest equals the audited one (``_vllm_audit.AUDITED``): vLLM's own kernel,
byte for byte. vLLM's per-token prompt positions live in device memory here (vLLM keeps them in pinned
host memory read over PCIe: the baseline is, if anything, faster than vLLM's). Requests are Qwen2.5-VL-3B
prompts of 270 text tokens and one 512x512 image (mrope's table holds their segments); each step has one
300-token prefill chunk ending inside the image, and every other request decodes one token (index +
delta) or verifies 4 speculative tokens. ``--device cpu`` runs the same checks and a rough timing on
the CPU (vLLM's kernel in Triton's interpreter: set ``TRITON_INTERPRET=1``), to try the script without
a GPU.

Checks before timing: both kernels write the same positions; mrope's step runs with no host
synchronization (``torch.cuda.set_sync_debug_mode("error")``) and replays from a CUDA graph with new
inputs. Times are CUDA-event medians. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))

from _timing import cuda_event_seconds, median_us, time_call  # noqa: E402
from mrope import from_config  # noqa: E402
from mrope.integrations.vllm import audit as _vllm_audit  # noqa: E402
from mrope.serving import PositionTable  # noqa: E402
from step import IMAGE_GRID, QWEN2_5_VL_3B  # noqa: E402

KERNEL = "vllm.v1.worker.gpu.mm.rope:_prepare_rope_positions_kernel"
MAX_MODEL_LEN = 4096


def vllm_kernel() -> tuple[object, str]:
    """vLLM's step kernel and where it came from (its source digest checked)."""
    try:
        from vllm.v1.worker.gpu.mm.rope import _prepare_rope_positions_kernel as kernel

        origin = "vllm (installed)"
    except Exception:
        path = ROOT / "scripts" / "_vllm_rope_kernel.py"
        spec = importlib.util.spec_from_file_location("_vllm_rope_kernel", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kernel = module._prepare_rope_positions_kernel
        source = path.read_text()
        digest = _vllm_audit.source_digest(source, "_prepare_rope_positions_kernel")
        if digest not in {release[KERNEL] for release in _vllm_audit.AUDITED.values()}:
            raise SystemExit(f"{path}: not vLLM's audited kernel (digest {digest})") from None
        origin = "vLLM 0.32.0/0.33.0's kernel source (digest checked)"
    fn = getattr(kernel, "fn", kernel)
    assert "prefill_positions_ptr" in inspect.signature(fn).parameters
    return kernel, origin


def cuda_time(fn: Callable[[], object], iters: int = 300) -> float:
    return median_us(cuda_event_seconds(fn, iters, warmup=20))


def build(num_requests: int, device: str) -> dict:
    """Both states holding ``num_requests`` image prompts, and one step's device inputs."""
    family = from_config(QWEN2_5_VL_3B)
    merge = family.spatial_merge_size
    tokens = IMAGE_GRID[1] * IMAGE_GRID[2] // merge**2
    ids = [1] * 10 + [family.image_token_id] * tokens + [2] * 260
    length = len(ids)
    table = PositionTable(num_requests, device=device)
    prefill = torch.zeros((num_requests * 3, MAX_MODEL_LEN), dtype=torch.int32, device=device)
    delta = torch.zeros(num_requests, dtype=torch.int32, device=device)
    for slot in range(num_requests):
        table.add(slot, family, ids, image_grid_thw=[IMAGE_GRID], image_offsets=[10], video_offsets=[])
        positions, d = family.positions(ids, image_grid_thw=[IMAGE_GRID])
        prefill[3 * slot : 3 * slot + 3, :length] = torch.from_numpy(positions).to(torch.int32)
        delta[slot] = d
    # one prefill chunk of 300 tokens from index 0 (the image covers indices 10 ... 333), every other
    # request decodes one token or verifies four speculative ones
    rng = np.random.default_rng(num_requests)
    order = rng.permutation(num_requests)  # request index -> slot, in any order
    computed = np.full(num_requests, length + 20, dtype=np.int32)
    scheduled = np.where(rng.random(num_requests) < 0.25, 5, 1).astype(np.int32)
    computed[order[0]], scheduled[0] = 0, 300
    qsl = np.zeros(num_requests + 1, dtype=np.int32)
    np.cumsum(scheduled, out=qsl[1:])
    num = int(qsl[-1])
    return {
        "table": table,
        "prefill": prefill,
        "delta": delta,
        "idx_mapping": torch.from_numpy(order.astype(np.int32)).to(device),
        "query_start_loc": torch.from_numpy(qsl).to(device),
        "num_computed": torch.from_numpy(computed).to(device),
        "prefill_lens": torch.full((num_requests,), length, dtype=torch.int32, device=device),
        "num_tokens": num,
        "ours": torch.zeros((3, num + 64 + 1), dtype=torch.int64, device=device),
        "theirs": torch.zeros((3, num + 64 + 1), dtype=torch.int64, device=device),
    }


def same(s: dict, n: int, what: str) -> None:
    """Both kernels wrote the same positions (synchronizes)."""
    num = s["num_tokens"]
    ours, theirs = s["ours"][:, :num].cpu(), s["theirs"][:, :num].cpu()
    if not torch.equal(ours, theirs):
        bad = int((ours != theirs).any(0).nonzero()[0])
        raise SystemExit(
            f"{n} requests: {what}column {bad}: mrope {ours[:, bad].tolist()}, vLLM {theirs[:, bad].tolist()}"
        )


def host_time(fn: Callable[[], object], iters: int = 20) -> float:
    """Median microseconds per call on the host (the CPU smoke run)."""
    return median_us(time_call(fn, repeats=iters, min_seconds=0.0))


def run(sizes: list[int], device: str) -> list[str]:
    kernel, origin = vllm_kernel()
    cuda = device == "cuda"
    where = torch.cuda.get_device_name() if cuda else "CPU (Triton's interpreter for vLLM's kernel)"
    rows = [
        f"vLLM kernel: {origin}; device: {where}",
        "",
        "| running requests | step tokens | vLLM prepare_positions us | mrope fill_ragged us | "
        "mrope, CUDA graph replay us | vLLM / mrope |",
        "|---|---|---|---|---|---|",
    ]
    for n in sizes:
        s = build(n, device)
        table, num = s["table"], s["num_tokens"]

        def theirs() -> None:
            kernel[(n,)](
                s["theirs"],
                s["theirs"].stride(0),
                s["prefill"],
                3 * MAX_MODEL_LEN,
                MAX_MODEL_LEN,
                s["delta"],
                s["idx_mapping"],
                s["query_start_loc"],
                s["prefill_lens"],
                s["num_computed"],
                BLOCK_SIZE=1024,
                NUM_DIMS=3,
            )

        def ours() -> None:
            table.fill_ragged(s["ours"], s["idx_mapping"], s["query_start_loc"], s["num_computed"])

        theirs()
        ours()
        same(s, n, "")
        if not cuda:
            t_vllm, t_ours = host_time(theirs), host_time(ours)
            rows.append(f"| {n} | {num} | {t_vllm:.1f} | {t_ours:.1f} | - | {t_vllm / t_ours:.2f}x |")
            continue
        table.check()
        torch.cuda.set_sync_debug_mode("error")
        ours()
        torch.cuda.set_sync_debug_mode(0)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ours()
        s["ours"].zero_()
        s["num_computed"].add_(1)  # new inputs in place: the replay must follow them
        graph.replay()
        theirs()
        same(s, n, "the CUDA graph replay: ")
        t_vllm, t_ours, t_graph = cuda_time(theirs), cuda_time(ours), cuda_time(graph.replay)
        rows.append(f"| {n} | {num} | {t_vllm:.1f} | {t_ours:.1f} | {t_graph:.1f} | {t_vllm / t_ours:.2f}x |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8,64,256")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    for line in run([int(x) for x in args.sizes.split(",")], args.device):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
