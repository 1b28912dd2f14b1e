"""Training the substrate: the guards on the causes ruled out, packing, curriculum, resuming.

The substrate's first book models never learned to copy. A review ruled out a
list of pipeline bugs; each has a guard here so that a later change cannot bring
one in unnoticed:

* the answer is tokenized in context exactly as it is scored (and every word is
  tokenized the same wherever it stands);
* the loss weights cover exactly the answer tokens and each line's ``<eos>``;
* no line of any family is cut at the context length;
* lines packed into one row do not see each other, and later tokens never change
  earlier logits.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from minirepro.core.lm.bpe import train_bpe
from minirepro.core.lm.corpus import (
    DRILLS,
    FAMILIES,
    CorpusConfig,
    Example,
    build_corpus,
    sample_lines,
    solve,
)
from minirepro.core.lm.models import ModelConfig, build_lm
from minirepro.core.lm.train import (
    TrainConfig,
    WordEncoder,
    encode_examples,
    mixture_at,
    pack,
    packed_mask,
    pad,
    progress_line,
    stream_batch,
    train_substrate,
    weighted_loss,
)

CORPUS = build_corpus(CorpusConfig(n_train=600, n_val=60, n_test=60, drills=DRILLS))
TOK = train_bpe(CORPUS.texts("train"), vocab_size=700)
SMALL = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_len=256)
OPT = ModelConfig(arch="opt", d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=48, max_len=256)


def _lines(n: int = 240) -> list[Example]:
    return sample_lines(CORPUS, np.random.default_rng(3), [1.0] * len(CORPUS.config.train_families), n)


# ---------------------------------------------------------------- tokenization


def word_by_word(tok, text: str) -> list[int]:
    """``<bos>`` and each word tokenized on its own (``" " + word`` after the first)."""
    words = text.split(" ")
    ids = [tok.bos_token_id] + tok(words[0], add_special_tokens=False)["input_ids"]
    for w in words[1:]:
        ids += tok(" " + w, add_special_tokens=False)["input_ids"]
    return ids


def check_tokenization(tok, examples: list[Example]) -> None:
    """The guard: a word's tokens never depend on its neighbours; the answer decodes back to itself."""
    enc = encode_examples(tok, examples)
    for e, ids, start in zip(examples, enc.ids, enc.answer_start):
        assert ids[:-1] == word_by_word(tok, e.text), e.text       # context-independent words
        assert ids[:start] == tok(e.prompt)["input_ids"]              # what generation is fed
        assert ids[-1] == tok.eos_token_id
        assert tok.decode(ids[start:-1]) == " " + e.answer            # what scoring reads back


def test_answer_tokens_in_context_equal_the_scored_answer():
    check_tokenization(TOK, CORPUS.val + CORPUS.test + _lines())


def test_the_word_cache_encodes_as_the_tokenizer():
    ex = CORPUS.val + CORPUS.test + _lines()
    a, b = encode_examples(TOK, ex), WordEncoder(TOK)(ex)
    assert a.ids == b.ids and a.answer_start == b.answer_start
    with pytest.raises(ValueError, match="longer than max_len"):
        WordEncoder(TOK)(ex, max_len=8)


def test_generation_is_fed_the_prompt_tokens_of_training():
    prompts = [e.prompt for e in CORPUS.test[:30]]
    side = TOK.padding_side
    TOK.padding_side = "left"  # as eval.generate does
    try:
        batch = TOK(prompts, padding=True)
    finally:
        TOK.padding_side = side
    for p, ids, mask in zip(prompts, batch["input_ids"], batch["attention_mask"]):
        assert [i for i, m in zip(ids, mask) if m] == TOK(p)["input_ids"]


# ---------------------------------------------------------------- the loss weights


def reference_weights(tok, e: Example, w: float) -> list[float]:
    """Weights of the targets of one line, from the strings alone: ``w`` on the answer and ``<eos>``."""
    n_answer = len(tok(" " + e.answer, add_special_tokens=False)["input_ids"])
    n_line = len(tok(e.text)["input_ids"]) + 1                       # + <eos>
    return [1.0] * (n_line - 1 - n_answer - 1) + [w] * (n_answer + 1)


def test_packed_loss_weights_cover_exactly_the_answer_and_eos():
    ex = _lines(60)
    enc = encode_examples(TOK, ex)
    b = pack(enc, [e.family for e in ex], 6, 256, TOK.pad_token_id, 10.0)
    found = 0
    for r in range(6):
        row_w, row_t = b.weights[r].tolist(), b.targets[r].tolist()
        starts = [t for t in range(256) if b.position_ids[r, t] == 0
                  and b.input_ids[r, t] == TOK.bos_token_id]
        for s in starts:
            i = next(i for i, x in enumerate(enc.ids) if x == b.input_ids[r, s:s + len(x)].tolist())
            n = len(enc.ids[i])
            assert row_w[s:s + n - 1] == reference_weights(TOK, ex[i], 10.0)
            assert row_t[s:s + n - 1] == enc.ids[i][1:]
            assert row_w[s + n - 1] == 0 and row_t[s + n - 1] == -100   # nothing across lines
            found += 1
    assert found == b.n_lines > 0
    assert float(b.weights[b.targets == -100].abs().sum()) == 0.0


