"""mrope's lines in a server's log (``mrope/integrations/_report.py``): the counters line at an interval and
at the exit of a process (a plain one and a ``multiprocessing`` child, as vLLM's engine core and SGLang's
scheduler are), once per change, and the interval's setting."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mrope._errors import note_once
from mrope.integrations import _report


def test_line_only_on_change() -> None:
    counters = {"admitted": 0, "steps": 0, "runner": None}
    log = _report.CountersLog(logging.getLogger("mrope.test"), lambda: counters)
    log.start("a test")
    assert log.line() is None  # all zero: nothing to say yet
    counters["admitted"] = 2
    line = log.line()
    assert line is not None and line.startswith(f"{_report.COUNTERS_PREFIX} of a test (pid ")
    assert line.endswith("admitted=2 steps=0 runner=None"), line
    assert log.line() is None  # unchanged
    counters["steps"] = 5
    assert log.line().endswith("admitted=2 steps=5 runner=None")


def test_note_once() -> None:
    logger = logging.getLogger("mrope.test.note")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    for _ in range(3):
        note_once("test-report-key", "mrope: serves %s", "x", log=logger, level=logging.INFO)
    assert seen == ["mrope: serves x"]


@pytest.mark.parametrize(
    ("value", "expected"), [("", 10.0), ("0", 0.0), ("2.5", 2.5), ("-1", 10.0), ("x", 10.0)]
)
def test_interval(monkeypatch: pytest.MonkeyPatch, value: str, expected: float) -> None:
    monkeypatch.setenv(_report.INTERVAL_VAR, value)
    assert _report.interval_s(logging.getLogger("mrope.test.interval")) == expected


SCRIPT = textwrap.dedent(
    """
    import logging, multiprocessing, os, sys, time
    from mrope.integrations import _report

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    counters = {"steps": 0}
    log = _report.CountersLog(logging.getLogger("mrope"), lambda: counters)

    def child():
        log.start("a child")
        counters["steps"] = 7  # then leave by os._exit, as multiprocessing children do

    if __name__ == "__main__":
        log.start("the parent")
        counters["steps"] = 1
        time.sleep(0.5)  # an interval line (0.1 s)
        counters["steps"] = 2
        process = multiprocessing.get_context("fork").Process(target=child)
        process.start()
        process.join()
        counters["steps"] = 3  # the line at exit
    """
)


def test_lines_at_interval_and_exit(tmp_path: Path) -> None:
    script = tmp_path / "report.py"
    script.write_text(SCRIPT)
    env = {"MROPE_STATS_INTERVAL": "0.1", "PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(_report.COUNTERS_PREFIX)]
    parent = [line.rsplit(" ", 1)[-1] for line in lines if " of the parent " in line]
    child = [line.rsplit(" ", 1)[-1] for line in lines if " of a child " in line]
    assert parent[0] == "steps=1" and parent[-1] == "steps=3", lines  # interval, then exit
    assert len(parent) == len(set(parent)), lines  # a line only when they changed
    assert child == ["steps=7"], lines  # the child's line at its exit (os._exit: multiprocessing's hook)
