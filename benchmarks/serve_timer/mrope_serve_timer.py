"""``benchmarks/serve.py``'s timer of vLLM's ``_prepare_inputs``: a ``vllm.general_plugins`` entry point found
through this folder's ``mrope_serve_timer-0.dist-info`` when the folder is on a server's ``PYTHONPATH`` (only
the benchmark puts it there; nothing installs it).

In every process vLLM starts, :func:`register` gives the V1 CPU model runner (``CPUModelRunner``) a
``_prepare_inputs`` that times its parent class's method as it is at the call (vLLM's, or mrope's
replacement around it with ``MROPE_VLLM=1``: the step's positions are computed inside it), and appends
``wall_time_s duration_ns num_reqs`` per step to the file ``MROPE_SERVE_TIMER_FILE`` names, flushed by
a thread of the timing process every half second (vLLM kills its worker at shutdown: nothing waits for
an exit). Without that variable it does nothing.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

FILE_VAR = "MROPE_SERVE_TIMER_FILE"
FLUSH_S = 0.5


def register() -> None:
    """Install the timer where ``MROPE_SERVE_TIMER_FILE`` is set (once per process)."""
    path = os.environ.get(FILE_VAR)
    if not path:
        return
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if "_prepare_inputs" in vars(CPUModelRunner):
        return
    rows: list[str] = []
    lock = threading.Lock()
    flushing: list[int] = []  # the pid whose flush thread runs (a forked worker starts its own)

    def prepare_inputs(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        if flushing != [os.getpid()]:
            flushing[:] = [os.getpid()]
            threading.Thread(target=flush, name="mrope-serve-timer", daemon=True).start()
        start = time.perf_counter_ns()
        result = GPUModelRunner._prepare_inputs(self, scheduler_output, *args, **kwargs)
        elapsed = time.perf_counter_ns() - start
        with lock:
            rows.append(f"{time.time():.6f} {elapsed} {self.input_batch.num_reqs}\n")
        return result

    def flush() -> None:
        while True:
            time.sleep(FLUSH_S)
            with lock:
                taken = rows[:]
                rows.clear()
            if taken:
                with open(path, "a", encoding="utf-8") as file:
                    file.writelines(taken)

    CPUModelRunner._prepare_inputs = prepare_inputs
