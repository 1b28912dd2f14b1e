"""Pre-training on the synthetic corpus, cached on disk by a hash of everything that matters.

The cache key is a SHA-256 of the model config, the training config, the corpus
config and a fingerprint of the generated corpus, the tokenizer size, and the
``torch``/``transformers`` versions. An entry is a folder
``$MINIREPRO_CACHE/lm/<key>/`` (default ``~/.cache/minirepro``) holding the model
(``save_pretrained``), the tokenizer, ``meta.json`` (losses, timings, configs) and
``MANIFEST.json`` (the SHA-256 of every other file). It is written in a temporary
folder and renamed into place, so a crash never leaves a half entry under the
final name; an entry whose manifest is missing or whose files do not match it
is deleted and rebuilt, never loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from minirepro.core.lm.corpus import Corpus, CorpusConfig, build_corpus
from minirepro.core.lm.models import LMConfig, build_model, load_pretrained
from minirepro.core.lm.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from minirepro.core.progress import train_loop
from minirepro.core.scale import ScaledConfig
from minirepro.core.seed import set_seed

CACHE_VERSION = 1
MANIFEST = "MANIFEST.json"


@dataclass
class TrainConfig(ScaledConfig):
    """How the model is pre-trained.

    Attributes:
        steps: optimiser steps.
        batch_size: examples per step (padded to the longest in the batch).
        lr: peak AdamW learning rate (linear warm-up, cosine decay to 10%).
        warmup: warm-up steps.
        weight_decay: AdamW weight decay.
        vocab_size: tokenizer vocabulary bound.
        seed: seed of the weight init and the batch order.
        answer_weight: weight of the answer tokens (and the final ``<eos>``) in the
            loss, relative to 1 for every other token. The answers are one token in
            ten to twenty; weighting them makes the tasks learnable within the time budget.
        threads: torch threads during training. One thread by default: these
            matrices are too small to gain from two (measured on a quiet 2-core
            machine, two threads made book training several times slower), and a fixed
            count keeps the weights identical everywhere.
    """

    steps: int = 1800
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 100
    weight_decay: float = 0.01
    vocab_size: int = 512
    seed: int = 0
    answer_weight: float = 20.0
    threads: int = 1

    # book (the defaults): lr 3e-3 with answer_weight 4 left arith, recall and trace at
    # chance (the model predicted one constant digit); lr 1e-3, answer_weight 20,
    # 1800 steps and short texts (CorpusConfig presets) learn all four families
    # above chance in about 55 s of one core.
    PRESETS: ClassVar = {
        # smoke: 250 steps (about 2 s) keeps the smoke chapters within 20 s on a cold cache
        "smoke": {"steps": 250, "batch_size": 16, "lr": 3e-3, "warmup": 20},
        "book": {},
        "full": {"steps": 4000, "batch_size": 64, "lr": 1.5e-3, "warmup": 100},
    }

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.answer_weight <= 0:
            raise ValueError(f"answer_weight must be positive, got {self.answer_weight}")
        if self.warmup < 0 or self.seed < 0:
            raise ValueError("warmup and seed must be non-negative")


@dataclass
class PretrainedLM:
    """A trained (or loaded) model with its tokenizer and corpus.

    Attributes:
        model: the causal LM, in eval mode.
        tokenizer: its fast tokenizer.
        corpus: the corpus it was trained on (for a hub checkpoint: the corpus to evaluate on).
        lm_config, train_config: the configs (``None`` for a hub checkpoint).
        losses: training loss per step (empty on a hub checkpoint).
        from_cache: True when the weights were loaded from the cache.
        path: the cache folder (``None`` if uncached).
        key: the cache key.
        train_seconds: wall time of the training itself (recorded at training time).
        load_seconds: wall time of this call.
        model_name: the hub id, when one was loaded.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    corpus: Corpus
    lm_config: LMConfig | None
    train_config: TrainConfig | None
    losses: list[float] = field(default_factory=list)
    from_cache: bool = False
    path: Path | None = None
    key: str = ""
    train_seconds: float = 0.0
    load_seconds: float = 0.0
    model_name: str | None = None


