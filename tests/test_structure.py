"""The package's structure: no module imports another module's private (``_name``) names, and no import
cycle runs through any module, counting imports inside functions (lazy ones) too."""

from __future__ import annotations

import ast
from pathlib import Path

import mrope

PACKAGE = Path(mrope.__file__).parent
OWN = ("mrope",)  # every module of the package


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """``(module, imported name)`` of every ``from ... import`` in the file (any depth), resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = node.module or ""
            module = (f"{base}.{source}" if source else base) if node.level else source
            for alias in node.names:
                found.append((module, alias.name))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
    return [(m, n) for m, n in found if m in modules or f"{m}.{n}" in modules]


def test_no_private_names_imported() -> None:
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith(OWN):
            continue
        for module, imported in _imports(name, path, modules):
            if imported.startswith("_") and f"{module}.{imported}" not in modules:
                bad.append(f"{name}: from {module} import {imported}")
    assert not bad, bad


def test_no_import_cycle() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for module, imported in _imports(name, path, modules):
            target = f"{module}.{imported}" if f"{module}.{imported}" in modules else module
            if target != name:
                edges.add(target)
        graph[name] = edges

    def reaches(start: str, goal: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == goal:
                    return [*trail, nxt]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
        return None

    cycles = [reaches(name, name) for name in graph if name.startswith(OWN)]
    assert not any(cycles), [c for c in cycles if c]
