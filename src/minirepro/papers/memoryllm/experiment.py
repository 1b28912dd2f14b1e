"""The chapter's experiment: score the trained variants, sweep α, quantise the ToLs, time decoding,
measure the resident memory of decoding in fresh processes."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from minirepro.core import ScaledConfig, set_seed
from minirepro.core.lm.corpus import build_corpus, generate_split
from minirepro.core.lm.train import encode_examples
from minirepro.core.progress import progress
from minirepro.papers.memoryllm.loading import load_tokenizer, load_variants
from minirepro.papers.memoryllm.model import Arch, MemoryLM, active_params, greedy_decode, n_params
from minirepro.papers.memoryllm.tol import ToL, build_tol, open_tol, save_tol
from minirepro.papers.memoryllm.train import score

FAMILIES = ("facts", "copy")


@dataclass
class Config(ScaledConfig):
    """What the chapter evaluates (the variants themselves are a checked artifact)."""

    n_seeds: int = 5
    n_test: int = 600
    alphas: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0)
    tol_bits: tuple[int, ...] = (16, 8, 4, 2)
    timing_d: int = 384
    timing_tokens: int = 48
    timing_reps: int = 5
    rss_d: int = 384
    rss_tokens: int = 48
    rss_reps: int = 3
    data_seed: int | None = None  # None: the corpus's test split; else fresh test lines (test_split)
    PRESETS: ClassVar = {
        "smoke": {"n_seeds": 2, "n_test": 80, "alphas": (1.0, 0.5, 0.0), "tol_bits": (16, 4), "timing_d": 96, "timing_tokens": 12,
                  "timing_reps": 2, "rss_reps": 1},
        "book": {},
        "full": {"timing_d": 768, "timing_tokens": 96, "timing_reps": 10, "rss_d": 768, "rss_reps": 5},
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        self.alphas = tuple(float(a) for a in self.alphas)
        self.tol_bits = tuple(int(b) for b in self.tol_bits)
        if not 1 <= int(self.n_seeds) <= 5:
            raise ValueError(f"n_seeds must be 1 to 5 (the artifact holds 5 seeds), got {self.n_seeds}")
        if not 50 <= int(self.n_test) <= 1200:
            raise ValueError(f"n_test must be in 50..1200 (the corpus test split), got {self.n_test}")
        if not self.alphas or any(not 0.0 <= a <= 1.0 for a in self.alphas) or 1.0 not in self.alphas \
                or 0.5 not in self.alphas:
            raise ValueError(f"alphas must lie in [0, 1] and include 1.0 and 0.5, got {self.alphas}")
        if not set(self.tol_bits) >= {16, 4} or not set(self.tol_bits) <= {32, 16, 8, 4, 2}:
            raise ValueError(f"tol_bits must include 16 and 4, from {{32, 16, 8, 4, 2}}, got {self.tol_bits}")
        if int(self.timing_d) < 48 or int(self.timing_d) % 48:
            raise ValueError(f"timing_d must be a positive multiple of 48, got {self.timing_d}")
        if not 1 <= int(self.timing_tokens) <= 96 or int(self.timing_reps) < 2:
            raise ValueError(f"timing_tokens must be in 1..96 (the decoders' max_len is 128 with a 32-token "
                             f"prompt) and timing_reps >= 2, got {self.timing_tokens} and {self.timing_reps}")
        if int(self.rss_d) < 48 or int(self.rss_d) % 48:
            raise ValueError(f"rss_d must be a positive multiple of 48, got {self.rss_d}")
        if self.data_seed is not None and not 0 <= int(self.data_seed) < 2**32:
            raise ValueError(f"data_seed must be None or in 0..2**32-1, got {self.data_seed}")
        if not 1 <= int(self.rss_tokens) <= 96 or int(self.rss_reps) < 1:
            raise ValueError(f"rss_tokens must be in 1..96 (the decoders' max_len is 128 with a 32-token "
                             f"prompt) and rss_reps >= 1, got {self.rss_tokens} and {self.rss_reps}")


def test_split(n_test: int, data_seed: int | None = None):
    """The first ``n_test`` lines of the artifact corpus's test split (facts and copy lines).

    With ``data_seed``, ``n_test`` *fresh* lines drawn by the same generator from the
    artifact's corpus config with their own seed (``SeedSequence([corpus seed, 3,
    data_seed])``, apart from the train, val and test splits' seeds): the same fact table
    and copy-word pool, other keys, contexts and copy spans. ``minirepro claims
    --robustness`` varies it (the trained variants cannot be re-seeded without re-training).
    """
    from minirepro.papers.memoryllm.artifact import corpus_config

    corpus = build_corpus(corpus_config())
    if data_seed is None:
        return corpus.test[:n_test]
    seed = int(np.random.SeedSequence([corpus.config.seed, 3, int(data_seed)]).generate_state(1)[0])
    return generate_split(corpus.config, n_test, seed, corpus, "test")


@dataclass
class Results:
    """Everything the page shows; long tables with one row per seed (and arm)."""

    variants: pd.DataFrame
    alpha: pd.DataFrame
    tol: pd.DataFrame
    layers: pd.DataFrame
    timing: pd.DataFrame
    memory: pd.DataFrame
    identity: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    rss: pd.DataFrame = field(default_factory=pd.DataFrame)


def _row(name: str, seed: int, m: MemoryLM, s: dict) -> dict:
    row = {"variant": name, "seed": seed, "total": n_params(m), "active": active_params(m),
           "ppl": s["ppl"], "log_ppl": s["nll"]}
    for f in FAMILIES:
        row[f"{f}_nll"], row[f"{f}_acc"] = s["fam"][f]["nll"], s["fam"][f]["acc"]
    return row


def score_variants(models: dict, enc, fams: list[str], seeds: list[int]) -> pd.DataFrame:
    """§4.1: test perplexity and per-family answer NLL / exact match of every variant and seed."""
    rows = [_row(n, s, ms[s], score(ms[s], enc, fams)) for n, ms in progress(models.items(), desc="variants")
            for s in seeds]
    return pd.DataFrame(rows)


def alpha_sweep(models: dict, enc, fams: list[str], seeds: list[int], alphas) -> pd.DataFrame:
    """§4.4: scale the context-free FFN output by α (MemoryLLM) or the FFN output (base)."""
    rows = []
    for name in ("memory", "base"):
        for s in seeds:
            for a in alphas:
                sc = score(models[name][s], enc, fams, alpha=a)
                rows += [{"variant": name, "seed": s, "alpha": a, "family": f, "nll": sc["fam"][f]["nll"],
                          "acc": sc["fam"][f]["acc"]} for f in FAMILIES]
                rows.append({"variant": name, "seed": s, "alpha": a, "family": "all tokens",
                             "nll": sc["nll"], "acc": float("nan")})
    return pd.DataFrame(rows)


def tol_study(models: dict, enc, fams: list[str], seeds: list[int], bits_list, folder: Path,
              ids: torch.Tensor) -> tuple[pd.DataFrame, dict]:
    """§3.2 and §4.6: ToLs written at each precision, memory-mapped, and scored.

    Returns the per-seed table (``arm``, ``bits``, ``log_ppl``, ``bytes``) and the lookup
    identity check: max |Δlogit| of float32 lookups against live FFNs, and whether the
    memory-mapped table equals the in-memory one.
    """
    rows, max_dlogit, memmap_equal = [], 0.0, True
    for s in seeds:
        m = models["memory"][s]
        table = build_tol(m)
        with torch.no_grad():
            exact = ToL.in_memory(table, 32)
            max_dlogit = max(max_dlogit, float((m(ids) - m(ids, tol=exact)).abs().max()))
        for bits in bits_list:
            disk = open_tol(save_tol(table, folder / f"seed{s}-{bits}bit", bits=bits))
            mem = ToL.in_memory(table, bits)
            memmap_equal &= bool(np.array_equal(disk.rows(0, ids.numpy()), mem.rows(0, ids.numpy())))
            sc = score(m, enc, fams, tol=disk)
            rows.append({"seed": s, "arm": f"{bits}-bit ToL", "bits": bits, "log_ppl": sc["nll"],
                         "facts_nll": sc["fam"]["facts"]["nll"], "bytes": disk.nbytes})
        sc = score(m, enc, fams, alpha=0.0)
        rows.append({"seed": s, "arm": "no FFN-M", "bits": 0, "log_ppl": sc["nll"],
                     "facts_nll": sc["fam"]["facts"]["nll"], "bytes": 0})
    return pd.DataFrame(rows), {"max_dlogit": max_dlogit, "memmap_equal": memmap_equal}


def layer_study(models: dict, enc, fams: list[str], seeds: list[int], ids: torch.Tensor) -> pd.DataFrame:
    """§4.5: per layer, the mean ToL norm on test tokens and the cost of dropping that FFN."""
    rows = []
    for name in ("memory", "base"):
        for s in seeds:
            m = models[name][s]
            full = score(m, enc, fams)["nll"]
            norms = build_tol(m)[:, ids.flatten()].norm(dim=-1).mean(1) if name == "memory" else None
            for layer in range(m.arch.n_layers):
                drop = score(m, enc, fams, drop_layer=layer)["nll"] - full
                rows.append({"variant": name, "seed": s, "layer": layer + 1, "drop_dlog_ppl": drop,
                             "tol_norm": float(norms[layer]) if norms is not None else float("nan")})
    return pd.DataFrame(rows)


def random_decoders(d: int, vocab: int, seed: int = 0) -> tuple[MemoryLM, MemoryLM, dict]:
    """§4.7 [reconstruction]: a base and a MemoryLLM decoder of width ``d`` (4 layers) with
    random weights drawn from ``seed``, and their architecture keywords."""
    set_seed(seed)
    kw = dict(vocab=vocab, d=d, n_layers=4, n_heads=d // 48, n_kv_heads=max(1, d // 96), d_ff=8 * d // 3,
              max_len=128)
    return MemoryLM(Arch("base", **kw)).eval(), MemoryLM(Arch("memory", **kw)).eval(), kw


def decode_timing(cfg: Config, vocab: int, folder: Path, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """§4.7 [reconstruction]: ms/token of greedy decoding, base (live FFN) vs MemoryLLM with
    float16 ToLs memory-mapped from disk, at width ``timing_d`` (random weights: the cost
    does not depend on training); and the bytes each keeps resident (weights in RAM)."""
    d = cfg.timing_d
    base, mem, kw = random_decoders(d, vocab, seed)
    tol = open_tol(save_tol(build_tol(mem), folder / f"timing-d{d}", bits=16))
    for layer in mem.layers:  # the FFN-M weights are not needed once the ToL is on disk
        del layer.mlp
    prompt = torch.randint(4, vocab, (1, 32), generator=torch.Generator().manual_seed(seed))
    rows = []
    for rep in range(cfg.timing_reps):
        for name, model, t in (("base", base, None), ("memory", mem, tol)):
            start = time.perf_counter()
            greedy_decode(model, prompt, cfg.timing_tokens, tol=t)
            ms = 1000 * (time.perf_counter() - start) / cfg.timing_tokens
            rows.append({"rep": rep, "variant": name, "ms_per_token": ms})
    ref = MemoryLM(Arch("memory", **kw))
    memory = pd.DataFrame([
        {"variant": "base", "resident_bytes": 2 * n_params(base), "disk_tol_bytes": 0},
        {"variant": "memory", "resident_bytes": 2 * active_params(ref), "disk_tol_bytes": tol.nbytes},
    ])
    return pd.DataFrame(rows), memory


def rss_study(cfg: Config, vocab: int, folder: Path, seed: int = 0) -> pd.DataFrame:
    """§4.7 [reconstruction]: resident memory of decoding ``rss_tokens`` tokens, measured in a
    fresh process per decoder (:func:`~minirepro.papers.memoryllm.memory.measure_rss`):
    base against MemoryLLM with its float16 ToL memory-mapped from disk, random weights at
    width ``rss_d``, ``rss_reps`` pairs of processes. One row per process (bytes)."""
    from minirepro.papers.memoryllm.memory import measure_rss

    d = cfg.rss_d
    base, mem, _ = random_decoders(d, vocab, seed)
    tol_folder = save_tol(build_tol(mem), folder / f"rss-d{d}", bits=16)
    open_tol(tol_folder)  # checks sizes and checksums once; the children open it without re-reading
    for layer in mem.layers:
        del layer.mlp
    rows = measure_rss(base, mem, tol_folder, cfg.rss_tokens, cfg.rss_reps, folder, seed=seed)
    df = pd.DataFrame(rows)
    df["counted_bytes"] = [2 * n_params(base) if v == "base" else 2 * n_params(mem) for v in df.variant]
    return df


def rss_table(rss: pd.DataFrame) -> pd.DataFrame:
    """Per decoder, the medians over processes of :func:`rss_study`'s rows, in MB (10^6 bytes)."""
    cols = {"counted_bytes": "counted fp16", "weights_bytes": "held fp32", "load_increase": "RSS +load",
            "increase": "RSS +decode", "tol_touched_bytes": "ToL rows touched", "tol_page_bytes": "ToL their pages",
            "tol_mapped_decoded": "ToL mapped"}
    tab = rss.groupby("variant", sort=False)[list(cols)].median() / 1e6
    tab.index = tab.index.map({"base": "base", "memory": "MemoryLLM"})
    return tab.rename(columns=cols)


