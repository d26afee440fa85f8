"""A timer around SGLang's ``ForwardBatch._compute_mrope_positions`` where the engine calls it, as an SGLang
plugin (the benchmark's, never the library's): SGLang's own hook registry wraps whatever method is
installed once every plugin has run, mrope's (registrations and bookkeeping included) or SGLang's.

:func:`install` writes a distribution's metadata (its ``sglang.srt.plugins`` entry point) into a folder
that the benchmark puts on ``PYTHONPATH``; SGLang loads the plugin in every process it starts.
``Scheduler.mrope_bench_step_times(path)`` writes the scheduler's samples (``[kind, requests, new
requests, ns]`` per call) as JSON.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

TARGET = "sglang.srt.model_executor.forward_batch_info.ForwardBatch._compute_mrope_positions"
RPC = "mrope_bench_step_times"
_samples: list[list[int | str]] = []
_seen: set[str] = set()


def install(folder: Path) -> None:
    """Make this module an SGLang plugin for the processes that have ``folder`` and this module's folder
    on their import path."""
    info = folder / "mrope_bench_timer-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mrope-bench-timer\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[sglang.srt.plugins]\nmrope_bench_timer = {__name__}:register\n")


def register() -> None:
    """The plugin: the timer hook, and the scheduler method that writes its samples."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(TARGET, _timed, HookType.AROUND)
    setattr(Scheduler, RPC, _write)


def _timed(original: Any, forward_batch: Any, model_runner: Any, batch: Any) -> Any:
    start = time.perf_counter_ns()
    result = original(forward_batch, model_runner, batch)
    elapsed = time.perf_counter_ns() - start
    rids = [req.rid for req in batch.reqs]
    new = sum(1 for rid in rids if rid not in _seen)  # requests in their first step (registered there)
    _seen.update(rids)
    kind = "decode" if forward_batch.forward_mode.is_decode() else "extend"
    _samples.append([kind, len(batch.reqs), new, elapsed])
    return result


def _write(scheduler: Any, path: str) -> None:
    Path(path).write_text(json.dumps(_samples))
