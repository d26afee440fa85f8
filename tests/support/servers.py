"""Server processes for the tests and benchmarks: started in a process group of their own on a free port of
127.0.0.1, waited for until healthy, and stopped by their caller on success and on failure.

:func:`serve` is a context manager: it starts ``argv(port)`` (``python -m
vllm.entrypoints.openai.api_server``, ``python -m sglang.launch_server``, ...) with ``start_new_session``
(its own process group: the engine's children, which inherit the group, are found and killed with it),
its output in a log file, and polls ``http://127.0.0.1:port/<health>`` until it answers 200. A port
taken between the choice and the bind (the log says so) is no failure: another port is taken. On
leaving, whatever happened, every process of the group is killed. :meth:`ServerProcess.stop` is the
clean stop a test checks: SIGTERM to the server alone (as ``kill PID`` or a process manager sends it),
then its exit and its group's end are waited for.

Only the standard library: the tests' environments and the benchmarks' share it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
#: what a server's log says when its port was taken meanwhile (uvicorn, asyncio, SGLang)
PORT_TAKEN = re.compile(
    r"address already in use|errno 98|port \d+ is (?:already )?in use|is not available", re.I
)


def free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the kernel's choice; another process may take it before the
    server binds it: :func:`serve` then takes another)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid`` (Linux: read from ``/proc``)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


@dataclass
class ServerProcess:
    """A started server: its process (the group's leader), port and log file."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started_s: float = 0.0  # seconds from the start to the first healthy answer
    stop_s: float | None = None  # seconds from SIGTERM to the group's end (None: not stopped cleanly)
    leftovers: list[int] = field(default_factory=list)  # processes of the group alive after the stop

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log(self) -> str:
        """The server's output so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """Stop the server as a user does: SIGTERM to the server process alone, then wait up to
        ``timeout_s`` for it and every process of its group to end. Returns its exit status (None
        where it did not end in time); :attr:`leftovers` lists the group's processes still alive then
        (the ``finally`` of :func:`serve` kills them)."""
        start = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            returncode = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        while group_members(self.proc.pid) and time.monotonic() - start < timeout_s:
            time.sleep(0.2)
        self.leftovers = group_members(self.proc.pid)
        if returncode is not None and not self.leftovers:
            self.stop_s = time.monotonic() - start
        return returncode

    def kill(self) -> None:
        """SIGKILL to every process of the group, then reap the leader (idempotent)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while group_members(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def healthy(url: str, timeout_s: float = 5.0) -> bool:
    """Whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextlib.contextmanager
def serve(
    argv: Callable[[int], Sequence[str]],
    env: Mapping[str, str],
    log_path: Path,
    *,
    health: str = "/health",
    timeout_s: float = 600.0,
    attempts: int = 3,
    cwd: str | Path | None = None,
) -> Iterator[ServerProcess]:
    """Start ``argv(port)`` on a free port (another on a port taken meanwhile, up to ``attempts``), wait
    until ``health`` answers 200 (``timeout_s``), yield it; on leaving, kill its process group. Raises
    ``RuntimeError`` with the log's tail where it ends or times out before it is healthy."""
    server = None
    try:
        for attempt in range(attempts):
            port = free_port()
            path = log_path.with_name(f"{log_path.stem}.{attempt}{log_path.suffix}") if attempt else log_path
            with path.open("wb") as log:
                proc = subprocess.Popen(
                    list(argv(port)),
                    env=dict(env),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            server = ServerProcess(proc, port, path)
            start = time.monotonic()
            while proc.poll() is None and time.monotonic() - start < timeout_s:
                if healthy(server.url + health):
                    server.started_s = time.monotonic() - start
                    break
                time.sleep(0.5)
            if server.started_s:
                break
            ended = proc.poll()
            server.kill()
            output = server.log()
            if ended is not None and PORT_TAKEN.search(output) and attempt + 1 < attempts:
                continue
            what = "timed out" if ended is None else f"exited with {ended}"
            raise RuntimeError(
                f"server {what} before it was healthy: {argv(port)}\n--- log (tail)\n{output[-6000:]}"
            )
        yield server
    finally:
        if server is not None:
            server.kill()
