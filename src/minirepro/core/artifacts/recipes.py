"""Recipes: the registry of functions that make artifacts, and what they return."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

from minirepro.core.sourcehash import source_hash

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class ArtifactError(ValueError):
    """An unknown artifact name, a bad recipe, or an artifact that cannot be used."""


class ArtifactWarning(UserWarning):
    """A committed artifact was not used as it is (corrupt, missing or out of date)."""


@dataclass
class BuildResult:
    """What a recipe returns besides the files it wrote.

    Attributes:
        quality: headline figures of the trained model (e.g. ``{"val_loss": 1.2}``).
        data_hash: sha256 of the training data (``""`` when there is none).
    """

    quality: dict[str, float] = field(default_factory=dict)
    data_hash: str = ""


@dataclass(frozen=True)
class Recipe:
    """A registered recipe: ``fn(config, out)`` writes the artifact's files into ``out``."""

    name: str
    fn: Callable[..., BuildResult]
    config: object
    sources: tuple[str | ModuleType, ...]
    description: str
    registered_by: str = ""  # the module that called artifacts.recipe(...)
    location: str = "repo"  # "repo": committed under artifacts/; "cache": made in cache_dir()
    source_check: Callable[[], str] | None = None  # checks the input a "cache" recipe reads

    @property
    def module(self) -> str:
        """The module that defines the recipe function."""
        return self.fn.__module__

    @property
    def command(self) -> str:
        """The command that re-makes the artifact."""
        return f"minirepro artifacts build {self.name}"

    def config_dict(self) -> dict:
        """The config as it goes into the manifest (JSON types)."""
        cfg = self.config
        if cfg is None:
            raw: object = {}
        elif dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
            raw = dataclasses.asdict(cfg)
        elif isinstance(cfg, Mapping):
            raw = dict(cfg)
        else:
            raise ArtifactError(f"recipe {self.name!r}: config must be a dataclass instance "
                                f"or a mapping, got {type(cfg).__name__}")
        return json.loads(json.dumps(raw, sort_keys=True, default=str))

    def source_modules(self) -> list[str | ModuleType]:
        """The recipe function's module, the module that registered it, and ``sources``."""
        own = [m for m in dict.fromkeys((self.module, self.registered_by)) if m]
        return [sys.modules.get(m, m) for m in own] + list(self.sources)

    def source_hash(self) -> str:
        """:func:`source_hash` of :meth:`source_modules`."""
        return source_hash(self.source_modules())


_REGISTRY: dict[str, Recipe] = {}


LOCATIONS = ("repo", "cache")


def recipe(name: str, *, config: object = None,
           sources: tuple[str | ModuleType, ...] = (), description: str = "",
           location: str = "repo", source_check: Callable[[], str] | None = None):
    """Register the decorated function as the recipe of artifact ``name``.

    Args:
        name: lowercase words joined by ``-`` (``"lm-book"``).
        config: a dataclass instance (or a mapping), passed to the function and
            recorded in the manifest; :func:`verify` compares it with the manifest.
        sources: modules (dotted names or module objects) whose code the artifact
            depends on besides the recipe's own module; their :func:`source_hash` is
            recorded and compared.
        description: one line for ``minirepro artifacts list``.
        location: ``"repo"`` (committed under ``artifacts/<name>/``) or ``"cache"``: made
            on first use into ``cache_dir()/<name>/`` and never committed, for an artifact
            converted from an installed input too large for the repository (a pretrained
            model from a wheel). Its manifest records the sha256 of every file it wrote, so
            a corrupt or stale cache copy is re-made, never loaded.
        source_check: for a ``"cache"`` recipe, a function that checks the input it reads
            (installed, the pinned sha256) and returns one line saying what it checked, or
            raises :class:`ArtifactError` naming the fix; :func:`verify` runs it.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ArtifactError(f"artifact name {name!r} must be lowercase words joined by '-'")
    if location not in LOCATIONS:
        raise ArtifactError(f"recipe {name!r}: location must be one of {LOCATIONS}, got {location!r}")
    sources = (sources,) if isinstance(sources, (str, ModuleType)) else tuple(sources)
    caller = sys._getframe(1).f_globals.get("__name__", "")

    def register(fn: Callable[..., BuildResult]) -> Callable[..., BuildResult]:
        old = _REGISTRY.get(name)
        if old is not None and (old.module, old.fn.__qualname__) != (fn.__module__,
                                                                      fn.__qualname__):
            raise ArtifactError(f"artifact {name!r} is already registered by "
                                f"{old.module}.{old.fn.__qualname__}")
        rec = Recipe(name, fn, config, sources, description, caller, location, source_check)
        rec.config_dict()  # fail at registration on a config that cannot be recorded
        _REGISTRY[name] = rec
        return fn

    return register


def unregister(name: str) -> None:
    """Forget a recipe (tests register throwaway ones)."""
    _REGISTRY.pop(name, None)


_OPTIONAL: dict[str, str] = {}


def mark_optional(name: str, how: str) -> None:
    """Declare artifact ``name`` optional: the book does without it while it is not built.

    ``minirepro artifacts verify`` then reports it *not built* with ``how`` (how and where it
    can be built, e.g. only on a GPU) instead of counting a problem. A folder that exists but
    does not verify is still a problem, and :func:`verify` itself is unchanged (it reports
    the missing folder), so what needs the artifact (``book/claims/withdrawn.yml``) still
    sees it missing.
    """
    _OPTIONAL[name] = " ".join(how.split())


def optional_note(name: str) -> str | None:
    """How optional artifact ``name`` is built (:func:`mark_optional`), or ``None``."""
    return _OPTIONAL.get(name)


ENTRY_POINT_GROUP = "minirepro.artifacts"


def recipe_modules() -> tuple[str, ...]:
    """The modules that register recipes: the installed package's entry points of the group
    ``minirepro.artifacts`` (``pyproject.toml``), sorted."""
    from importlib.metadata import entry_points

    return tuple(sorted({ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}))


def registry() -> dict[str, Recipe]:
    """Every recipe, by name, after importing the modules in :data:`RECIPE_MODULES`."""
    from minirepro.core import artifacts  # RECIPE_MODULES lives in the package

    for module in artifacts.RECIPE_MODULES:
        importlib.import_module(module)
    return dict(sorted(_REGISTRY.items()))


def get(name: str, module_hint: str | None = None) -> Recipe:
    """The recipe called ``name``; an unknown name raises an error naming the valid ones.

    ``module_hint`` (a manifest's ``recipe_module``) is imported first, and only when
    that does not register ``name`` are all of :data:`RECIPE_MODULES` imported: loading
    one chapter's artifact does not import every other chapter's recipe (and its
    libraries). Only modules listed in ``RECIPE_MODULES`` are ever imported.
    """
    from minirepro.core import artifacts

    if name in _REGISTRY:
        return _REGISTRY[name]
    if module_hint in artifacts.RECIPE_MODULES:
        importlib.import_module(module_hint)
        if name in _REGISTRY:
            return _REGISTRY[name]
    known = registry()
    if name not in known:
        raise ArtifactError(f"unknown artifact {name!r}; artifacts: "
                            f"{', '.join(known) or '(none registered)'}")
    return known[name]

