"""Fixtures shared by the unit stage (tests/unit) and the integration stage (tests/integration).

Each folder's conftest.py puts ``tests/`` on ``sys.path`` and imports the fixtures it uses
from here (pytest collects a fixture wherever a conftest module holds it):

- ``toy_book``: a throwaway book root with one tiny chapter (runner, CLI and build tests);
- ``smollm2``: the real SmolLM2-135M converted into the model cache at most once per test
  run (session scope; two xdist workers share one conversion through the converter's own
  file lock: the second waits for the first, then loads its verified copy);
- ``tiny_gguf``: a few-KB llama GGUF written with the ``gguf`` package's writer, and
  :func:`use_tiny_smollm2`, which points the ``smollm2-135m`` converter at it, so the cache
  machinery (the lock, a corrupt copy re-made) is tested in seconds, not on 540 MB.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "unit" / "data"
SMOLLM2 = "smollm2-135m"


@pytest.fixture
def toy_book(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throwaway book root holding ``notebooks/01-toy/toy.md``; MINIREPRO_ROOT points at it
    and it is the working directory, so runs land in its ``runs/`` (runs go to the current
    folder's ``runs/``)."""
    (tmp_path / "notebooks" / "01-toy").mkdir(parents=True)
    shutil.copy(DATA / "toy.md", tmp_path / "notebooks" / "01-toy" / "toy.md")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIREPRO_ROOT", str(tmp_path))
    monkeypatch.delenv("MINIREPRO_SCALE", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return tmp_path


# ------------------------------------------------------------------ the real pretrained model

@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The verified cache folder of the real SmolLM2-135M (``$MINIREPRO_CACHE`` or the user
    cache), converted there when it is not yet: at most once per test run, whoever asks first."""
    from minirepro.core.lm import pretrained_models as pm

    return pm.pretrained_folder(SMOLLM2)


# ------------------------------------------------------------------ a tiny stand-in for it

@dataclass(frozen=True)
class TinyGGUF:
    path: Path
    sha256: str


def write_tiny_gguf(path: Path) -> Path:
    """A llama GGUF of a few KB that ``transformers`` reads as SmolLM2's is read: one layer,
    width 8, two query heads and one key/value head, tied embeddings, float32 tensors, and a
    byte-level BPE tokenizer (``gpt2``) of 32 tokens with a chat template. Deterministic:
    the same bytes on every call."""
    import gguf
    import numpy as np

    hidden, heads, kv_heads, ff, layers = 8, 2, 1, 16, 1
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", "Ġa", "ab"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama (minirepro tests)")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(specials) + [1] * (len(tokens) - len(specials)))
    w.add_token_merges(["Ġ a", "a b"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                        "{{ m['content'] }}<|im_end|>\n{% endfor %}")
    rng = np.random.default_rng(0)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    head_dim = hidden // heads
    w.add_tensor("token_embd.weight", weight(len(tokens), hidden))  # no output.weight: tied
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(ff, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(hidden, ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> TinyGGUF:
    """The tiny GGUF (written once per test run) and its sha256."""
    path = write_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny-llama.gguf")
    return TinyGGUF(path, hashlib.sha256(path.read_bytes()).hexdigest())


def use_tiny_smollm2(tiny: TinyGGUF, monkeypatch: pytest.MonkeyPatch | None = None):
    """Point the ``smollm2-135m`` recipe at the tiny GGUF: its source pinned to the tiny file's
    sha256 (in :data:`PRETRAINED` and in the registered recipe's config, so the manifest
    records it) and :func:`gguf_path` answering the tiny file. Everything else (the cache
    recipe, its lock, the manifest check, :func:`convert`) is the real code. Undone by
    ``monkeypatch``; without one (a child process) it stays for the process. Returns the
    tiny source."""
    from minirepro.core import artifacts
    from minirepro.core.artifacts import recipes
    from minirepro.core.lm import pretrained_models as pm

    src = replace(pm.SMOLLM2, sha256=tiny.sha256)
    rec = replace(artifacts.get(SMOLLM2), config=src)

    def gguf_path(name: str = SMOLLM2) -> Path:
        pm.source(name)
        return tiny.path

    if monkeypatch is None:
        pm.PRETRAINED[SMOLLM2] = src
        recipes._REGISTRY[SMOLLM2] = rec
        pm.gguf_path = gguf_path
    else:
        monkeypatch.setitem(pm.PRETRAINED, SMOLLM2, src)
        monkeypatch.setitem(recipes._REGISTRY, SMOLLM2, rec)
        monkeypatch.setattr(pm, "gguf_path", gguf_path)
    return src


def one_line_exit_2(argv: list[str], capsys) -> str:
    """Run ``minirepro ARGV``; assert it exits 2 with one line on stderr (bad input is refused
    before any work starts), and return that line."""
    import sys

    from minirepro.cli import main

    with pytest.raises(SystemExit) as info:
        sys.exit(main(argv))
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2, err
    assert len(err.splitlines()) == 1, err
    return err
