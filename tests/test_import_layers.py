"""The package's modules import downward only: no import cycle, and each package imports only the
packages below it in the layer order of docs/architecture.md, counting the imports made inside
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


# Bottom to top: a unit may import only the units before it in its list. A unit is a module at
# the top of its package or a subpackage (with everything inside it). docs/architecture.md has
# the same order with what each unit is for.
LAYERS = {
    "jaxtrain": [
        "errors",
        "_moved",
        "trace_context",
        "hardware",
        "rundir",
        "parallel",
        "models",
        "configs",
        "config",
        "data",
        "interop",
        "train",
        "compat",
        "run",
        "checkpoint",
        "planning",
        "evaluation",
        "trainer",
        "notebook",
        "commands",
        "cli",
        "__main__",
    ],
    "jaxtrain.models": [
        "spec",
        "layers",
        "mixers",
        "feedforward",
        "assembly",
        "presets",
        "generation",
    ],
}


# The stacks of compat/ are side by side: each imports only the shared pieces (and prime-rl the
# Hugging Face adapter, for the models it names by hub id); only the dispatcher sees them all.
COMPAT_MAY_IMPORT = {
    "common": set(),
    "huggingface": {"common"},
    "megatron": {"common"},
    "maxtext": {"common"},
    "torchtitan": {"common"},
    "primus": {"common"},
    "prime_rl": {"common", "huggingface"},
    "dispatch": {
        "common",
        "huggingface",
        "megatron",
        "maxtext",
        "torchtitan",
        "primus",
        "prime_rl",
    },
}


def _unit(module: str, package: str) -> str | None:
    """The unit of `package` that holds `module`, or None when it lies outside the package."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1 :].split(".")[0]


def test_each_package_imports_only_the_layers_below_it():
    files = module_files()
    known = set(files)
    wrong = []
    for package, order in LAYERS.items():
        units = {_unit(name, package) for name in files if _unit(name, package) is not None}
        # Every unit has its place, so a new package or module cannot escape the check.
        assert units == set(order), (package, sorted(units ^ set(order)))
        for name, path in files.items():
            unit = _unit(name, package)
            if unit is None:
                continue
            for imported in imports_of(path, name, known):
                target = _unit(imported, package)
                if (
                    target is not None
                    and target != unit
                    and order.index(target) > order.index(unit)
                ):
                    wrong.append(f"{name} imports {imported} ({package}: {unit} < {target})")
    assert not wrong, "imports that run back up the layers:\n" + "\n".join(sorted(wrong))


def test_the_stacks_of_compat_import_only_the_shared_pieces():
    files = module_files()
    known = set(files)
    units = {_unit(name, "jaxtrain.compat") for name in files} - {None}
    assert units == set(COMPAT_MAY_IMPORT), sorted(units ^ set(COMPAT_MAY_IMPORT))
    wrong = []
    for name, path in files.items():
        unit = _unit(name, "jaxtrain.compat")
        if unit is None:
            continue
        for imported in imports_of(path, name, known):
            target = _unit(imported, "jaxtrain.compat")
            if target not in (None, unit) and target not in COMPAT_MAY_IMPORT[unit]:
                wrong.append(f"{name} imports {imported}")
    assert not wrong, "compat/ stacks importing each other:\n" + "\n".join(sorted(wrong))


def test_the_package_root_imports_only_what_it_offers():
    files = module_files()
    imported = imports_of(files["jaxtrain"], "jaxtrain", set(files))
    assert imported == {"jaxtrain._moved"}, imported  # the public API is imported on first use