def rss_ratios(rss: pd.DataFrame) -> np.ndarray:
    """Per pair of processes, MemoryLLM's measured RSS increase over base's."""
    p = rss.pivot(index="rep", columns="variant", values="increase")
    return (p["memory"] / p["base"]).to_numpy()


def rss_reading(rss: pd.DataFrame, claim, paper_ratio: float = 6.04 / 9.54) -> str:
    """The prose comparing the measured RSS ratio with the counted one and the paper's."""
    r = rss_ratios(rss)
    tab = rss.groupby("variant").median(numeric_only=True)
    m = tab.loc["memory"]
    counted_ratio = m.counted_bytes / tab.loc["base"].counted_bytes
    extra = (m.increase - m.weights_bytes) / 1e6
    base_extra = (tab.loc["base"].increase - tab.loc["base"].weights_bytes) / 1e6
    rel = "below" if np.median(r) < paper_ratio else "above"
    why = (f" The miniature saves more than the paper because the FFN-M weights that the ToL replaces are "
           f"{1 - counted_ratio:.0%} of its weights (a 448-token vocabulary makes the embedding small), and "
           f"even its whole ToL, {m.tol_file_bytes / 1e6:.2f} MB when mapped, is small next to them."
           if rel == "below" else "")
    return (f"The after-imports baseline is {tab.rss_imports.median() / 1e6:.0f} MB of RSS (median). "
            f"Measured in fresh processes, MemoryLLM's resident memory grows by {np.median(r):.2f} of "
            f"base's (median over {len(r)} pair(s), range {r.min():.2f} to {r.max():.2f}), against "
            f"{counted_ratio:.2f} counted and the paper's {paper_ratio:.2f}: {rel} the paper's ratio "
            f"(claim: **{claim.verdict}**). Beyond its weights, MemoryLLM's process holds {extra:.1f} MB "
            f"(base's {base_extra:.1f} MB): the decode's buffers and {m.tol_mapped_decoded / 1e6:.2f} MB "
            f"of mapped ToL pages ({m.tol_mapped_decoded / m.tol_file_bytes:.0%} of the ToL file), although "
            f"the rows it looked up ({int(m.tol_rows)} of layer × token) take only "
            f"{m.tol_touched_bytes / 1e3:.0f} kB and lie on {m.tol_page_bytes / 1e3:.0f} kB of pages.{why}")


