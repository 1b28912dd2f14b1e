"""Trained models as checked artifacts: recipes, manifests, verified loading.

A model that takes longer to train than a chapter's budget, or that several chapters
study, is trained once by a registered *recipe* and committed under
``artifacts/<name>/`` at the repository root::

    from minirepro.core import artifacts

    @artifacts.recipe("lm-book", config=SubstrateRecipe(), sources=("minirepro.core.lm.models",),
                      description="the LM substrate's book model")
    def build_lm_book(config, out: Path) -> artifacts.BuildResult:
        ...  # write only *.safetensors, *.json, *.txt into `out`
        return artifacts.BuildResult(quality={"val_loss": 1.2}, data_hash="...")

    path = artifacts.load("lm-book")   # a verified folder
    model = artifacts.load_weights("lm-book", Model(), "model.safetensors")  # float32, frozen

``artifacts/<name>/MANIFEST.json`` records the config, a hash of the recipe's code
(:func:`source_hash` over the recipe's own module and ``sources``), the data hash, the
sha256 and size of every file, the training time, the headline quality figures, the
library versions, the machine and the command that re-makes it.

:func:`load` checks every file against the manifest. A missing or corrupt file (or a
pickle) is never loaded: a one-line :class:`ArtifactWarning` names the problem and the
artifact is rebuilt into ``$MINIREPRO_CACHE/artifacts/<name>/`` (the committed copy is
left as it is). :func:`verify` also reports a manifest that no longer matches the
recipe's config or code, naming the fix ``minirepro artifacts build NAME``.

A recipe registered with ``location="cache"`` is never committed: it converts an
installed input (a pretrained model from a wheel, its sha256 pinned and checked by the
recipe's ``source_check``) once into ``$MINIREPRO_CACHE/artifacts/<name>/`` under a file
lock; its manifest's checksums guard the copy, which is re-made when corrupt or stale.
:func:`mark_optional` declares an artifact the book does without while it is not built
(``minirepro artifacts verify`` reports it, and counts no problem).

``MINIREPRO_ARTIFACTS`` moves the artifacts folder (tests use a temporary one); every
function also takes ``root=``. Writes go to a temporary folder next to the target and are
renamed into place, so a crash never leaves half an artifact under its name.
"""

from minirepro.core.artifacts.files import (
                                            ALLOWED_SUFFIXES,
                                            ARTIFACTS_ENV,
                                            BUDGET_BYTES,
                                            MANIFEST,
                                            artifacts_root,
                                            cache_dir,
                                            file_problems,
                                            manifest,
                                            read_manifest,
                                            total_bytes,
)
from minirepro.core.artifacts.loading import (
                                            ModelArtifact,
                                            folder_of,
                                            frozen,
                                            load_weights,
                                            read_json,
                                            read_weights,
)
from minirepro.core.artifacts.making import (
                                            clipped_step,
                                            float16_state,
                                            one_cycle_adamw,
                                            sha256_hex,
                                            write_files,
)
from minirepro.core.artifacts.recipes import (
                                            ArtifactError,
                                            ArtifactWarning,
                                            BuildResult,
                                            Recipe,
                                            get,
                                            mark_optional,
                                            optional_note,
                                            recipe,
                                            recipe_modules,
                                            registry,
                                            unregister,
)
from minirepro.core.artifacts.store import (
                                            build,
                                            describe,
                                            home,
                                            load,
                                            orphans,
                                            recipe_problems,
                                            verified_folder,
                                            verify,
)
from minirepro.core.sourcehash import source_hash

# Modules that register recipes when imported: the entry points of the group
# "minirepro.artifacts" (pyproject.toml), which the papers fill; registry() imports them
# all, so `minirepro artifacts list` sees every recipe. core names no paper module.
RECIPE_MODULES: tuple[str, ...] = recipe_modules()

__all__ = ["ALLOWED_SUFFIXES", "ARTIFACTS_ENV", "BUDGET_BYTES", "MANIFEST", "RECIPE_MODULES",
           "ArtifactError", "ArtifactWarning", "BuildResult", "ModelArtifact", "Recipe",
           "artifacts_root", "build", "cache_dir", "clipped_step", "describe", "file_problems",
           "float16_state", "folder_of", "frozen", "get", "home", "load", "load_weights",
           "manifest", "mark_optional", "one_cycle_adamw", "optional_note", "orphans",
           "read_json", "read_manifest", "read_weights", "recipe", "recipe_problems",
           "registry", "sha256_hex", "source_hash", "total_bytes", "unregister",
           "verified_folder", "verify", "write_files"]
