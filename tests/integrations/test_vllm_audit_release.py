"""``make audit-vllm VERSION=x.y.z`` (``scripts/vllm_audit.py --pypi``) and its downloads
(``scripts/vllm_sdist.py``), without the network: fake releases as small sdists served by ``file://``
URLs from a fake JSON simple API page, audited against a fake ``audited.json``."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

STATE_1 = """\
class State:
    def step(self):
        return 1


def kept():
    return 0
"""
FILES_1 = {
    "vllm/__init__.py": "",
    "vllm/runner_a.py": STATE_1,
    "vllm/old_runner.py": "def admit():\n    return 'old'\n",
    "vllm/models/fam.py": "class Fam:\n    def positions(self):\n        return 'rule'\n",
    "vllm/models/gone.py": "def gone_rule():\n    return 'gone'\n",
    "csrc/cpu/op.cpp": "// a C++ file\n",
}
# 1.1.0: runner a's step changed, the old runner and one model type gone, a new runner, fam unchanged
FILES_2 = {
    "vllm/__init__.py": "",
    "vllm/runner_a.py": STATE_1.replace("return 1", "return 2"),
    "vllm/new_runner.py": "class NewState:\n    def step(self):\n        return 'new'\n",
    "vllm/models/fam.py": FILES_1["vllm/models/fam.py"],
    "csrc/cpu/op.cpp": "// a C++ file\n",
}

RUNNERS = {
    "a": ("vllm.runner_a:State.step", "vllm.runner_a:kept"),
    "old": ("vllm.old_runner:admit",),
    "new": ("vllm.new_runner:NewState", "vllm.runner_a:kept"),
}
PRESENCE = {
    "a": "vllm.runner_a:State.step",
    "old": "vllm.old_runner:admit",
    "new": "vllm.new_runner:NewState",
}
FAMILIES = {"fam": ("vllm.models.fam:Fam.positions",), "gone": ("vllm.models.gone:gone_rule",)}
TARGETS = tuple(
    dict.fromkeys([*(t for ts in RUNNERS.values() for t in ts), *(t for ts in FAMILIES.values() for t in ts)])
)


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``scripts/vllm_audit.py`` with the fake releases' runners, model types and targets."""
    module = _load("_vllm_audit_release_script", ROOT / "scripts" / "vllm_audit.py")
    monkeypatch.setattr(module.audit, "RUNNERS", RUNNERS)
    monkeypatch.setattr(module.audit, "RUNNER_PRESENCE", PRESENCE)
    monkeypatch.setattr(module.audit, "FAMILY_TARGETS", FAMILIES)
    monkeypatch.setattr(module.audit, "TARGETS", TARGETS)
    return module


