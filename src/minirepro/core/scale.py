"""Scales (smoke, book, full) and dataclass configs with ``preset(scale)``."""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, ClassVar, Self

SCALES: tuple[str, ...] = ("smoke", "book", "full")


def resolve_scale(scale: str | None = None) -> str:
    """Return a valid scale: ``scale`` if given, else ``MINIREPRO_SCALE``, else ``"book"``.

    Raises:
        ValueError: the scale is not one of ``SCALES``.
    """
    value = scale if scale is not None else os.environ.get("MINIREPRO_SCALE", "book")
    if value not in SCALES:
        raise ValueError(f"unknown scale {value!r}; expected one of {', '.join(SCALES)}")
    return value


def _record_resolved(cfg: Any) -> None:
    """Under ``minirepro run`` (``MINIREPRO_CONFIG`` names a file), write the config a
    notebook's parameters resolved to (a ``None`` parameter takes its preset's value): the
    runner records these values in the run folder's ``params.json``."""
    target = os.environ.get("MINIREPRO_CONFIG")
    if not target:
        return
    import json
    import tempfile
    from pathlib import Path

    path = Path(target)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}, fh, indent=2,
                  default=str)
    os.replace(tmp, path)


@dataclasses.dataclass
class ScaledConfig:
    """Base for a chapter's config: subclasses declare fields and ``PRESETS``.

    Every config has ``seed`` (the base seed, a notebook parameter like every field) and
    ``seeds`` (the seeds it runs). ``PRESETS`` maps a scale to the field values that differ
    from the defaults::

        @dataclass
        class Config(ScaledConfig):
            n_train: int = 1000
            PRESETS: ClassVar = {"smoke": {"n_train": 100}, "book": {}, "full": {"n_train": 10_000}}

        cfg = Config.preset("smoke", n_train=50)   # explicit values win

    Every count (a field named ``n_*``) must be at least 1: :meth:`__post_init__` refuses
    ``n_train=0`` with a ``ValueError`` naming the field.
    """

    seed: int = 0  # the base seed: a run's seeds are seed, seed + 1, ... (see ``seeds``)

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    # Notebook parameters that choose what the page shows (which method is drawn up
    # close), not what is computed; every other parameter is a field of the config.
    VIEW_PARAMETERS: ClassVar[tuple[str, ...]] = ()
    # Counts (fields n_*) for which 0 has a meaning (e.g. "0: all"); they must be >= 0.
    ZERO_COUNTS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        """Check the counts: every field named ``n_*`` that holds a number must be >= 1 (>= 0
        for those in ``ZERO_COUNTS``); ``None`` (take it from elsewhere) is left alone.

        A subclass with its own ``__post_init__`` calls ``super().__post_init__()`` first.

        Raises:
            ValueError: naming the field and its value.
        """
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("n_") and isinstance(value, numbers.Real) and not isinstance(value, bool):
                least = 0 if f.name in self.ZERO_COUNTS else 1
                if value < least:
                    raise ValueError(f"{type(self).__name__}: {f.name} must be >= {least}, got {value}")

    @classmethod
    def preset(cls, scale: str | None = None, **overrides: Any) -> Self:
        """The config for ``scale``, with any non-``None`` override applied on top."""
        scale = resolve_scale(scale)
        names = {f.name for f in dataclasses.fields(cls)}
        values = dict(cls.PRESETS.get(scale, {}))
        unknown = set(values) - names
        if unknown:
            raise TypeError(f"{cls.__name__}.PRESETS[{scale!r}] names unknown fields {sorted(unknown)}")
        for key, value in overrides.items():
            if key not in names:
                raise TypeError(f"{cls.__name__} has no field {key!r}; fields: {', '.join(sorted(names))}")
            if value is not None:
                values[key] = value
        cfg = cls(**values)
        from minirepro.core.seed import check_seed

        check_seed(cfg.seed)
        return cfg

    @property
    def seeds(self) -> list[int]:
        """The seeds this config runs: ``seed .. seed + n_seeds - 1`` when it has ``n_seeds``,
        else ``[seed]`` (the one place a chapter's seed list is made)."""
        n = getattr(self, "n_seeds", None)
        return list(range(self.seed, self.seed + int(n))) if n else [self.seed]

    @classmethod
    def from_params(cls, namespace: dict[str, Any], scale: str | None = None) -> Self:
        """The config for a notebook's parameters cell: its ``scale`` preset, overridden by
        every variable of ``namespace`` (pass ``globals()``) named like a field and not ``None``.

        Notebook parameters are named as the config's fields, so one call maps them all::

            cfg = Config.from_params(globals())
        """
        names = {f.name for f in dataclasses.fields(cls)}
        chosen = scale if scale is not None else namespace.get("scale")
        cfg = cls.preset(chosen, **{k: v for k, v in namespace.items() if k in names})
        _record_resolved(cfg)
        return cfg

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for tables and results)."""
        return dataclasses.asdict(self)
