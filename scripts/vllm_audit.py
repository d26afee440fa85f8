"""The source digests of mrope's vLLM targets in a vLLM wheel or source tree, and the audit of a
release from PyPI (maintainers' tool; ``docs/vllm-audit.md``).

Usage::

    python scripts/vllm_audit.py PATH [--release X]     # the entry's digests, as Python
    python scripts/vllm_audit.py PATH --write           # ... added to audited.json
    python scripts/vllm_audit.py PATH --compare OTHER   # which targets differ between two releases
    python scripts/vllm_audit.py --pypi X.Y.Z [--write] # a release against the audited ones, with diffs

PATH is a wheel (``.whl``, read as a zip: nothing is installed or imported), an sdist (``.tar.gz``)
or a folder holding ``vllm/`` (a source checkout, a site-packages; the ``vllm`` package folder itself
works too). The release defaults to the package's version, local part (``+cpu``) dropped.

``--pypi`` (``make audit-vllm VERSION=X.Y.Z``) downloads the release's sdist (found on PyPI's JSON
simple API, its SHA-256 checked, kept in ``--cache``), then, per model runner (:data:`RUNNERS`,
present or absent by :data:`RUNNER_PRESENCE`) and per model type (:data:`FAMILY_TARGETS`), names the
closest audited release (another release's entry; the release's own, if audited already, is only
checked) and prints a unified diff of each target's source segment that differs from it (that
release's sdist downloaded too); a summary ends the report, and ``--write`` adds the release's
digests to ``audited.json``.

The digests are those of ``mrope.integrations.vllm.audit`` (:data:`TARGETS`, :func:`digests`), and
the downloads those of ``scripts/vllm_sdist.py``, both loaded from their files, so the script runs in
any Python 3.10+ without numpy, vLLM or mrope installed.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import json
import os
import sys
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

AUDIT_FILE = Path(__file__).resolve().parent.parent / "src" / "mrope" / "integrations" / "vllm" / "audit.py"
SDIST_FILE = Path(__file__).resolve().parent / "vllm_sdist.py"
LINE_LENGTH = 110  # the project's (ruff)
DEFAULT_CACHE = Path(".cache") / "vllm-src"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_audit() -> ModuleType:
    """``mrope.integrations.vllm.audit`` from its file (without importing mrope, which needs numpy)."""
    return _load("_mrope_vllm_audit", AUDIT_FILE)


audit = load_audit()
sdists = _load("_mrope_vllm_sdist", SDIST_FILE)


def reader(
    path: str | os.PathLike[str], targets: Iterable[str] | None = None
) -> tuple[Callable[[str], str | None], str]:
    """A module-source reader of a wheel, an sdist or a source folder, and the release it holds (an
    sdist's reader holds the modules of ``targets``, default :data:`TARGETS`)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".whl":
        return _wheel_reader(path)
    if path.is_file() and path.name.endswith(".tar.gz"):
        return sdist_reader(path, targets)
    if path.is_dir():
        root = path if (path / "vllm").is_dir() else path.parent if path.name == "vllm" else None
        if root is not None:
            return audit.tree_reader(root), _tree_version(root)
    raise SystemExit(f"{path}: neither a .whl, a .tar.gz sdist nor a folder holding vllm/")


def path_digests(
    path: str | os.PathLike[str], targets: Iterable[str] | None = None
) -> tuple[str, dict[str, str | None]]:
    """The release a wheel or folder holds and its targets' digests."""
    targets = audit.TARGETS if targets is None else tuple(targets)
    read, release = reader(path, targets)
    return release, audit.digests(read, targets)


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


def write_audited(path: str | os.PathLike[str], release: str, digests: Mapping[str, str | None]) -> None:
    """Add (or replace) ``release``'s entry in an ``audited.json`` (``{release: {target: digest}}``),
    releases sorted as :func:`audit.load_audited` reads them, in the file's format (one-space indent)."""
    path = Path(path)
    data = audit.load_audited(path) if path.is_file() else {}
    data[release] = dict(digests)
    ordered = {name: data[name] for name in sorted(data, key=audit.release_key)}
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(ordered, indent=1), encoding="utf-8")
    os.replace(temporary, path)


# -- the audit of a release from PyPI ---------------------------------------------------------------------
class Unit(NamedTuple):
    """What is accepted or refused as a whole: a model runner or a model type's position code."""

    kind: str  # "runner" or "model type"
    name: str
    targets: tuple[str, ...]