def run_experiment(cfg: Config, workdir: Path | None = None, folder: Path | None = None) -> Results:
    """Every study on the artifact's variants (from ``folder``, default the checked artifact);
    ``cfg.seed`` draws the random-weight timing decoders (the variants' training seeds are the
    artifact's); ToL files go to ``workdir`` (a temporary folder by default)."""
    seed = cfg.seed
    set_seed(seed)
    models, meta = load_variants(folder)
    tok = load_tokenizer(folder)
    seeds = list(meta["seeds"])[: cfg.n_seeds]
    examples = test_split(cfg.n_test, cfg.data_seed)
    enc = encode_examples(tok, examples)
    fams = [e.family for e in examples]
    ids = torch.tensor(enc.ids[0])[None, :]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir) if workdir is not None else Path(tmp)
        variants = score_variants(models, enc, fams, seeds)
        alpha = alpha_sweep(models, enc, fams, seeds, cfg.alphas)
        tol, identity = tol_study(models, enc, fams, seeds, cfg.tol_bits, work, ids)
        all_ids = torch.tensor([i for s in enc.ids for i in s])[None, :]
        layers = layer_study(models, enc, fams, seeds, all_ids)
        timing, memory = decode_timing(cfg, meta["archs"]["base"]["vocab"], work, seed)
        rss = rss_study(cfg, meta["archs"]["base"]["vocab"], work, seed)
    return Results(variants, alpha, tol, layers, timing, memory, identity,
                   {"seeds": seeds, "archs": meta["archs"], "curves": meta["curves"],
                    "train_cpu_seconds": meta["train_cpu_seconds"], "n_test": len(examples)}, rss)


