"""The trained variants as one checked artifact (``artifacts/memoryllm-variants/``).

Base, MemoryLLM, Flex-MemoryLLM (β = 1, 2, 3) at equal total parameters, and a small
base with as many parameters as MemoryLLM has active ones, each trained from scratch
on the same substrate-corpus subset and seeds; weights stored in float16. Re-make with
``minirepro artifacts build memoryllm-variants`` (two worker processes, one torch
thread each).
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from minirepro.core import artifacts
from minirepro.core.lm.bpe import save_bpe, train_bpe
from minirepro.core.lm.corpus import CorpusConfig, build_corpus
from minirepro.core.lm.train import encode_examples
from minirepro.papers.memoryllm.loading import META, NAME, WEIGHTS, load_variants
from minirepro.papers.memoryllm.model import Arch, active_params, n_params
from minirepro.papers.memoryllm.train import TrainSpec, score, train_variant


def corpus_config() -> CorpusConfig:
    """The corpus subset: context-free facts, contextual copy spans, templated text."""
    return CorpusConfig(n_train=14_000, n_val=600, n_test=1200, families=("facts", "copy"),
                          copy_len=(6, 8))


@dataclass
class VariantsRecipe:
    """Sizes of the variants and their training (one config for all of them)."""

    vocab: int = 448
    d: int = 48
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    small_d: int = 32
    small_d_ff: int = 64
    steps: int = 800
    batch_size: int = 32
    lr: float = 6e-3
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    workers: int = 2
    corpus: dict = field(default_factory=lambda: asdict(corpus_config()))

    def archs(self) -> dict[str, Arch]:
        """The six variants by name."""
        kw = dict(vocab=self.vocab, d=self.d, n_layers=self.n_layers, n_heads=self.n_heads,
                  n_kv_heads=self.n_kv_heads, d_ff=self.d_ff, max_len=96)
        out = {"base": Arch("base", **kw), "memory": Arch("memory", **kw)}
        out.update({f"flex{b}": Arch("flex", beta=b, **kw) for b in (1, 2, 3)})
        out["base-small"] = Arch("base", **{**kw, "d": self.small_d, "d_ff": self.small_d_ff})
        return out


def _job(args: tuple) -> tuple[str, int, dict, list[float], float]:
    name, arch, seed, spec, folder = args
    from minirepro.core.lm.bpe import load_bpe

    tok = load_bpe(folder)
    corpus = build_corpus(CorpusConfig(**{k: tuple(v) if isinstance(v, list) else v
                                               for k, v in corpus_config().__dict__.items()}))
    enc = encode_examples(tok, corpus.train, max_len=arch.max_len)
    model, curve, cpu = train_variant(arch, enc, spec, seed)
    return name, seed, artifacts.float16_state(model), curve, cpu


@artifacts.recipe(NAME, config=VariantsRecipe(),
                  sources=("minirepro.papers.memoryllm.model", "minirepro.papers.memoryllm.train",
                           "minirepro.core.lm.corpus", "minirepro.core.lm.bpe"),
                  description="MemoryLLM chapter: base, MemoryLLM, Flex (beta 1-3) at equal total "
                              "parameters and a base of equal active parameters; 5 seeds, fp16")
def build_variants(spec: VariantsRecipe, out: Path) -> artifacts.BuildResult:
    """[reconstruction] Train every variant and seed; store fp16 weights, tokenizer, curves."""
    corpus = build_corpus(corpus_config())
    tok = train_bpe(corpus.texts("train"), vocab_size=spec.vocab)
    save_bpe(tok, out)
    train = TrainSpec(steps=spec.steps, batch_size=spec.batch_size, lr=spec.lr)
    archs = spec.archs()
    jobs = [(n, a, s, train, str(out)) for n, a in archs.items() for s in spec.seeds]
    with ProcessPoolExecutor(spec.workers) as pool:
        results = list(pool.map(_job, jobs))
    state, curves, cpu = {}, {}, {}
    for name, seed, st, curve, sec in results:
        state.update({f"{name}/{seed}/{k}": v for k, v in st.items()})
        curves.setdefault(name, {})[str(seed)] = [round(x, 4) for x in curve[::25]]
        cpu[f"{name}/{seed}"] = round(sec, 1)
    meta = {"archs": {n: a.to_dict() for n, a in archs.items()}, "seeds": list(spec.seeds),
            "curve_every": 25, "curves": curves, "train_cpu_seconds": cpu,
            "params": {n: n_params(m) for n, m in load_variants_like(archs).items()},
            "active": {n: active_params(m) for n, m in load_variants_like(archs).items()},
            "corpus": json.loads(json.dumps(spec.corpus))}
    artifacts.write_files(out, WEIGHTS, state, {META: meta}, indent=1)
    models, _ = load_variants(out)
    val = encode_examples(tok, corpus.val)
    fams = [e.family for e in corpus.val]
    quality = {f"val ppl {n}": round(sum(score(m, val, fams)["ppl"] for m in ms.values()) / len(ms), 4)
               for n, ms in models.items()}
    quality["train cpu seconds"] = round(sum(cpu.values()), 1)
    digest = artifacts.sha256_hex("\n".join(corpus.texts("train")).encode())
    return artifacts.BuildResult(quality=quality, data_hash=digest)


def load_variants_like(archs: dict[str, Arch]) -> dict:
    """Fresh models of the given shapes (for counting parameters)."""
    from minirepro.papers.memoryllm.model import MemoryLM

    return {n: MemoryLM(a) for n, a in archs.items()}
