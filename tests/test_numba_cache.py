"""numba's cache keyed on a digest of what a function compiles (mrope._numba_cache): a changed constant or
callee changes the key, the same code gives the same key in every process, and a cached entry loads in
the next process but never after a constant it baked in changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.peers import require_module

numba = require_module("numba")
from mrope._numba_cache import compiled_digest  # noqa: E402
from mrope.core import compiled as core_compiled  # noqa: E402
from mrope.serving import _compiled  # noqa: E402

KERNELS = [_compiled.fill, core_compiled.render_table]
SRC = str(Path(_compiled.__file__).parents[2])  # the mrope under test, for the subprocesses


@pytest.mark.parametrize("kernel", KERNELS, ids=["fill", "render_table"])
def test_a_kernel_is_cached_under_the_digest_of_its_code(kernel) -> None:
    digest = compiled_digest(kernel.py_func)
    assert kernel.py_func.__qualname__ == f"{kernel.__name__}_{digest}"
    assert compiled_digest(kernel.py_func) == digest


def test_a_baked_in_constant_or_callee_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    fill, render = (
        compiled_digest(_compiled.fill.py_func),
        compiled_digest(core_compiled.render_table.py_func),
    )
    monkeypatch.setattr(_compiled, "FT0", _compiled.FT0 + 1)  # a field row of the pool (serving/_pool.py)
    assert compiled_digest(_compiled.fill.py_func) != fill
    monkeypatch.undo()
    assert compiled_digest(_compiled.fill.py_func) == fill

    def other_formula(o, q, r, t0, hw0, is_text):  # noqa: ANN001, ANN202
        return t0, hw0 + q, hw0 + r

    # the formula two calls down (render_table -> write_run -> _formula)
    monkeypatch.setattr(core_compiled, "_formula", numba.njit(inline="always")(other_formula))
    assert compiled_digest(core_compiled.render_table.py_func) != render
    assert compiled_digest(_compiled.fill.py_func) != fill


def test_the_same_code_gives_the_same_key_in_another_process() -> None:
    code = (
        "from mrope._numba_cache import compiled_digest; from mrope.serving import _compiled; "
        "print(compiled_digest(_compiled.fill.py_func))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == compiled_digest(_compiled.fill.py_func)


def test_a_cached_entry_loads_in_the_next_process_and_not_after_its_constant_changed(tmp_path: Path) -> None:
    """A kernel reading ``K`` from another module: the second process loads it from the cache; after
    ``K`` changes (the kernel's file untouched, which plain ``cache=True`` would serve stale) the third
    compiles anew and returns the new value."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "consts.py").write_text("K = 3\n")
    (package / "kernel.py").write_text(
        textwrap.dedent(
            """
            from mrope._numba_cache import cached_njit
            from .consts import K


            @cached_njit()
            def add_k(x):
                return x + K
            """
        )
    )
    code = (
        "from pkg.kernel import add_k; r = add_k(1); s = add_k.stats; "
        "print(r, sum(s.cache_hits.values()), sum(s.cache_misses.values()))"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": f"{tmp_path}:{SRC}"}

    def run() -> list[int]:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return [int(v) for v in out.stdout.split()]

    assert run() == [4, 0, 1]  # compiled and saved
    assert run() == [4, 1, 0]  # loaded
    (package / "consts.py").write_text("K = 4\n")
    assert run() == [5, 0, 1]  # a new key: compiled again, not the stale entry
