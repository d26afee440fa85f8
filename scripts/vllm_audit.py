"""The source digests of mrope's vLLM targets in a vLLM wheel or source tree (maintainers' tool).

Usage::

    python scripts/vllm_audit.py PATH [--release X]     # the entry to paste into AUDITED
    python scripts/vllm_audit.py PATH --compare OTHER   # which targets differ between two releases

PATH is a wheel (``.whl``, read as a zip: nothing is installed or imported) or a folder holding
``vllm/`` (a source checkout, a site-packages; the ``vllm`` package folder itself works too). The
release defaults to the wheel's or the tree's version, local part (``+cpu``) dropped. The digests are
those of ``mrope.integrations.vllm.audit`` (:data:`TARGETS`, :func:`digests`), loaded from its file,
so the script runs in any Python 3.10+ without numpy, vLLM or mrope installed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType

AUDIT_FILE = Path(__file__).resolve().parent.parent / "src" / "mrope" / "integrations" / "vllm" / "audit.py"
LINE_LENGTH = 110  # the project's (ruff)


def load_audit() -> ModuleType:
    """``mrope.integrations.vllm.audit`` from its file (without importing mrope, which needs numpy)."""
    spec = importlib.util.spec_from_file_location("_mrope_vllm_audit", AUDIT_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


audit = load_audit()


def reader(path: str | os.PathLike[str]) -> tuple[Callable[[str], str | None], str]:
    """A module-source reader of a wheel or a source folder, and the release it holds."""
    path = Path(path)
    if path.is_file() and path.suffix == ".whl":
        return _wheel_reader(path)
    if path.is_dir():
        root = path if (path / "vllm").is_dir() else path.parent if path.name == "vllm" else None
        if root is not None:
            return audit.tree_reader(root), _tree_version(root)
    raise SystemExit(f"{path}: neither a .whl nor a folder holding vllm/")


def path_digests(
    path: str | os.PathLike[str], targets: Iterable[str] | None = None
) -> tuple[str, dict[str, str | None]]:
    """The release a wheel or folder holds and its targets' digests."""
    read, release = reader(path)
    return release, audit.digests(read, audit.TARGETS if targets is None else targets)


def render(release: str, digests: dict[str, str | None]) -> str:
    """``digests`` as an entry of ``AUDITED`` (indented as there, ruff-formatted)."""
    lines = [f"    {release!r}: {{".replace("'", '"')]
    for target, digest in digests.items():
        key, value = _literal(target), "None" if digest is None else _literal(digest)
        line = f"        {key}: {value},"
        if len(line) <= LINE_LENGTH:
            lines.append(line)
        else:  # ruff keeps the parentheses; a key too long even so is let be
            head = f"        {key}: ("
            lines += [head if len(head) <= LINE_LENGTH else f"{head}  # noqa: E501"]
            lines += [f"            {value}", "        ),"]
    lines.append("    },")
    return "\n".join(lines)


def compare(first: dict[str, str | None], second: dict[str, str | None]) -> list[tuple[str, str]]:
    """(target, verdict) for every target of either: ``same``, ``same (absent in both)``, ``differs``,
    ``absent in first``, ``absent in second``."""
    rows = []
    for target in dict.fromkeys([*first, *second]):
        a, b = first.get(target), second.get(target)
        if a is None and b is None:
            rows.append((target, "same (absent in both)"))
        elif a is None or b is None:
            rows.append((target, f"absent in {'first' if a is None else 'second'}"))
        else:
            rows.append((target, "same" if a == b else "differs"))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a vLLM wheel (.whl) or a folder holding vllm/")
    parser.add_argument("--release", help="the release to name the entry (default: the package's version)")
    parser.add_argument("--compare", metavar="OTHER", help="a second wheel or folder: list what differs")
    args = parser.parse_args(argv)
    release, digests = path_digests(args.path)
    release = args.release or release
    if args.compare is None:
        print(render(release, digests))
        return 0
    other_release, other = path_digests(args.compare)
    rows = compare(digests, other)
    width = max(len(t) for t, _ in rows)
    print(f"{'target':<{width}}  {release} -> {other_release}")
    for target, verdict in rows:
        print(f"{target:<{width}}  {verdict}")
    same = sum(v.startswith("same") for _, v in rows)
    print(f"{same} of {len(rows)} targets byte-identical")
    return 0


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _wheel_reader(path: Path) -> tuple[Callable[[str], str | None], str]:
    archive = zipfile.ZipFile(path)
    names = set(archive.namelist())

    def read(module: str) -> str | None:
        for name in audit.module_files(module):
            if name in names:
                return audit.decode_source(archive.read(name))
        return None

    version = path.name.split("-")[1] if path.name.count("-") >= 2 else "unknown"
    for name in names:
        if name.endswith(".dist-info/METADATA"):
            for line in archive.read(name).decode("utf-8", "replace").splitlines():
                if line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                    break
            break
    return read, version.split("+")[0]


def _tree_version(root: Path) -> str:
    """The version in ``vllm/_version.py`` (a wheel's, a built tree's), else a ``vllm*.dist-info``."""
    version_file = root / "vllm" / "_version.py"
    if version_file.is_file():
        for node in ast.parse(version_file.read_text("utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if names & {"__version__", "version"} and isinstance(node.value.value, str):
                    return node.value.value.split("+")[0]
    for info in sorted(root.glob("vllm*.dist-info/METADATA")):
        for line in info.read_text("utf-8", "replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip().split("+")[0]
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