def per_seed_slope(variants: pd.DataFrame) -> np.ndarray:
    """Per seed, the least-squares slope of test log-perplexity on β (MemoryLLM = β 0, Flex β 1-3)."""
    beta = {"memory": 0, "flex1": 1, "flex2": 2, "flex3": 3}
    sub = variants[variants.variant.isin(beta)].assign(beta=lambda d: d.variant.map(beta))
    return np.array([np.polyfit(g.beta, g.log_ppl, 1)[0] for _, g in sub.groupby("seed")])


def tol_bytes(vocab: int, n_layers: int, d: int, bits: int = 16) -> int:
    """§3.2: storage of a full ToL, ``|V| · N · d · bits / 8`` bytes (no per-row scales)."""
    return vocab * n_layers * d * bits // 8


def reading(claims: list, variants: pd.DataFrame, facts_rise: np.ndarray, copy_rise: np.ndarray) -> str:
    """The prose that reads the verdicts, computed from the settled claims and the tables."""
    by = {c.id: c for c in claims}
    mean = variants.groupby("variant").log_ppl.mean()
    gap = mean["memory"] - mean["base"]
    if gap > 0:
        closed = ", ".join(f"{100 * (mean['memory'] - mean[f'flex{b}']) / gap:.0f}%" for b in (1, 2, 3))
        flex = f"Flex with β = 1, 2, 3 closes {closed} of that gap"
    else:
        flex = "Base is not ahead of MemoryLLM here, so Flex has no gap to close"
    split = ("the facts live in the lookups, the copy spans in attention"
             if by["alpha-facts-vs-copy"].verdict == "reproduced"
             else ("the facts rise more, as the paper's split predicts, but not by the margin the rule "
                   "requires, so the miniature does not establish the split"
                   if np.mean(facts_rise) > np.mean(copy_rise) else
                   "the miniature does not show the paper's split between lookup and contextual tokens"))
    parts = [
        f"At equal total parameters MemoryLLM's test log-perplexity is {gap:+.4f} nats from base's; "
        f"against the base of equal active parameters it is {mean['memory'] - mean['base-small']:+.4f} "
        f"nats (claim 1: **{by['equal-total-vs-active'].verdict}**).",
        f"{flex} (claim 2: **{by['flex-closes-gap'].verdict}**).",
        f"Halving the lookups raises the facts' answer NLL by {facts_rise.mean():.2f} nats and the copy "
        f"spans' by {copy_rise.mean():.2f} (claim 3: **{by['alpha-facts-vs-copy'].verdict}**): {split}.",
        f"4-bit ToLs: **{by['tol-4bit'].verdict}** ({by['tol-4bit'].measured}).",
        f"Decode time (machine-dependent): **{by['decode-faster'].verdict}**; resident bytes counted: "
        f"**{by['resident-bytes'].verdict}**; resident memory measured (machine-dependent): "
        f"**{by['resident-rss'].verdict}**.",
    ]
    return " ".join(parts)