def cache_root() -> Path:
    """``$MINIREPRO_CACHE`` if set, else ``~/.cache/minirepro`` (``$XDG_CACHE_HOME`` honoured)."""
    env = os.environ.get("MINIREPRO_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "minirepro"


def cache_key(lm_cfg: LMConfig, train_cfg: TrainConfig, corpus: Corpus) -> str:
    """SHA-256 (hex) of the configs, the corpus fingerprint and the library versions."""
    payload = {
        "version": CACHE_VERSION,
        "lm": dataclasses.asdict(lm_cfg),
        "train": dataclasses.asdict(train_cfg),
        "corpus": dataclasses.asdict(corpus.config),
        "data": corpus.fingerprint(),
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=list).encode()).hexdigest()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_manifest(folder: Path) -> dict[str, str]:
    """Write ``MANIFEST.json`` with the SHA-256 and size of every file in ``folder``."""
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            files[str(p.relative_to(folder))] = f"{_sha256(p)}:{p.stat().st_size}"
    (folder / MANIFEST).write_text(json.dumps({"version": CACHE_VERSION, "files": files}, indent=1))
    return files


def verify_entry(folder: Path) -> str | None:
    """``None`` if the cache entry is complete and intact, else the reason it is not."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        return "not a folder (a plain file or a link where the entry belongs)"
    man = folder / MANIFEST
    if not man.is_file():
        return "no manifest (partial or foreign entry)"
    try:
        files = json.loads(man.read_text())["files"]
    except (ValueError, KeyError) as exc:
        return f"unreadable manifest ({exc})"
    for required in ("meta.json", "tokenizer.json", "config.json"):
        if required not in files:
            return f"manifest lacks {required}"
    for rel, digest in files.items():
        p = folder / rel
        if not p.is_file():
            return f"missing file {rel}"
        if f"{_sha256(p)}:{p.stat().st_size}" != digest:
            return f"checksum mismatch in {rel}"
    return None


def encode(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> list[list[int]]:
    """Token ids of each text: ``<bos>`` + tokens + ``<eos>``."""
    ids = tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [list(x) + [tokenizer.eos_token_id] for x in ids]


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad ``seqs`` into ``(input_ids, attention_mask, labels)``, each ``(B, T_max)``.

    ``labels`` is ``input_ids`` with padding set to -100 (ignored by the loss).
    """
    if not seqs:
        raise ValueError("pad_batch needs at least one sequence")
    t = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), t), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


def train_model(model: PreTrainedModel, seqs: list[list[int]], cfg: TrainConfig, pad_id: int,
                answer_starts: list[int] | None = None, desc: str = "pretrain") -> list[float]:
    """Train ``model`` in place with AdamW on random batches of ``seqs``; returns the losses.

    The optimised loss is the next-token cross-entropy over non-padding tokens,
    with tokens at or after ``answer_starts[j]`` in sequence ``j`` weighted by
    ``cfg.answer_weight``. The returned (logged) loss is the plain unweighted mean
    cross-entropy in nats per token, comparable with a unigram baseline.
    """
    if not seqs:
        raise ValueError("train_model needs training sequences")
    if answer_starts is not None and len(answer_starts) != len(seqs):
        raise ValueError("answer_starts must give one position per sequence")
    rng = np.random.default_rng(cfg.seed)
    # Length-grouped batches: a random window of the examples sorted by length,
    # so a batch pads little (about half the cost of uniformly drawn batches).
    order = np.argsort([len(s) for s in seqs], kind="stable")
    bs = min(cfg.batch_size, len(seqs))
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.98))

    def lr_at(i: int) -> float:
        if i < cfg.warmup:
            return cfg.lr * (i + 1) / cfg.warmup
        frac = (i - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()

    def step(i: int) -> float:
        start = int(rng.integers(0, len(seqs) - bs + 1))
        idx = order[start:start + bs]
        ids, mask, labels = pad_batch([seqs[j] for j in idx], pad_id)
        for g in opt.param_groups:
            g["lr"] = lr_at(i)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
        target = labels[:, 1:]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none",
                                               ignore_index=-100)
        valid = (target != -100).float()
        weight = valid.clone()
        if answer_starts is not None and cfg.answer_weight != 1.0:
            pos = torch.arange(1, ids.shape[1])[None, :]
            starts = torch.tensor([answer_starts[j] for j in idx])[:, None]
            weight = weight * torch.where(pos >= starts, cfg.answer_weight, 1.0)
        loss = (ce * weight).sum() / weight.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float((ce.detach() * valid).sum() / valid.sum())

    try:
        losses = train_loop(step, cfg.steps, desc=desc)
    finally:
        model.eval()
    return losses


