"""The package's modules import downward only: no import cycle, counting the imports made inside
functions too (so none can hide one)."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "jaxtrain"


def module_files() -> dict[str, Path]:
    """{dotted module name: file} of jaxtrain and of its configs (installed as jaxtrain.configs)."""
    files = {}
    for root, prefix in ((PACKAGE, "jaxtrain"), (REPO / "configs", "jaxtrain.configs")):
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([prefix, *parts])] = path
    return files


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The jaxtrain modules a file imports anywhere in it."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([node.module] if node.module else [])
                )
            # `from pkg import sub` imports the submodule `pkg.sub`; other names live in `pkg`.
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def test_no_import_cycle():
    files = module_files()
    graph = {name: imports_of(path, name, set(files)) for name, path in files.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_bottom_layers_import_nothing_above_them():
    files = module_files()
    known = set(files)
    assert imports_of(files["jaxtrain.errors"], "jaxtrain.errors", known) == set()
    config_imports = imports_of(files["jaxtrain.config.loader"], "jaxtrain.config.loader", known)
    assert config_imports <= {
        "jaxtrain.errors",
        "jaxtrain.config.ranges",
        "jaxtrain.configs",
        "jaxtrain.models.spec.hyperparameters",
    }, config_imports
