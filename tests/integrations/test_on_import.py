"""mrope.integrations._on_import: an action after a module's import, by whoever imports it."""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mrope.integrations import _on_import as on_import


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for throwaway modules; their imports and waiting actions dropped after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    on_import.cancel()
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(folder: Path, name: str, source: str = "def f():\n    return 1\n") -> None:
    (folder / f"{name}.py").write_text(source)
    importlib.invalidate_caches()


def test_action_runs_once_after_the_import(module_dir: Path) -> None:
    write(module_dir, "watched_a")
    seen = []
    on_import.when_imported("watched_a", lambda module: seen.append((module.__name__, module.f())))
    assert seen == [] and on_import.waiting() == ["watched_a"]
    import watched_a

    assert seen == [("watched_a", 1)] and on_import.waiting() == []
    importlib.reload(watched_a)
    assert seen == [("watched_a", 1)]
    assert inspect.getsource(watched_a.f).startswith("def f")  # the module's own loader still answers


def test_an_imported_module_gets_the_action_now(module_dir: Path) -> None:
    write(module_dir, "watched_b")
    import watched_b

    seen = []
    on_import.when_imported("watched_b", seen.append)
    assert seen == [watched_b] and on_import.waiting() == []


def test_cancelled_action_does_not_run(module_dir: Path) -> None:
    write(module_dir, "watched_c")
    seen = []
    on_import.when_imported("watched_c", seen.append)
    on_import.cancel("watched_c")
    import watched_c  # noqa: F401

    assert seen == []


def test_failing_action_never_fails_the_import(module_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(module_dir, "watched_d")

    def fail(module: object) -> None:
        raise RuntimeError("pretend the patch failed")

    on_import.when_imported("watched_d", fail)
    with caplog.at_level(logging.WARNING, logger="mrope.integrations"):
        import watched_d

    assert watched_d.f() == 1
    assert "pretend the patch failed" in caplog.text and "watched_d" in caplog.text


def test_failed_import_keeps_the_action_waiting(module_dir: Path) -> None:
    write(module_dir, "watched_e", "raise ImportError('not yet')\n")
    seen = []
    on_import.when_imported("watched_e", seen.append)
    with pytest.raises(ImportError, match="not yet"):
        import watched_e  # noqa: F401
    write(module_dir, "watched_e")
    sys.modules.pop("watched_e", None)
    import watched_e  # noqa: F401, F811

    assert [m.__name__ for m in seen] == ["watched_e"]