class Finding(NamedTuple):
    """A unit in the audited release: ``present`` in it; ``release`` the closest audited release
    (:func:`audit.closest`); ``differing`` its targets that differ from that release;
    ``there`` the unit is present in that release."""

    unit: Unit
    present: bool
    release: str | None
    differing: list[str]
    there: bool


def units() -> list[Unit]:
    """Every runner (:data:`RUNNERS`), then every model type (:data:`FAMILY_TARGETS`)."""
    return [Unit("runner", name, tuple(targets)) for name, targets in audit.RUNNERS.items()] + [
        Unit("model type", name, tuple(targets)) for name, targets in audit.FAMILY_TARGETS.items()
    ]


def is_present(unit: Unit, digests: Mapping[str, str | None]) -> bool:
    """A runner is there where its presence target is; a model type where any of its targets is."""
    if unit.kind == "runner":
        return digests.get(audit.RUNNER_PRESENCE[unit.name]) is not None
    return any(digests.get(t) is not None for t in unit.targets)


def assess(
    unit: Unit, digests: Mapping[str, str | None], audited: Mapping[str, Mapping[str, str | None]]
) -> Finding:
    """``unit`` in a release of these ``digests`` against the ``audited`` releases."""
    release, differing = audit.closest({t: digests.get(t) for t in unit.targets}, audited)
    there = release is not None and is_present(unit, audited[release])
    return Finding(unit, is_present(unit, digests), release, differing, there)


def segment_diff(
    target: str, old: str | None, new: str | None, old_release: str, new_release: str
) -> list[str]:
    """A unified diff of a target's source segment between two releases (an absent one as empty)."""
    module, _, qualname = target.partition(":")
    where = f"{audit.module_files(module)[0]}:{qualname}"
    return list(
        difflib.unified_diff(
            [] if old is None else [line + "\n" for line in old.splitlines()],
            [] if new is None else [line + "\n" for line in new.splitlines()],
            fromfile=f"{old_release}/{where}" + (" (absent)" if old is None else ""),
            tofile=f"{new_release}/{where}" + (" (absent)" if new is None else ""),
        )
    )


def _status(finding: Finding) -> str:
    total = len(finding.unit.targets)
    if not finding.present:
        if finding.there:
            return f"absent: gone since {finding.release}"
        return "absent" + (f" (as in {finding.release})" if finding.release else "")
    if finding.release is None:
        return "present: no audited release to compare with"
    if not finding.there:
        return f"new: absent in {finding.release}; {len(finding.differing)} of {total} targets differ"
    if not finding.differing:
        return f"same as {finding.release}"
    return f"{len(finding.differing)} of {total} targets differ from {finding.release}"


def audit_release(
    version: str,
    cache: str | os.PathLike[str] = DEFAULT_CACHE,
    index_url: str = sdists.INDEX_URL,
    audited_file: str | os.PathLike[str] = audit.AUDITED_FILE,
    write: bool = False,
) -> int:
    """Report ``version`` against the releases of ``audited_file`` (its own entry excluded, only
    checked): per unit its closest release and a diff of every target that differs (each target and
    release diffed once), then a summary; with ``write``, add its digests to ``audited_file``."""
    sdist, archive = sdists.fetch(cache, version=version, index_url=index_url)
    targets = tuple(audit.TARGETS)
    read, _ = sdist_reader(archive, targets)
    new_segments = audit.segments(read, targets)
    digests = {t: audit.segment_digest(segment) for t, segment in new_segments.items()}
    recorded = audit.load_audited(audited_file) if Path(audited_file).is_file() else {}
    others = {release: entry for release, entry in recorded.items() if release != version}
    findings = [assess(unit, digests, others) for unit in units()]

    print(f"vLLM {version}: {sdist.filename} (sha256 {sdist.sha256}), {len(targets)} targets")
    print(f"audited releases compared: {', '.join(others) or 'none'}\n")
    base_segments: dict[str, dict[str, str | None]] = {}
    notes: list[str] = []
    shown: dict[tuple[str, str], str] = {}
    for finding in findings:
        unit = finding.unit
        print(f"== {unit.kind} {unit.name}: {_status(finding)}")
        if not finding.present or finding.release is None:
            continue
        for target in finding.differing:
            key = (target, finding.release)
            if key in shown:
                print(f"-- {target}: the diff is above, under {shown[key]}")
                continue
            shown[key] = f"{unit.kind} {unit.name}"
            if finding.release not in base_segments:
                base_segments[finding.release] = _release_segments(
                    finding.release, cache, index_url, targets, others[finding.release], notes
                )
            old = base_segments[finding.release][target]
            lines = segment_diff(target, old, new_segments[target], finding.release, version)
            print(f"-- {target}")
            print("".join(lines) if lines else "(the segments are equal: the audited digest differs)\n")
    _summary(version, findings, shown, digests, recorded.get(version), notes)
    if write:
        write_audited(audited_file, version, digests)
        print(f"--write: {version}'s digests added to {audited_file}")
    else:
        print(f"not written (--write adds {version}'s digests to {audited_file})")
    return 0


