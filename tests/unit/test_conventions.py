"""The conventions every paper package follows (README, "Adding a chapter"), enforced.

- Paper anchors: each package names its ``METHOD_MODULES`` (the modules that implement
  the paper's steps: the method, its ablations, the baselines it defines). Every public
  function and class there says on its docstring's first line which equation, algorithm
  or section it implements, or that it is a reconstruction. An equation anchor names an
  equation the chapter's page labels, and the page cites every labelled equation.
- Parameters are the config: every notebook parameter except ``scale`` and the seeds is
  a field of the package's ``Config`` (built by ``Config.from_params(globals())``) or
  one of its ``VIEW_PARAMETERS`` (which choose what the page shows, not what is run).
- One naming scheme: ``Config``, ``run_experiment``, figures ``plots.plot_*``.
- Bad input is refused before any work: every number a notebook takes declares its allowed
  range in its comment (``[1, inf]``, ``(0, 1]``; a count ``n_*`` is at least 1 without one),
  so ``minirepro run`` refuses it with exit 2 before a kernel starts. The ranges are checked
  against the config: a value the ``Config`` refuses must be refused by the range, and every
  preset's value must be accepted by it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import re
from pathlib import Path

import pytest

from minirepro import chapters
from minirepro.core import params as param_language
from minirepro.core.params import is_seed_name

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ROOT / "src" / "minirepro" / "papers"

# Eq. (label) / Eqs. (label, label) / Alg. 1 / Alg. (name) / §3.2 / Thm 3 / App. C.3 /
# [reconstruction]. An equation is named by its label on the page, never by a bare number:
# the notes rarely give the paper's numbering, and a label is checked.
ANCHOR = re.compile(r"Eqs?\. \([^)]+\)|Alg\. ?[\w(]|§\s?\d|Thm \d|App\. [A-Z]|\[reconstruction")
EQ_REF = re.compile(r"Eqs?\. \(([^)]+)\)")
ALG_REF = re.compile(r"Alg\. \(([^)]+)\)")
ALG_NUM = re.compile(r"Alg\. (\d+)")


def _chapter_of_package() -> dict[str, chapters.Chapter]:
    found = {}
    for ch in chapters.discover(ROOT):
        text = ch.path.read_text(encoding="utf-8")
        for pkg in re.findall(r"from minirepro\.papers(?:\.| import )(\w+)", text):
            if (PAPERS / pkg).is_dir():
                found.setdefault(pkg, ch)
    return found


CHAPTER_OF = _chapter_of_package()
PACKAGES = sorted(CHAPTER_OF)


def _public_defs(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            yield node


def _first_line(node) -> str:
    doc = (ast.get_docstring(node) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _labels(ch: chapters.Chapter) -> set[str]:
    """The page's labels: directive ``:label:`` / ``:name:`` options and ``(target)=`` lines."""
    text = ch.path.read_text(encoding="utf-8")
    return (set(re.findall(r":(?:label|name):\s*(\S+)", text))
            | set(re.findall(r"^\(([\w-]+)\)=\s*$", text, flags=re.M)))