def pretrain(lm_config: LMConfig | None = None, train_config: TrainConfig | None = None,
             corpus_config: CorpusConfig | None = None, *, model_name: str | None = None,
             use_cache: bool = True, scale: str | None = None) -> PretrainedLM:
    """The model for these configs: from the cache if a valid entry exists, else trained now.

    Args:
        lm_config, train_config, corpus_config: ``None`` means the preset of ``scale``.
        model_name: a hub id or local folder; when given, that checkpoint is loaded
            with ``from_pretrained`` instead (offline this fails fast with
            :class:`~minirepro.core.lm.models.HubUnavailable`).
        use_cache: read and write the on-disk cache (``False``: always train, write nothing).
        scale: preset scale for the ``None`` configs (default ``MINIREPRO_SCALE``).

    Returns:
        A :class:`PretrainedLM`. A cache hit returns exactly the weights the
        training produced (bit for bit: same file).
    """
    t0 = time.perf_counter()
    lm_config = lm_config or LMConfig.preset(scale)
    train_config = train_config or TrainConfig.preset(scale)
    corpus = build_corpus(corpus_config or CorpusConfig.preset(scale))
    if model_name is not None:
        model, tok = load_pretrained(model_name)
        return PretrainedLM(model, tok, corpus, None, None, model_name=model_name,
                            load_seconds=time.perf_counter() - t0)
    key = cache_key(lm_config, train_config, corpus)
    folder = cache_root() / "lm" / key[:32]
    if use_cache and folder.exists():
        problem = verify_entry(folder)
        if problem is None:
            try:
                return _load_entry(folder, corpus, lm_config, train_config, key, t0)
            except Exception as exc:  # a verified entry that still fails to load: rebuild
                problem = f"failed to load ({exc})"
        warnings.warn(f"cache entry {folder} is invalid: {problem}; rebuilding it", stacklevel=2)
        _remove_entry(folder)

    threads_before = torch.get_num_threads()
    set_seed(train_config.seed, threads=train_config.threads)
    tok = train_tokenizer(corpus.texts("train"), vocab_size=train_config.vocab_size)
    model = build_model(lm_config, tok, seed=train_config.seed)
    seqs = encode(tok, corpus.texts("train"))
    too_long = max(len(s) for s in seqs)
    if too_long > lm_config.max_len:
        raise ValueError(f"corpus has a {too_long}-token line but max_len={lm_config.max_len}; "
                         "raise LMConfig.max_len or shorten the corpus")
    t_train = time.perf_counter()
    try:
        starts = [len(x) for x in tok([e.prompt for e in corpus.train])["input_ids"]]
        losses = train_model(model, seqs, train_config, tok.pad_token_id, answer_starts=starts)
    finally:
        torch.set_num_threads(threads_before)
    train_seconds = time.perf_counter() - t_train
    out = PretrainedLM(model, tok, corpus, lm_config, train_config, losses=losses, key=key,
                       train_seconds=train_seconds)
    if use_cache:
        out.path = _write_entry(folder, out)
    out.load_seconds = time.perf_counter() - t0
    return out


def _remove_entry(folder: Path) -> None:
    """Remove a cache entry, whatever it is: a folder, a plain file, a (dangling) link."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def _write_entry(folder: Path, lm: PretrainedLM) -> Path:
    """Write the entry in a temporary sibling folder, then rename it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".tmp-{folder.name[:8]}-"))
    try:
        lm.model.save_pretrained(tmp, safe_serialization=True)
        save_tokenizer(lm.tokenizer, tmp)
        meta = {"key": lm.key, "losses": lm.losses, "train_seconds": lm.train_seconds,
                "lm_config": dataclasses.asdict(lm.lm_config),
                "train_config": dataclasses.asdict(lm.train_config),
                "corpus_config": dataclasses.asdict(lm.corpus.config)}
        (tmp / "meta.json").write_text(json.dumps(meta, default=list))
        write_manifest(tmp)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process won the race: keep its (identical) entry ...
            if verify_entry(folder) is not None:  # ... unless what is there is no entry (a file)
                _remove_entry(folder)
                try:
                    os.replace(tmp, folder)
                except OSError:
                    pass
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _load_entry(folder: Path, corpus: Corpus, lm_cfg: LMConfig, train_cfg: TrainConfig,
                key: str, t0: float) -> PretrainedLM:
    meta = json.loads((folder / "meta.json").read_text())
    if meta.get("key") != key:
        raise ValueError("entry was written for another key")
    tok = load_tokenizer(folder)
    model_cls = transformers.OPTForCausalLM if lm_cfg.arch == "opt" else transformers.LlamaForCausalLM
    model = model_cls.from_pretrained(folder, dtype=torch.float32).eval()
    return PretrainedLM(model, tok, corpus, lm_cfg, train_cfg, losses=list(meta["losses"]),
                        from_cache=True, path=folder, key=key,
                        train_seconds=float(meta["train_seconds"]),
                        load_seconds=time.perf_counter() - t0)


def clear_cache() -> None:
    """Delete every cached LM entry under :func:`cache_root`."""
    shutil.rmtree(cache_root() / "lm", ignore_errors=True)