def _sdist(path: Path, version: str, files: Mapping[str, str]) -> Path:
    """A ``.tar.gz`` laid out as PyPI's sdists are: everything under ``vllm-<version>/``."""
    with tarfile.open(path, "w:gz") as tar:
        members = {"PKG-INFO": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n", **files}
        for name, text in members.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Index:
    """A JSON simple API page (``file://``) listing sdists, and the folder the sdists are served from."""

    def __init__(self, root: Path) -> None:
        self.served = root / "served"
        self.served.mkdir(parents=True)
        self.page = root / "simple-vllm.json"
        self.files: list[dict] = []

    def add(self, version: str, files: Mapping[str, str], sha256: str | None = None, **extra: object) -> Path:
        path = _sdist(self.served / f"vllm-{version}.tar.gz", version, files)
        entry = {"filename": path.name, "url": path.as_uri(), "hashes": {"sha256": sha256 or _sha(path)}}
        self.files.append({**entry, **extra})
        self.page.write_text(json.dumps({"meta": {"api-version": "1.1"}, "files": self.files}))
        return path

    @property
    def url(self) -> str:
        return self.page.as_uri()


@pytest.fixture
def index(tmp_path: Path) -> Index:
    """Releases 1.0.0 and 1.1.0 (0.9.0, audited too, is not served: the audit must not need it)."""
    served = Index(tmp_path / "index")
    served.add("1.0.0", FILES_1)
    served.add("1.1.0", FILES_2)
    return served


def _tree_digests(script: ModuleType, root: Path, files: Mapping[str, str]) -> dict[str, str | None]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return script.audit.digests(script.audit.tree_reader(root), TARGETS)


@pytest.fixture
def audited(tmp_path: Path, script: ModuleType) -> Path:
    """An ``audited.json`` with 0.9.0 (an older release, farther from 1.1.0) and 1.0.0."""
    release_1 = _tree_digests(script, tmp_path / "tree-1.0.0", FILES_1)
    older = {target: "0" * 64 for target in TARGETS}
    path = tmp_path / "audited.json"
    path.write_text(json.dumps({"1.0.0": release_1, "0.9.0": older}, indent=1))
    return path


def _run(script: ModuleType, index: Index, cache: Path, audited: Path, *extra: str) -> int:
    argv = ["--pypi", "1.1.0", "--cache", str(cache), "--index-url", index.url, "--audited", str(audited)]
    return script.main([*argv, *extra])


def test_report_names_each_units_closest_release_and_diffs_what_differs(
    script: ModuleType, index: Index, audited: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    before = audited.read_bytes()
    assert _run(script, index, tmp_path / "cache", audited) == 0
    out = capsys.readouterr().out
    assert "audited releases compared: 0.9.0, 1.0.0" in out
    assert "== runner a: 1 of 2 targets differ from 1.0.0" in out
    diff = re.search(
        r"--- 1\.0\.0/vllm/runner_a\.py:State\.step\n\+\+\+ 1\.1\.0/vllm/runner_a\.py:State\.step\n", out
    )
    assert diff is not None
    assert "-        return 1\n+        return 2\n" in out
    assert "== runner old: absent: gone since 1.0.0" in out
    assert "== runner new: new: absent in 1.0.0; 1 of 2 targets differ" in out
    assert "--- 1.0.0/vllm/new_runner.py:NewState (absent)\n+++ 1.1.0/vllm/new_runner.py:NewState\n" in out
    assert "+class NewState:\n" in out
    assert "== model type fam: same as 1.0.0" in out
    assert "== model type gone: absent: gone since 1.0.0" in out
    # the unchanged target shared by two runners is diffed nowhere; each changed one once
    assert "vllm.runner_a:kept" not in out.split("== Summary")[0].replace("== runner", "")
    summary = out.split("== Summary: vLLM 1.1.0\n")[1]
    assert re.search(r"runner a +1 of 2 targets differ from 1\.0\.0", summary)
    assert "runners: 0 same, 2 changed or new, 1 absent" in summary
    assert "model types: 1 same, 0 changed or new, 1 absent" in summary
    assert "targets that differ (2):\n  vllm.new_runner:NewState\n  vllm.runner_a:State.step\n" in summary
    assert "note:" not in summary
    assert "not written" in summary
    assert audited.read_bytes() == before


def test_write_adds_the_release_in_order_and_format(
    script: ModuleType, index: Index, audited: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert _run(script, index, tmp_path / "cache", audited, "--write") == 0
    data = json.loads(audited.read_text())
    assert list(data) == ["0.9.0", "1.0.0", "1.1.0"]
    assert data["1.1.0"] == _tree_digests(script, tmp_path / "tree-1.1.0", FILES_2)
    assert audited.read_text() == json.dumps(data, indent=1)
    capsys.readouterr()
    # audited now: its own entry is checked, and it is still compared with the others only
    assert _run(script, index, tmp_path / "cache", audited) == 0
    out = capsys.readouterr().out
    assert "audited releases compared: 0.9.0, 1.0.0\n" in out
    assert "== runner a: 1 of 2 targets differ from 1.0.0" in out
    assert "audited.json's 1.1.0 entry: equal" in out


def test_release_order_is_numeric(script: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "audited.json"
    for release in ("1.10.0", "1.9.0", "1.9.1", "0.10.0"):
        script.write_audited(path, release, {"m:a": None})
    assert list(json.loads(path.read_text())) == ["0.10.0", "1.9.0", "1.9.1", "1.10.0"]


def test_write_keeps_the_projects_audited_json_byte_for_byte(tmp_path: Path) -> None:
    module = _load("_vllm_audit_release_script_real", ROOT / "scripts" / "vllm_audit.py")
    real = Path(module.audit.AUDITED_FILE)
    copy = tmp_path / "audited.json"
    copy.write_bytes(real.read_bytes())
    newest = list(module.audit.AUDITED)[-1]
    module.write_audited(copy, newest, module.audit.AUDITED[newest])
    assert copy.read_bytes() == real.read_bytes()


def test_a_base_sdist_that_is_not_its_audited_digests_is_noted(
    script: ModuleType, index: Index, audited: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = json.loads(audited.read_text())
    data["1.0.0"]["vllm.runner_a:kept"] = "f" * 64  # the record says kept() differs from 1.0.0's sdist
    audited.write_text(json.dumps(data, indent=1))
    _run(script, index, tmp_path / "cache", audited)
    out = capsys.readouterr().out
    assert "note: 1.0.0's sdist differs from its audited digests in 1 targets: vllm.runner_a:kept" in out
    # the diff of a target whose segments are equal says so instead of printing nothing
    assert "(the segments are equal: the audited digest differs)" in out


def test_downloads_are_hash_checked_and_cached(
    script: ModuleType, index: Index, audited: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cache = tmp_path / "cache"
    _run(script, index, cache, audited)
    assert sorted(p.name for p in cache.iterdir()) == ["vllm-1.0.0.tar.gz", "vllm-1.1.0.tar.gz"]
    first = capsys.readouterr().out
    for served in index.served.iterdir():  # nothing left to download: the cache serves
        served.unlink()
    _run(script, index, cache, audited)
    assert capsys.readouterr().out == first
    # a cached file that no longer has the listed hash is downloaded again, and refused when the
    # download does not have it either
    (cache / "vllm-1.1.0.tar.gz").write_bytes(b"altered")
    with pytest.raises(SystemExit, match="cannot download"):
        _run(script, index, cache, audited)


def test_a_download_with_the_wrong_hash_is_refused(script: ModuleType, tmp_path: Path) -> None:
    index = Index(tmp_path / "index")
    index.add("1.1.0", FILES_2, sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(SystemExit, match="sha256"):
        script.sdists.fetch(cache, version="1.1.0", index_url=index.url)
    assert list(cache.iterdir()) == []
    with pytest.raises(SystemExit, match="not listed"):
        script.sdists.fetch(cache, version="2.0.0", index_url=index.url)


def test_the_path_mode_reads_an_sdist_as_a_tree(script: ModuleType, tmp_path: Path) -> None:
    sdist = _sdist(tmp_path / "vllm-1.1.0.tar.gz", "1.1.0", FILES_2)
    assert script.path_digests(sdist, TARGETS) == ("1.1.0", _tree_digests(script, tmp_path / "tree", FILES_2))


def test_extract_keeps_only_the_prefixes_and_writes_the_stamp_last(tmp_path: Path) -> None:
    sdists = _load("_vllm_sdist_script", ROOT / "scripts" / "vllm_sdist.py")
    archive = _sdist(tmp_path / "vllm-1.1.0.tar.gz", "1.1.0", {**FILES_2, "tests/test_x.py": "x = 1\n"})
    dest = tmp_path / "dest"
    (dest / "stale").mkdir(parents=True)  # replaced whole
    sdists.extract(archive, dest, ["vllm/", "csrc/cpu/"], stamp="URL sha256=abc", local_version="cpu")
    found = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    expected = sorted([*FILES_2, ".sdist", "vllm-1.1.0+cpu.dist-info/METADATA"])
    assert found == expected
    assert (dest / ".sdist").read_text() == "URL sha256=abc\n"
    assert "Version: 1.1.0+cpu" in (dest / "vllm-1.1.0+cpu.dist-info" / "METADATA").read_text()
    assert (dest / "vllm" / "runner_a.py").read_text() == FILES_2["vllm/runner_a.py"]


def test_extract_refuses_paths_out_of_the_destination(tmp_path: Path) -> None:
    sdists = _load("_vllm_sdist_script", ROOT / "scripts" / "vllm_sdist.py")
    archive = _sdist(tmp_path / "bad.tar.gz", "1.1.0", {"vllm/../../escape.py": "x = 1\n"})
    with pytest.raises(SystemExit, match="unsafe"):
        sdists.extract(archive, tmp_path / "dest", ["vllm/"])
    assert not (tmp_path / "dest").exists() and not (tmp_path / "escape.py").exists()
    with pytest.raises(SystemExit, match="nothing under"):
        sdists.extract(_sdist(tmp_path / "empty.tar.gz", "1.1.0", {}), tmp_path / "dest", ["vllm/"])
