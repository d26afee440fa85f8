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
from support.reference import QWEN2_5_VL_DICT as QWEN2_5_VL

numba = require_module("numba")
from mrope._numba_cache import compiled_digest  # noqa: E402
from mrope.render import numba as numba_backend  # noqa: E402
from mrope.serving import compiled_step  # noqa: E402

KERNELS = [compiled_step.fill, numba_backend.render_table]
SRC = str(Path(compiled_step.__file__).parents[2])  # the mrope under test, for the subprocesses


@pytest.mark.parametrize("kernel", KERNELS, ids=["fill", "render_table"])
def test_a_kernel_is_cached_under_the_digest_of_its_code(kernel) -> None:
    digest = compiled_digest(kernel.py_func)
    assert kernel.py_func.__qualname__ == f"{kernel.__name__}_{digest}"
    assert compiled_digest(kernel.py_func) == digest


def test_a_baked_in_constant_or_callee_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    fill, render = (
        compiled_digest(compiled_step.fill.py_func),
        compiled_digest(numba_backend.render_table.py_func),
    )
    monkeypatch.setattr(compiled_step, "T0", compiled_step.T0 + 1)  # a segment row (core/segments.py)
    assert compiled_digest(compiled_step.fill.py_func) != fill
    monkeypatch.undo()
    assert compiled_digest(compiled_step.fill.py_func) == fill

    def other_formula(o, q, r, t0, hw0, is_text):  # noqa: ANN001, ANN202
        return t0, hw0 + q, hw0 + r

    # the formula two calls down (render_table -> render_run -> _formula)
    monkeypatch.setattr(numba_backend, "_formula", numba.njit(inline="always")(other_formula))
    assert compiled_digest(numba_backend.render_table.py_func) != render
    assert compiled_digest(compiled_step.fill.py_func) != fill


def test_the_same_code_gives_the_same_key_in_another_process() -> None:
    code = (
        "from mrope._numba_cache import compiled_digest; from mrope.serving import compiled_step; "
        "print(compiled_digest(compiled_step.fill.py_func))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == compiled_digest(compiled_step.fill.py_func)


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


# -- a read-only install, numba's JIT disabled ---------------------------------------------------------
#: the child: a table (a request added, a step filled) and a batch long enough for the compiled render,
#: written to the folder it is given, with what ran
_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import mrope
    from mrope._errors import MRopeError
    from mrope.render.table import COMPILED_FROM, compiled_render

    family = mrope.from_config(json.loads(sys.argv[2]))
    ids = [1, 2, 151652, 151655, 3, 4]  # a vision start and one image placeholder
    table = mrope.PositionTable(max_requests=2)
    table.add(0, family, ids, image_grid_thw=[[1, 2, 2]])
    step = np.zeros((3, len(ids) + 2), dtype=np.int64)
    table.fill(step, np.array([0]), np.array([0]), np.array([len(ids) + 2]))
    batch = np.array([ids + list(range(5, 5 + COMPILED_FROM))] * 2)
    positions, deltas = mrope.get_rope_index(family, batch, image_grid_thw=[[1, 2, 2]] * 2)
    try:
        mrope.PositionTable(1, backend="numba")
        numba_backend = "accepted"
    except MRopeError as error:
        numba_backend = str(error)
    out = Path(sys.argv[1])
    np.savez(out / "result.npz", step=step, positions=positions, deltas=deltas)
    facts = {
        "file": mrope.__file__,
        "backend": table.backend,
        "compiled_render": compiled_render() is not None,
        "numba_backend": numba_backend,
    }
    (out / "facts.json").write_text(json.dumps(facts))
    """
)


def _read_only_copy(root: Path) -> Path:
    """A copy of the mrope under test that nobody, root included, can cache into: every package folder's
    ``__pycache__`` a regular file (numba's in-tree cache cannot be created under it, whoever runs) and
    the tree made read-only; returns the folder to put first on ``PYTHONPATH``."""
    import shutil

    site = root / "site"
    shutil.copytree(Path(SRC) / "mrope", site / "mrope", ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [site / "mrope", *(site / "mrope").rglob("*")]:
        if folder.is_dir():
            (folder / "__pycache__").write_text("")
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    return site


@pytest.mark.parametrize("disable_jit", [False, True], ids=["read-only install", "NUMBA_DISABLE_JIT=1"])
def test_a_read_only_install_runs_and_says_so_once(tmp_path: Path, disable_jit: bool) -> None:
    """The package on a read-only copy, ``HOME`` a regular file (numba's user-wide cache cannot be made
    under it), no ``NUMBA_CACHE_DIR``: a table adds a request and fills a step, and ``get_rope_index``
    renders a batch through the compiled render (numba compiles without its cache), the positions those
    of this process, and one line of log says so. With ``NUMBA_DISABLE_JIT=1``, the same through the
    numpy paths (``backend='numba'`` refused by name), one line saying so."""
    import json

    site = _read_only_copy(tmp_path)
    home = tmp_path / "home"
    home.write_text("")
    out = tmp_path / "out"
    out.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "MROPE_", "XDG_", "PYTHONPATH"))
    }
    env.update(HOME=str(home), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    if disable_jit:
        env["NUMBA_DISABLE_JIT"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(out), json.dumps(QWEN2_5_VL)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads((out / "facts.json").read_text())
    assert Path(facts["file"]).is_relative_to(site), facts
    lines = done.stderr.splitlines()
    if disable_jit:
        assert facts["backend"] == "numpy" and not facts["compiled_render"], facts
        assert "needs numba's compiler: numba's JIT is disabled" in facts["numba_backend"], facts
        assert lines == [
            "mrope: numba's JIT is disabled (NUMBA_DISABLE_JIT=1): mrope runs its numpy paths, not its "
            "compiled ones"
        ], done.stderr
    else:
        assert facts["backend"] == "numba" and facts["compiled_render"], facts
        assert facts["numba_backend"] == "accepted", facts
        assert len(lines) == 1 and lines[0].startswith("mrope: numba finds no writable directory"), (
            done.stderr
        )
    assert all(p.is_file() for p in site.rglob("__pycache__")), "a cache folder was made in the copy"

    # the same positions as this process computes
    import numpy as np

    import mrope

    family = mrope.from_config(QWEN2_5_VL)
    result = np.load(out / "result.npz")
    ids = [1, 2, 151652, 151655, 3, 4]
    expected, delta = family.positions(ids, image_grid_thw=[[1, 2, 2]])
    np.testing.assert_array_equal(result["step"][:, : len(ids)], expected, strict=True)
    decode = np.arange(len(ids), len(ids) + 2) + delta
    np.testing.assert_array_equal(result["step"][:, len(ids) :], np.stack([decode] * 3), strict=True)
    batch = np.asarray(result["positions"])
    rows = [ids + list(range(5, 5 + batch.shape[2] - len(ids)))] * 2
    positions, deltas = mrope.get_rope_index(family, np.array(rows), image_grid_thw=[[1, 2, 2]] * 2)
    np.testing.assert_array_equal(batch, positions, strict=True)
    np.testing.assert_array_equal(result["deltas"], deltas, strict=True)