def test_fixed_batch_loss_weights_cover_exactly_the_answer_and_eos():
    model = build_lm(SMALL, TOK, seed=0)
    ex = CORPUS.test[:12]
    enc = encode_examples(TOK, ex)
    ids, mask = pad(enc.ids, TOK.pad_token_id)
    loss, ce, valid, _ = weighted_loss(model, ids, mask, torch.tensor(enc.answer_start), 7.0)
    ref = torch.zeros_like(ce)
    for i, e in enumerate(ex):
        w = reference_weights(TOK, e, 7.0)
        ref[i, :len(w)] = torch.tensor(w)
    torch.testing.assert_close(loss, (ce * ref).sum() / ref.sum())
    assert torch.equal(valid, ref > 0)


# ---------------------------------------------------------------- lengths


def test_no_line_is_cut_at_the_context_length():
    from minirepro.core.lm.presets import BOOK

    longest = {}
    for e in CORPUS.val + CORPUS.test + _lines(600):
        longest[e.family] = max(longest.get(e.family, 0), len(TOK(e.text)["input_ids"]) + 1)
    assert set(longest) == {*FAMILIES, *DRILLS}
    assert max(longest.values()) <= BOOK.model.max_len
    with pytest.raises(ValueError, match="longer than max_len"):   # never silently cut
        encode_examples(TOK, CORPUS.test[:40], max_len=longest["arith"] - 1)
    with pytest.raises(ValueError, match="does not fit rows"):
        enc = encode_examples(TOK, CORPUS.test[:40])
        pack(enc, [e.family for e in CORPUS.test[:40]], 2, 8, TOK.pad_token_id, 1.0)


# ---------------------------------------------------------------- packing and masking


@pytest.mark.parametrize("cfg", [SMALL, OPT], ids=["llama", "opt"])
def test_packed_lines_do_not_see_each_other(cfg):
    model = build_lm(cfg, TOK, seed=1)
    ex = CORPUS.train[:40]
    enc = encode_examples(TOK, ex)
    b = pack(enc, [e.family for e in ex], 4, 256, TOK.pad_token_id, 10.0)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, position_ids=b.position_ids,
                    attention_mask=packed_mask(b.position_ids), use_cache=False).logits
        for r in range(4):
            for s in [t for t in range(256) if b.position_ids[r, t] == 0
                      and b.input_ids[r, t] == TOK.bos_token_id]:
                n = next(len(x) for x in enc.ids if x == b.input_ids[r, s:s + len(x)].tolist())
                alone = model(input_ids=b.input_ids[r:r + 1, s:s + n], use_cache=False).logits
                torch.testing.assert_close(out[r, s:s + n], alone[0], atol=1e-5, rtol=1e-5)


def test_later_tokens_leave_earlier_logits_unchanged():
    model = build_lm(SMALL, TOK, seed=2)
    x = torch.tensor([encode_examples(TOK, CORPUS.test[:1]).ids[0]])
    y = x.clone()
    y[0, 6:] = 40
    with torch.no_grad():
        a, b = model(input_ids=x).logits, model(input_ids=y).logits
    torch.testing.assert_close(a[0, :6], b[0, :6])


def test_a_streamed_batch_mixes_families_and_fills_its_rows():
    cfg = TrainConfig(stream=True, batch_tokens=2048, steps=10)
    b = stream_batch(CORPUS, TOK, cfg, 256, 0)
    fams = [f for row in b.families for f in row]
    assert b.input_ids.shape == (8, 256) and b.n_tokens > 0.9 * 2048
    assert len(set(fams)) >= 8
    again = stream_batch(CORPUS, TOK, cfg, 256, 0)          # a function of (seed, step)
    assert torch.equal(b.input_ids, again.input_ids)
    assert not torch.equal(b.input_ids, stream_batch(CORPUS, TOK, cfg, 256, 1).input_ids)


