"""The package surface: a small public API, ``import mrope`` without torch or triton, one error class,
and a wheel that ships the library alone (the peers and the benchmarks stay in the repository)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

import mrope

ROOT = Path(__file__).resolve().parents[1]


def test_public_names():
    assert sorted(mrope.__all__) == [
        "Compat",
        "Family",
        "MRopeError",
        "MRotaryEmbedding",
        "MultimodalInputs",
        "PositionTable",
        "RequestInputs",
        "from_config",
        "get_rope_index",
        "show",
        "supported_model_types",
    ]
    for name in mrope.__all__:
        if name == "MRotaryEmbedding" and importlib.util.find_spec("torch") is None:
            continue  # the one name that needs torch, loaded on first use
        assert getattr(mrope, name) is not None, name


def test_error_is_a_value_error():
    assert issubclass(mrope.MRopeError, ValueError)


def test_import_needs_only_numpy():
    code = (
        "import sys, mrope; "
        "heavy = sorted(m for m in ('torch', 'triton', 'transformers') if m in sys.modules); "
        "assert not heavy, heavy"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_unknown_attribute_is_an_attribute_error():
    try:
        mrope.not_a_name  # noqa: B018
    except AttributeError as err:
        assert "not_a_name" in str(err)
    else:
        raise AssertionError("mrope.not_a_name did not raise")


def test_no_test_or_benchmark_module_is_importable_from_the_package():
    for name in ("mrope.peers", "mrope.bench", "mrope.benchmarks"):
        assert importlib.util.find_spec(name) is None, f"{name} is part of the installed package"


def test_tests_and_benchmarks_share_one_support_package_without_path_edits():
    """The tests' helpers live in ``tests/support`` alone, found through the one ``pythonpath`` entry (and
    the environments' ``.pth``): no test, helper or benchmark edits ``sys.path``."""
    edits = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if edits.search(line)
    ]
    assert not found, f"sys.path edited at {', '.join(found)}"
    helpers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("_*.py")
        if path.name != "__init__.py" and "_env" not in path.parent.name
    ]
    assert not helpers, f"test helpers outside tests/support: {', '.join(helpers)}"


def _require_build_backend() -> None:
    """Skip (fail under CI) where setuptools >= 77, the build backend, is not installed."""
    try:
        major = int(version("setuptools").split(".")[0])
    except PackageNotFoundError:
        major = 0
    if major < 77:
        message = "building the wheel needs setuptools>=77 (make test installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_wheel_ships_only_the_library(tmp_path):
    """Built from a copy of the sources: only ``mrope/`` modules, none of them the peers or a benchmark,
    and any console script runs a module of the wheel (a command needs only what the wheel installs)."""
    _require_build_backend()
    source = tmp_path / "source"
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(source)], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("mrope-*.whl")
    archive = zipfile.ZipFile(wheel)
    modules = [n for n in archive.namelist() if n.endswith(".py")]
    assert modules and all(n.startswith("mrope/") for n in modules), modules
    shipped = [n for n in modules if re.search(r"(^|/)(peers|bench|benchmarks|_timing|_common)(/|\.py$)", n)]
    assert not shipped, f"test or benchmark modules in the wheel: {shipped}"
    # the package's data: the vLLM integration's audited digests (read at enable), the type marker
    for data in ("mrope/integrations/vllm/audited.json", "mrope/py.typed"):
        assert data in archive.namelist(), data
    audited = json.loads(archive.read("mrope/integrations/vllm/audited.json"))
    assert {"0.32.0", "0.33.0", "0.34.0"} <= set(audited)
    entry_points = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
    text = archive.read(entry_points[0]).decode() if entry_points else ""
    section = re.search(r"\[console_scripts\]\n(.*?)(\n\[|\Z)", text, re.S)
    for line in section.group(1).splitlines() if section else []:
        if "=" in line:
            target = line.split("=", 1)[1].strip().split(":")[0]
            assert f"{target.replace('.', '/')}.py" in modules, (
                f"command {line!r} runs a module outside the wheel"
            )
    # the engines find the integrations by these entry points (make dist loads vLLM's through vLLM)
    for group, target in (
        ("vllm.general_plugins", "mrope.integrations.vllm:register"),
        ("sglang.srt.plugins", "mrope.integrations.sglang:register"),
    ):
        assert re.search(rf"\[{re.escape(group)}\]\nmrope = {re.escape(target)}\n", text), (group, text)
        package = target.split(":")[0].replace(".", "/")
        assert f"{package}.py" in modules or f"{package}/__init__.py" in modules, target