def test_every_paper_package_has_a_chapter():
    packages = {p.name for p in PAPERS.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(PACKAGES), f"packages no chapter imports: {packages - set(PACKAGES)}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_method_modules_anchor_every_public_function_to_the_paper(pkg):
    mod = importlib.import_module(f"minirepro.papers.{pkg}")
    names = getattr(mod, "METHOD_MODULES", None)
    assert names, f"minirepro.papers.{pkg} must name its METHOD_MODULES (README, 'Adding a chapter')"
    missing = []
    for name in names:
        path = PAPERS / pkg / f"{name}.py"
        assert path.is_file(), f"METHOD_MODULES names {name!r}, but there is no {path.name}"
        missing += [f"{name}.{n.name}: {_first_line(n)!r}" for n in _public_defs(path)
                    if not ANCHOR.search(_first_line(n))]
    assert not missing, ("a docstring's first line must name its equation, algorithm or "
                         "section, or say [reconstruction]:\n  " + "\n  ".join(missing))


@pytest.mark.parametrize("pkg", PACKAGES)
def test_equation_anchors_name_equations_the_page_labels(pkg):
    labels = _labels(CHAPTER_OF[pkg])
    unknown = []
    for path in sorted((PAPERS / pkg).glob("*.py")):
        for node in _public_defs(path):
            for group in EQ_REF.findall(_first_line(node)):
                for ref in (r.strip() for r in group.split(",")):
                    if ref not in labels:
                        unknown.append(f"{path.stem}.{node.name}: Eq. ({ref})")
    assert not unknown, f"labels missing from {CHAPTER_OF[pkg].path.name}: {unknown}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_docstrings_name_equations_by_label(pkg):
    """Anywhere in a docstring, an equation is named by its label on the page (``Eq. (label)``),
    never by a description ("Eq. of the JS gate") or a bare number (the paper's own number may
    stand beside it: "the paper's Eq. 1")."""
    labels = _labels(CHAPTER_OF[pkg])
    bad = []
    for path in sorted((PAPERS / pkg).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                bad += [f"{path.stem}.{node.name}: {m.group(0)!r}"
                        for m in re.finditer(r"(?<!paper's )\bEqs?\.(?! \()\s*\S+", doc)]
                bad += [f"{path.stem}.{node.name}: Eq. ({ref})" for g in EQ_REF.findall(doc)
                        for ref in (r.strip() for r in g.split(",")) if ref not in labels]
    assert not bad, f"equations not named by a label of {CHAPTER_OF[pkg].path.name}: {bad}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_algorithm_anchors_name_algorithms_the_page_shows(pkg):
    """``Alg. (label)`` names a label on the page; ``Alg. N`` (the paper's numbering) needs the page
    to present "Algorithm N", unless it is another work's algorithm (cited with "et al.")."""
    ch = CHAPTER_OF[pkg]
    labels, text = _labels(ch), ch.path.read_text(encoding="utf-8")
    unknown = []
    for path in sorted((PAPERS / pkg).glob("*.py")):
        for node in _public_defs(path):
            line = _first_line(node)
            unknown += [f"{path.stem}.{node.name}: Alg. ({ref})" for ref in ALG_REF.findall(line)
                        if ref.strip() not in labels]
            if "et al." not in line:
                unknown += [f"{path.stem}.{node.name}: Alg. {n}" for n in ALG_NUM.findall(line)
                            if f"Algorithm {n}" not in text]
    assert not unknown, f"algorithms {ch.path.name} does not show: {unknown}"


@pytest.mark.parametrize("ch", chapters.discover(ROOT), ids=lambda c: c.name)
def test_the_page_cites_every_equation_it_labels(ch):
    text = ch.path.read_text(encoding="utf-8")
    equations = {lab for lab in _labels(ch) if "-eq-" in lab}
    assert equations, f"{ch.path.name} labels no equation (`:label: {ch.name}-eq-...`)"
    uncited = sorted(lab for lab in equations if f"{{eq}}`{lab}`" not in text)
    assert not uncited, f"{ch.path.name} labels but never cites ({{eq}}): {uncited}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_parameters_are_the_config(pkg):
    ch = CHAPTER_OF[pkg]
    mod = importlib.import_module(f"minirepro.papers.{pkg}")
    assert hasattr(mod, "Config"), f"minirepro.papers.{pkg} must export its Config"
    cfg = mod.Config
    text = ch.path.read_text(encoding="utf-8")
    assert "Config.from_params(globals())" in text, f"{ch.path.name}: build cfg with Config.from_params"
    fields = {f.name for f in dataclasses.fields(cfg)}
    view = set(getattr(cfg, "VIEW_PARAMETERS", ()))
    assert not (view & fields), f"VIEW_PARAMETERS that are also fields: {view & fields}"
    stray = [p for p in ch.parameters if p != "scale" and p not in fields and p not in view]
    assert not stray, (f"{ch.path.name}: parameters that are neither {pkg}.Config fields nor "
                       f"VIEW_PARAMETERS: {stray}")


@pytest.mark.parametrize("pkg", PACKAGES)
def test_the_seeds_come_from_the_config(pkg):
    """``seed`` (and every ``*_seed``) is a Config field; a run's seeds are ``cfg.seeds``, made in
    one place (ScaledConfig.seeds), never rebuilt by hand; no notebook seeds with a literal;
    ``run_experiment`` takes the config first and no separate seed list."""
    import inspect
    import re

    ch = CHAPTER_OF[pkg]
    text = ch.path.read_text(encoding="utf-8")
    assert "range(seed, seed +" not in text, f"{ch.path.name}: use cfg.seeds"
    assert not re.search(r"set_seed\(\s*\d", text), f"{ch.path.name}: a literal seed (use the Config's)"
    fn = importlib.import_module(f"minirepro.papers.{pkg}").run_experiment
    params = list(inspect.signature(fn).parameters)
    assert params[0] == "cfg", f"{pkg}.run_experiment(cfg, ...): the config first, got {params}"
    assert "seeds" not in params and "seed" not in params, f"{pkg}.run_experiment reads cfg.seeds: {params}"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_one_naming_scheme(pkg):
    mod = importlib.import_module(f"minirepro.papers.{pkg}")
    assert callable(getattr(mod, "run_experiment", None)), f"{pkg} must export run_experiment"
    plots = PAPERS / pkg / "plots.py"
    assert plots.is_file(), f"{pkg}: figures live in plots.py"
    odd = [n.name for n in _public_defs(plots)
           if isinstance(n, ast.FunctionDef) and n.name.endswith("_figure")]
    assert not odd, f"{pkg}/plots.py: figure functions are named plot_*, not {odd}"


def test_minirepro_list_shows_each_parameters_preset_values(capsys):
    from minirepro.cli import main
    from minirepro.papers import caffnet

    assert main(["list", "caffnet", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    n_seeds = entry["parameters"]["n_seeds"]
    assert n_seeds["presets"] == {s: caffnet.Config.preset(s).n_seeds for s in ("smoke", "book", "full")}
    assert entry["parameters"]["seed"]["presets"] == {s: 0 for s in ("smoke", "book", "full")}  # a config field (ScaledConfig.seed)
    assert main(["list", "caffnet"]) == 0
    assert "presets: smoke 3, book 5, full 5" in capsys.readouterr().out


NUMERIC = ("int", "float", "list[int]", "list[float]")
PROBES = {"int": (-1, 0, 1, 2, 4, 6, 10**6), "float": (-1.0, -1e-3, 0.0, 0.5, 0.999, 1.0, 2.0, 1e6)}


def _numeric_params(pkg):
    ch = CHAPTER_OF[pkg]
    return ch, [p for n, p in ch.parameters.items() if p.type in NUMERIC and not is_seed_name(n)]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_number_a_notebook_takes_declares_its_range(pkg):
    ch, params = _numeric_params(pkg)
    missing = [p.name for p in params
               if not param_language._RANGE.search(p.comment) and p.choices is None and p.bounds() is None]
    assert not missing, (f"{ch.path.name}: end these parameters' comments with their allowed range, "
                         f"such as [1, inf] or (0, 1]: {missing}")


@pytest.mark.parametrize("pkg", PACKAGES)
def test_the_ranges_agree_with_the_config(pkg):
    ch, params = _numeric_params(pkg)
    cfg = importlib.import_module(f"minirepro.papers.{pkg}").Config
    fields = {f.name for f in dataclasses.fields(cfg)}
    for p in params:
        if p.name not in fields:
            continue
        for v in PROBES.get(p.type, ()):  # lists may have rules across elements: presets only
            try:
                cfg.from_params({p.name: v}, scale="smoke")
            except (ValueError, TypeError):
                with pytest.raises(chapters.ChapterError):  # the config refuses it: so must the range
                    p.coerce(v)
        for scale in cfg.PRESETS:
            preset = getattr(cfg.preset(scale), p.name)
            if preset is not None:
                p.coerce(list(preset) if isinstance(preset, tuple) else preset)