def test_the_curriculum_moves_from_early_to_final_weights():
    fams = CORPUS.config.train_families
    early = [0.0] * len(fams)
    early[fams.index("induct")] = 1.0
    cfg = TrainConfig(stream=True, batch_tokens=512, early_weights=tuple(early),
                      curriculum_steps=100)
    assert mixture_at(CORPUS, cfg, 0)[fams.index("induct")] == 1.0
    np.testing.assert_allclose(mixture_at(CORPUS, cfg, 100), np.full(len(fams), 1 / len(fams)))
    np.testing.assert_allclose(mixture_at(CORPUS, cfg, 50).sum(), 1.0)
    lines = sample_lines(CORPUS, np.random.default_rng(0), mixture_at(CORPUS, cfg, 0), 30)
    assert {e.family for e in lines} == {"induct"}


def test_drills_are_for_training_only_and_solvable():
    assert not {e.family for e in CORPUS.val + CORPUS.test} & set(DRILLS)
    drills = [e for e in CORPUS.train if e.family in DRILLS]
    assert {e.family for e in drills} == set(DRILLS)
    assert all(solve(e) == e.answer for e in drills)


# ---------------------------------------------------------------- runs


def test_streamed_training_resumes_to_the_same_weights(tmp_path):
    cfg = TrainConfig(steps=6, batch_tokens=512, warmup=2, eval_every=3, eval_examples=8,
                      vocab_size=700, stream=True)
    whole = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    ckpt = tmp_path / "run.pt"
    # stop after 3 steps (a checkpoint at step 3), then resume from it
    with pytest.raises(KeyboardInterrupt):
        train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK, checkpoint=ckpt, checkpoint_every=3,
                        on_eval=_interrupt_at(3))
    assert ckpt.exists()
    resumed = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK, checkpoint=ckpt)
    assert resumed.curve == whole.curve and resumed.tokens_seen == whole.tokens_seen
    for a, b in zip(whole.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="another training config"):
        other = TrainConfig(**{**cfg.__dict__, "lr": 5e-3})
        train_substrate(CORPUS, SMALL, other, tokenizer=TOK, checkpoint=ckpt)


def _interrupt_at(step: int):
    def hook(curve: dict) -> None:
        if curve["eval_step"][-1] >= step:
            raise KeyboardInterrupt
    return hook


def test_batches_made_by_worker_processes_train_the_same_model():
    cfg = TrainConfig(steps=3, batch_tokens=512, warmup=1, eval_every=3, eval_examples=8,
                      vocab_size=700, stream=True)
    here = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    workers = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK, data_workers=2)
    assert here.curve == workers.curve


def test_the_curve_records_the_circuit():
    cfg = TrainConfig(steps=4, batch_tokens=512, warmup=1, eval_every=2, eval_examples=8,
                      vocab_size=700, stream=True)
    run = train_substrate(CORPUS, SMALL, cfg, tokenizer=TOK)
    assert run.curve["eval_step"] == [0, 2, 4] and len(run.curve["train_loss"]) == 4
    assert len(run.curve["induction_copy_acc"]) == 3 and len(run.curve["prefix_matching"]) == 3
    assert run.curve["tokens"][-1] == run.tokens_seen > 0


def test_progress_line_estimates_the_time_left():
    line = progress_line("lm", 100, 1000, 2_000_000, 50.0, 1.2345)
    assert line.startswith("lm: step 100/1,000 (10%), 2.0 M tokens, 40,000 tok/s, loss 1.234")
    assert line.endswith("~7m30s left")
    # the rate of this process's steps only: 500 steps in 2000 s, 500 to go
    assert progress_line("lm", 1500, 2000, 0, 3000.0, 1.0, 1000, 1000.0).endswith("~33m20s left")


def test_bad_input():
    with pytest.raises(ValueError, match="batch_tokens"):
        TrainConfig(stream=True, batch_tokens=0)
    with pytest.raises(ValueError, match="non-negative"):
        TrainConfig(early_weights=(-1.0,))
    with pytest.raises(ValueError, match="early_weights must be"):
        mixture_at(CORPUS, TrainConfig(stream=True, batch_tokens=64, early_weights=(1.0,),
                                       curriculum_steps=5), 0)
    with pytest.raises(ValueError, match="weights must be"):
        sample_lines(CORPUS, np.random.default_rng(0), [1.0], 3)
    with pytest.raises(ValueError, match="drills"):
        CorpusConfig(drills=("nope",))
    with pytest.raises(ValueError, match="train_weights"):
        CorpusConfig(families=("copy",), drills=("induct",), train_weights=(1.0,))


# ---------------------------------------------------------------- learning to copy
#
# Until now a test here trained the copy-lines recipe (800 steps, a minute or more) and
# thresholded the induction scores it reached; under other CPU kernels
# (ATEN_CPU_CAPABILITY=default) the same recipe ended below them (best prefix-matching
# score 0.17 against 0.25). The unit stage no longer trains a model to a threshold:
# the training code is tested on a tiny budget (the loss falls: the same under any
# kernels), and the recipe's outcome is a recorded fact (tests/unit/data/lm-copy:
# the model it trained, float16, and recorded.json), re-measured here with forward
# passes only.

