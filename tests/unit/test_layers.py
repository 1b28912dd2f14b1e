"""The package's architecture, enforced: layers import only downwards, and nothing circles.

Layers, lowest first: ``core`` (what chapters share) < ``papers`` (one package per paper,
importing only ``core``) < ``chapters`` (the registry) < ``claims`` (what decides verdicts:
it reads records) < ``run``, ``labs``, ``goldens``, ``kernels``, ``book``, ``bench`` (what
runs, grades and builds) < ``cli``. Every import counts, also one deferred inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "minirepro"
ROOT_MODULES = {"__init__", "__main__", "cli", "chapters", "book", "bench", "kernels", "goldens"}
PACKAGES = {"core", "papers", "claims", "run", "labs"}
LAYER = {"core": 0, "papers": 1, "chapters": 2, "claims": 3, "run": 4, "labs": 5, "goldens": 5,
         "kernels": 4, "book": 5, "bench": 5, "cli": 6, "__init__": 0, "__main__": 7}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every ``minirepro...`` module ``path`` imports (top-level or deferred)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("minirepro")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("minirepro"):
                out.add(base)
                out |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in out if _exists(m)}


def _exists(mod: str) -> bool:
    p = SRC.parent.joinpath(*mod.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _part(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in SRC.rglob("*.py")}


def test_the_package_root_holds_only_the_named_modules_and_packages():
    modules = {p.stem for p in SRC.glob("*.py")}
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert modules <= ROOT_MODULES, f"unexpected modules at the root: {sorted(modules - ROOT_MODULES)}"
    assert packages == PACKAGES, f"packages at the root: {sorted(packages)}"


def test_no_layer_imports_a_higher_one():
    bad = []
    for mod, deps in _graph().items():
        here = _part(mod)
        for dep in deps:
            there = _part(dep)
            if LAYER[there] > LAYER[here]:
                bad.append(f"{mod} -> {dep}")
    assert not bad, "imports that climb a layer:\n" + "\n".join(sorted(bad))


def test_core_imports_only_core_and_papers_only_core_and_themselves():
    bad = []
    for mod, deps in _graph().items():
        parts = mod.split(".")
        if len(parts) > 1 and parts[1] == "core":
            bad += [f"{mod} -> {d}" for d in deps if not d.startswith("minirepro.core")]
        if len(parts) > 2 and parts[1] == "papers":
            own = ".".join(parts[:3])
            bad += [f"{mod} -> {d}" for d in deps
                    if not (d.startswith("minirepro.core") or d == own or d.startswith(own + ".")
                            or d == "minirepro.papers")]
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycles_between_modules():
    graph = {m: {d for d in deps if d in _graph_keys()} for m, deps in _graph().items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if d == m or _is_parent(d, m):
                continue  # a module importing its own package's __init__ is not a cycle of modules
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d] if d in stack else [m, d])
            elif not state.get(d):
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m, [m])
    real = [c for c in cycles if not all(_is_parent(a, b) or _is_parent(b, a) for a, b in zip(c, c[1:]))]
    assert not real, "import cycles:\n" + "\n".join(" -> ".join(c) for c in real)


def _graph_keys() -> set[str]:
    return {_module(p) for p in SRC.rglob("*.py")}


def _is_parent(a: str, b: str) -> bool:
    return b.startswith(a + ".")
