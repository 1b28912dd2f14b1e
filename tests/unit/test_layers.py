"""The package's architecture, enforced: layers import only downwards, and nothing circles.

Layers, lowest first: ``core`` (what chapters share) < ``papers`` (one package per paper,
importing only ``core``) < ``chapters`` (the registry) < ``claims`` (what decides verdicts:
it reads records) < ``run``, ``labs``, ``goldens``, ``kernels``, ``book``, ``bench`` (what
runs, grades and builds) < ``cli``. Every import counts, also one deferred inside a function.

A process a module starts counts as an import of what it runs: a subprocess (``subprocess.*``,
``os.system``, ``os.exec*``, ...) running ``-m minirepro.x`` imports ``minirepro.x``, and one
running the ``minirepro`` command or ``-m minirepro`` imports the CLI. The command is read
from the call's literal words, splicing lists and strings bound to a name in the module.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "minirepro"
ROOT_MODULES = {"__init__", "__main__", "cli", "chapters", "book", "bench", "kernels", "goldens"}
PACKAGES = {"core", "papers", "claims", "run", "labs"}
LAYER = {"core": 0, "papers": 1, "chapters": 2, "claims": 3, "run": 4, "labs": 5, "goldens": 5,
         "kernels": 4, "book": 5, "bench": 5, "cli": 6, "__init__": 0, "__main__": 7}
# functions that start a process, by module: their first argument (or args=) is the command
SPAWNERS = {"subprocess": {"run", "call", "check_call", "check_output", "Popen"},
            "os": {"system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                   "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp",
                   "spawnlpe", "posix_spawn", "posix_spawnp"}}


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
    return {m for m in out | _spawned(tree) if _exists(m)}


def _spawned(tree: ast.AST) -> set[str]:
    """The ``minirepro`` modules the processes started in ``tree`` run (see the module docstring)."""
    bound = {t.id: n.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _starts_a_process(node.func):
            cmd = node.args[1:] if _is_os_exec(node.func) else node.args[:1]  # os.exec*/spawn*: path, then argv
            cmd += [k.value for k in node.keywords if k.arg == "args"]
            out |= _runs([w for c in cmd for w in _words(c, bound)])
    return out


def _starts_a_process(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr in SPAWNERS.get(func.value.id, set())
    return isinstance(func, ast.Name) and func.id in SPAWNERS["subprocess"] - {"run", "call"}


def _is_os_exec(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "os"
            and func.attr not in {"system", "popen"})


def _words(node: ast.expr, bound: dict[str, ast.expr], depth: int = 0) -> list[str]:
    """A command's words as far as the source says them; ``"?"`` for a word it does not."""
    if depth > 8:
        return ["?"]
    if isinstance(node, ast.Name) and node.id in bound:
        return _words(bound[node.id], bound, depth + 1)
    if isinstance(node, ast.Starred):
        return _words(node.value, bound, depth + 1)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split()
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else " ? " for v in node.values).split()
    if isinstance(node, (ast.List, ast.Tuple)):
        return [w for e in node.elts for w in _words(e, bound, depth + 1)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _words(node.left, bound, depth + 1) + _words(node.right, bound, depth + 1)
    return ["?"]


def _runs(words: list[str]) -> set[str]:
    """``-m minirepro.x`` runs ``minirepro.x``; ``-m minirepro`` and the ``minirepro`` command (the
    program: the first word, or the first after a shell's ``&&``, ``||``, ``;`` or ``|``) the CLI."""
    out = set()
    for i, w in enumerate(words):
        before = words[i - 1] if i else ";"
        if before == "-m" and w.split(".")[0] == "minirepro":
            out.add("minirepro.cli" if w == "minirepro" else w)
        elif before in {"&&", "||", ";", "|"} and Path(w).name == "minirepro":
            out.add("minirepro.cli")
    return out


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


@pytest.mark.parametrize("source, runs", [
    ('subprocess.run(["minirepro", "artifacts", "build", name])', {"minirepro.cli"}),
    ('subprocess.check_call([sys.executable, "-m", "minirepro", "list"])', {"minirepro.cli"}),
    ('cli = [sys.executable, "-m", "minirepro.cli", "artifacts", "build"]\n'
     'jobs = {n: subprocess.Popen([*cli, n], env=env) for n in names}', {"minirepro.cli"}),
    ('os.system(f"cd {root} && minirepro run {name}")', {"minirepro.cli"}),
    ('os.execv(sys.executable, [sys.executable, "-m", "minirepro.run.papermill_main"])',
     {"minirepro.run.papermill_main"}),
    ('Popen([sys.executable, "-m", "minirepro.core.lm.gpu_build", out, "--build", name])',
     {"minirepro.core.lm.gpu_build"}),
    ('subprocess.run(["git", "rev-parse", "HEAD"]); print("minirepro")', set()),
    ('subprocess.Popen([sys.executable, "-m", "papermill", "--engine", "minirepro"])', set()),
])
def test_a_process_that_runs_minirepro_counts_as_an_import(source, runs):
    assert _spawned(ast.parse(textwrap.dedent(source))) == runs