COPY_DIR = Path(__file__).parent / "data" / "lm-copy"
# After 40 steps the mean loss of the last 5 steps is 0.722 of the first 5's, to the 5th
# decimal the same under ATEN_CPU_CAPABILITY=avx512 and =default (torch 2.13, CPU); a
# loop that does not learn stays near 1.
LOSS_FALL = 0.8
# Re-measuring the committed weights under avx512 and default kernels differed by at most
# 9e-8 (best_prefix_score), the accuracies not at all: scores may move by 1e-5, an
# accuracy by one prediction (100 validation lines; 32 sequences x 11 induction positions).
MEASURE_TOL = {"val_copy_acc": 1 / 100, "induction_copy_acc": 1 / (32 * 11), "val_loss": 1e-5,
               "best_prefix_score": 1e-5, "best_prev_score": 1e-5}


def _copy_recipe():
    spec = importlib.util.spec_from_file_location("lm_copy_build", COPY_DIR / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_training_on_copy_lines_lowers_the_loss():
    """The training loop on copy lines alone, 40 steps: the loss falls and the curve has its shape.

    What 40 steps do to a fresh model (learning the words' frequencies) does not
    depend on the kernels; whether and when an induction circuit forms does (see
    the recorded model below).
    """
    corpus = build_corpus(CorpusConfig(families=("copy",), n_train=200, n_val=40, n_test=20,
                                       copy_len=(6, 10)))
    model = ModelConfig(d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64, max_len=96)
    cfg = TrainConfig(steps=40, batch_tokens=512, lr=3e-3, min_lr_frac=1.0, warmup=5,
                      eval_every=20, eval_examples=20, vocab_size=700, stream=True)
    run = train_substrate(corpus, model, cfg, tokenizer=TOK, log_every_s=1e9)
    c = run.curve
    assert len(c["train_loss"]) == 40 and c["eval_step"] == [0, 20, 40]
    assert all(set(a) == {"copy"} for a in c["val_family_acc"])
    assert all(len(c[k]) == 3 for k in ("val_loss", "val_answer_acc", "induction_copy_acc",
                                         "prefix_matching", "tokens"))
    first, last = np.mean(c["train_loss"][:5]), np.mean(c["train_loss"][-5:])
    assert last < LOSS_FALL * first, (first, last)
    assert c["val_loss"][0] > c["val_loss"][1] > c["val_loss"][2]


def test_the_recorded_copy_model_learned_to_copy():
    """A 2-layer model trained on copy lines alone (the recipe in data/lm-copy/build.py) copies.

    The circuit v2 never formed, formed in a CI-sized run: copy lines only, fresh
    every step, two layers (a previous-token head feeding a prefix-matching head).
    The record is checked against the recipe and the committed weights; the
    weights are re-measured (induction scores on repeated random copy words,
    teacher-forced copy accuracy on validation lines): forward passes, which agree
    across kernel sets within ``MEASURE_TOL``.
    """
    import json

    from minirepro.core.lm.bpe import load_bpe
    from minirepro.core.lm.models import load_lm

    build = _copy_recipe()
    rec = json.loads((COPY_DIR / "recorded.json").read_text())
    assert rec["recipe"] == build.RECIPE and rec["claim"] == build.CLAIM
    for name, digest in rec["files"].items():
        assert build.sha256(COPY_DIR / name) == digest, name
    claim, curve = rec["claim"], rec["curve"]
    assert curve["eval_step"] == [0, 400, 800]
    assert curve["val_copy_acc"][0] == 0.0 and curve["val_copy_acc"][-1] >= claim["final_val_copy_acc"]
    assert curve["train_loss_first_last"][1] < curve["train_loss_first_last"][0]
    assert build.meets_claim(rec)
    corpus_cfg, _, _ = build.recipe()
    now = build.measure(load_lm(COPY_DIR), load_bpe(COPY_DIR), build_corpus(corpus_cfg))
    shipped = rec["shipped_float16"]
    assert now["val_copy_acc"] >= claim["final_val_copy_acc"], now
    assert now["best_prefix_score"] > claim["best_prefix_score"], now
    assert now["best_prev_score"] > claim["best_prev_score"], now
    for k in ("val_copy_acc", "val_loss", "induction_copy_acc", "best_prefix_score",
              "best_prev_score"):
        assert abs(now[k] - shipped[k]) <= MEASURE_TOL[k], (k, now[k], shipped[k])
    assert now["best_prefix_head"] == shipped["best_prefix_head"]
    assert now["best_prev_head"] == shipped["best_prev_head"]