def _release_segments(
    release: str,
    cache: str | os.PathLike[str],
    index_url: str,
    targets: tuple[str, ...],
    recorded: Mapping[str, str | None],
    notes: list[str],
) -> dict[str, str | None]:
    """An audited release's segments, from its sdist; a note where they are not its recorded digests
    (the diffs against it would mislead there)."""
    _, archive = sdists.fetch(cache, version=release, index_url=index_url)
    read, _ = sdist_reader(archive, targets)
    found = audit.segments(read, targets)
    mismatch = [t for t in targets if t in recorded and audit.segment_digest(found[t]) != recorded[t]]
    if mismatch:
        notes.append(
            f"{release}'s sdist differs from its audited digests in {len(mismatch)} targets: "
            + ", ".join(mismatch)
        )
    return found


def _summary(
    version: str,
    findings: list[Finding],
    shown: Mapping[tuple[str, str], str],
    digests: Mapping[str, str | None],
    own: Mapping[str, str | None] | None,
    notes: list[str],
) -> None:
    print(f"\n== Summary: vLLM {version}")
    width = max(len(f"{f.unit.kind} {f.unit.name}") for f in findings)
    for finding in findings:
        print(f"  {finding.unit.kind + ' ' + finding.unit.name:<{width}}  {_status(finding)}")
    for kind in ("runner", "model type"):
        of_kind = [f for f in findings if f.unit.kind == kind]
        same = sum(f.present and f.there and not f.differing for f in of_kind)
        absent = sum(not f.present for f in of_kind)
        print(f"{kind}s: {same} same, {len(of_kind) - same - absent} changed or new, {absent} absent")
    differing = sorted({target for target, _ in shown})
    print(f"targets that differ ({len(differing)}):")
    for target in differing:
        print(f"  {target}")
    if own is not None:
        changed = [t for t in digests if own.get(t) != digests[t]]
        print(
            f"audited.json's {version} entry: "
            + (f"{len(changed)} targets differ from this sdist: {', '.join(changed)}" if changed else "equal")
        )
    for note in notes:
        print(f"note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "path", nargs="?", help="a vLLM wheel (.whl), sdist (.tar.gz) or a folder holding vllm/"
    )
    parser.add_argument("--release", help="the release to name the entry (default: the package's version)")
    parser.add_argument("--compare", metavar="OTHER", help="a second wheel or folder: list what differs")
    parser.add_argument("--pypi", metavar="VERSION", help="audit this release's sdist from PyPI (no PATH)")
    parser.add_argument("--write", action="store_true", help="add the release's digests to audited.json")
    parser.add_argument("--audited", default=audit.AUDITED_FILE, help="the audited.json to read and write")
    parser.add_argument("--cache", default=DEFAULT_CACHE, help="where downloaded sdists are kept")
    parser.add_argument("--index-url", default=sdists.INDEX_URL, help="PyPI's JSON simple API page of vllm")
    args = parser.parse_args(argv)
    if (args.path is None) == (args.pypi is None):
        parser.error("give PATH or --pypi VERSION")
    if args.pypi is not None:
        return audit_release(args.pypi, args.cache, args.index_url, args.audited, args.write)
    release, digests = path_digests(args.path)
    release = args.release or release
    if args.compare is None:
        if args.write:
            write_audited(args.audited, release, digests)
            print(f"{release}'s digests added to {args.audited}")
        else:
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


def sdist_reader(
    path: str | os.PathLike[str], targets: Iterable[str] | None = None
) -> tuple[Callable[[str], str | None], str]:
    """A module-source reader of an sdist (``.tar.gz``, read in one pass: only the files of ``targets``'
    modules and ``PKG-INFO``), and the release it holds."""
    wanted = {"PKG-INFO"}
    for target in audit.TARGETS if targets is None else targets:
        wanted.update(audit.module_files(target.partition(":")[0]))
    files = sdists.read_members(path, wanted.__contains__)

    def read(module: str) -> str | None:
        for name in audit.module_files(module):
            if name in files:
                return audit.decode_source(files[name])
        return None

    version = "unknown"
    for line in files.get("PKG-INFO", b"").decode("utf-8", "replace").splitlines():
        if line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()
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
