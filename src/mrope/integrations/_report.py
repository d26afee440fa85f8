"""What a server's user sees of mrope: the integrations' lines in the engine's log.

A server (``vllm serve``, SGLang's HTTP server) runs its model runner in a process of its own (vLLM's
engine core, SGLang's scheduler), where :func:`mrope.integrations.vllm.stats` and
:func:`mrope.integrations.sglang.stats` live and no client can call them. The integrations therefore
say in the log, once per process, that mrope serves a runner (which runner, which family or positions
mode, the audited release; :func:`note_once`), and a :class:`CountersLog` writes that process's
counters as one line at a fixed interval (only when they changed) and at the process's exit:

    mrope: counters of vLLM's V1 model runner (pid 4242): admitted=64 removed=64 steps=2210 ...

``MROPE_STATS_INTERVAL`` sets the interval in seconds (default 10, as vLLM's own statistics; ``0``:
only the line at exit); a value that is not a number >= 0 is said once in the log and the default kept.
Nothing here raises into the engine.
"""

from __future__ import annotations

import atexit
import logging
import math
import multiprocessing.util
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import note_once

#: the environment variable read for the interval of the counters lines, in seconds
INTERVAL_VAR = "MROPE_STATS_INTERVAL"
#: the interval where :data:`INTERVAL_VAR` is unset or invalid (vLLM's ``VLLM_LOG_STATS_INTERVAL``'s)
DEFAULT_INTERVAL_S = 10.0
#: what every counters line begins with (then ``of <what> (pid N): name=value ...``)
COUNTERS_PREFIX = "mrope: counters"


def interval_s(logger: logging.Logger) -> float:
    """The interval of the counters lines: :data:`INTERVAL_VAR` in seconds, 0 for none (only the line at
    exit); :data:`DEFAULT_INTERVAL_S` where unset or invalid (said once in the log)."""
    raw = os.environ.get(INTERVAL_VAR, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        message = "mrope: %s=%r is not a number of seconds >= 0; %s s kept"
        note_once(
            INTERVAL_VAR, message, INTERVAL_VAR, raw, DEFAULT_INTERVAL_S, log=logger, level=logging.INFO
        )
        return DEFAULT_INTERVAL_S
    return value


class CountersLog:
    """One process's counters as log lines: every :func:`interval_s` seconds when they changed since the
    last line, and once at the process's exit (interpreter exit, or the end of a ``multiprocessing``
    child: vLLM's engine core, SGLang's scheduler, which leave by ``os._exit``).

    Parameters
    ----------
    logger : where the lines go (INFO).
    stats : the counters now (name -> value), read from the reporting thread: a snapshot of ints.
    """

    def __init__(self, logger: logging.Logger, stats: Callable[[], Mapping[str, Any]]) -> None:
        self._logger = logger
        self._stats = stats
        self._lock = threading.Lock()
        self._pid: int | None = None  # the process this log was started in
        self._what = ""
        self._last: dict[str, Any] | None = None
        self._stop = threading.Event()

    def start(self, what: str) -> None:
        """Report this process's counters from now on, as those ``of <what>`` (a runner, a process's
        role); once per process (later calls do nothing; a forked child starts its own)."""
        with self._lock:
            pid = os.getpid()
            if self._pid == pid:
                return
            self._pid, self._what, self._last = pid, what, None
            self._stop = threading.Event()
        try:
            every = interval_s(self._logger)
            atexit.register(self.final)
            multiprocessing.util.Finalize(None, self.final, exitpriority=100)
            if every > 0:
                thread = threading.Thread(
                    target=self._run, args=(every, self._stop), name="mrope-counters", daemon=True
                )
                thread.start()
        except Exception as error:  # never fails the engine: the lines are missing, said once
            note_once(
                "counters-log",
                "mrope: no counters lines in this process: %s",
                error,
                log=self._logger,
                level=logging.INFO,
            )

    def line(self) -> str | None:
        """The counters line now, or None where it would repeat the last one (or say nothing: all zero
        before any line)."""
        now = dict(self._stats())
        with self._lock:
            if now == self._last or (self._last is None and not any(_nonzero(v) for v in now.values())):
                return None
            self._last = now
        values = " ".join(f"{name}={value}" for name, value in now.items())
        return f"{COUNTERS_PREFIX} of {self._what} (pid {os.getpid()}): {values}"

    def report(self) -> None:
        """Log the counters line if they changed since the last one."""
        try:
            text = self.line()
        except Exception:  # a line missed, never an error in the engine
            return
        if text is not None:
            self._logger.info("%s", text)

    def final(self) -> None:
        """The line at exit (at most once per process: ``atexit`` and ``multiprocessing`` may both call)."""
        if self._pid != os.getpid() or self._stop.is_set():
            return
        self._stop.set()
        self.report()

    def _run(self, every: float, stop: threading.Event) -> None:
        while not stop.wait(every):
            self.report()


def _nonzero(value: Any) -> bool:
    return isinstance(value, (int, float)) and value != 0
