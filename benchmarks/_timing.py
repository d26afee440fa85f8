"""Shared timing and reporting for the benchmarks: medians over repeats, ratio tables, JSON output."""

from __future__ import annotations

import gc
import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def time_call(fn: Callable[[], Any], *, repeats: int = 50, min_seconds: float = 0.2) -> list[float]:
    """Seconds per call of ``fn``, one sample per call, after one warm-up call.

    Runs at least ``repeats`` calls and keeps going until ``min_seconds`` have passed, so fast calls get
    enough samples for a stable median.
    """
    fn()
    samples: list[float] = []
    begin = time.perf_counter()
    while len(samples) < repeats or (time.perf_counter() - begin < min_seconds and len(samples) < 100_000):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def time_once(fn: Callable[[], Any]) -> float:
    """Seconds of one call of ``fn``, the garbage collector off during it (as ``timeit`` does): a
    collection of some other code's garbage is not the call's cost."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    finally:
        if enabled:
            gc.enable()


_EVICTION: list[Any] = []


def evict_caches() -> None:
    """Read 64 MiB (one byte per cache line), more than this machine's caches hold: the state an
    engine's step code finds after a forward pass."""
    import numpy as np

    if not _EVICTION:
        _EVICTION.append(np.ones(64 << 20, dtype=np.uint8))
    int(_EVICTION[0][::64].sum())


def cuda_event_seconds(fn: Callable[[], Any], repeats: int, *, warmup: int = 1) -> list[float]:
    """Seconds per call of ``fn`` on the current CUDA device, CUDA events around each call (``warmup``
    calls first, then a synchronize)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3)
    return samples


def time_interleaved(fns: dict[str, Callable[[], Any]], *, quick: bool = False) -> dict[str, list[float]]:
    """Seconds per call of each function, measured in alternating rounds so that a change in machine
    load during the run affects every function alike.

    Each round calls each function enough times to take about 5 ms (calibrated once) and records the
    mean per call; ``quick`` runs 5 rounds, otherwise 25.
    """
    calls = {}
    for name, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(0.005 / max(time.perf_counter() - t0, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(5 if quick else 25):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls[name])
    return samples


def median_us(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1e6


def percentile_us(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index] * 1e6


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-markdown table, numbers formatted to stay readable."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    import numpy as np

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    """Write raw results (plus machine info and time) as JSON so later runs can be compared."""
    if not path:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine_info(), **payload}
    out.write_text(json.dumps(payload, indent=2))
