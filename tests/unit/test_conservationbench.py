"""ConservationBench: generator ground truth, conditions, parsing, analysis against scipy /
statsmodels / brute force, the export -> answer -> score round trip, bad input, the
transformers adapter on a tiny LLaVA built from a config."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage, stats

from minirepro.papers.conservationbench import analysis, bench
from minirepro.papers.conservationbench.cli import main as cli_main
from minirepro.papers.conservationbench.conditions import (
    FRAME_COUNTS,
    LETTERS,
    SELECTIONS,
    select_frames,
    trial_table,
)
from minirepro.papers.conservationbench.generator import (
    ANSWERS,
    INK_THRESHOLD,
    N_SOURCE,
    PROPERTIES,
    generate,
    make_video,
    measure,
    measured_answer,
)
from minirepro.papers.conservationbench.models import (
    FAIL,
    ConstantModel,
    StandIn,
    StandInSpec,
    Trial,
    frame_features,
    parse_response,
)


@pytest.fixture(scope="module")
def videos():
    return generate(12, seed=3)


# --- generator: the labels are what the pixels show -------------------------------------------

def test_measured_answers_match_labels_for_every_video(videos):
    assert len(videos) == 4 * 12 * 2
    assert [measured_answer(v) for v in videos] == [v.answer for v in videos]


def test_measured_quantities_match_the_labelled_quantities(videos):
    for v in videos:
        m0, m1 = measure(v.frames[0], v.prop), measure(v.frames[-1], v.prop)
        if v.prop == "size":  # a rasterised ellipse: its area within 4% of pi a b
            assert m0 == pytest.approx(v.q0, rel=0.04) and m1 == pytest.approx(v.q1, rel=0.04)
        else:  # counts, stick length in px and liquid area in px^2 are exact
            assert (m0, m1) == (v.q0, v.q1), v.video_id


def test_conserving_videos_keep_the_quantity_on_every_frame(videos):
    for v in videos:
        if v.conserving and v.prop in ("number", "length"):
            q = {measure(f, v.prop) for f in v.frames}
            assert q == {v.q0}, v.video_id


@settings(max_examples=25, deadline=None)
@given(prop=st.sampled_from(PROPERTIES), pair=st.integers(0, 200), seed=st.integers(0, 10_000))
def test_any_seed_gives_matching_labels_and_a_matched_control(prop, pair, seed):
    c, nc = make_video(prop, pair, True, seed), make_video(prop, pair, False, seed)
    assert measured_answer(c) == "same" and measured_answer(nc) == nc.answer != "same"
    assert nc.answer == ("more" if pair % 2 == 0 else "less")
    assert np.array_equal(c.frames[:nc.event], nc.frames[:nc.event])  # same scene until the change
    assert not np.array_equal(c.frames[-1], nc.frames[-1])
    assert (c.frames[:, :, [0, -1]] >= INK_THRESHOLD).all()  # nothing drawn off the edge


def test_generator_is_deterministic_and_seeded():
    a, b, c = generate(2, 5), generate(2, 5), generate(2, 6)
    assert all(np.array_equal(x.frames, y.frames) for x, y in zip(a, b, strict=True))
    assert any(not np.array_equal(x.frames, y.frames) for x, y in zip(a, c, strict=True))


def test_generator_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown property 'weight'"):
        generate(2, 0, ("number", "weight"))
    with pytest.raises(ValueError, match="n_pairs"):
        generate(0, 0)
    with pytest.raises(ValueError, match="unknown property"):
        measure(np.zeros((4, 4)), "mass")


# --- conditions ---------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, N_SOURCE), method=st.sampled_from(SELECTIONS), pair=st.integers(0, 5),
       cons=st.booleans())
def test_frame_selection_keeps_first_and_last(n, method, pair, cons):
    v = make_video("volume", pair, cons, 1)
    idx = select_frames(v, n, method)
    assert len(idx) == n and idx[0] == 0 and idx[-1] == N_SOURCE - 1
    assert np.all(np.diff(idx) > 0)
    if method == "human" and not cons and n >= 3:
        assert v.event in idx  # a person would show the moment quantity changes


def test_frame_selection_rejects_bad_counts(videos):
    with pytest.raises(ValueError, match="frame count"):
        select_frames(videos[0], 1, "uniform")
    with pytest.raises(ValueError, match="unknown frame selection"):
        select_frames(videos[0], 3, "random")


def test_answer_options_are_counterbalanced(videos):
    tt = trial_table(videos)
    assert len(tt) == len(videos) * 3 * 5 * 4
    slots = pd.crosstab(tt["truth"], [o.index(t) for o, t in zip(tt["order"], tt["truth"], strict=True)])
    for ans in ANSWERS:  # every answer sits in every slot equally often
        assert slots.loc[ans].nunique() == 1


# --- parsing and features -----------------------------------------------------------------

# Phrasings of real models, each with what it must parse to: a letter (the option in that slot)
# or an answer word (whatever the slots hold). The paper's rule-based step
# reads these before its LLM judges; ours must too, since the exported benchmark is for real VLMs.
PHRASINGS = [
    ("B", "B"), ("(C)", "C"), ("a.", "A"), ("B)", "B"), ("**B**", "B"),
    ("**B) more dots**", "B"), ("B. more dots", "B"), ("It's B", "B"),
    ("The answer is B.", "B"), ("Option B", "B"), ("I think it is B.", "B"),
    ("Answer: C", "C"), ("answer: c", "C"), ("Let me think... Answer: C", "C"),
    ("answer: (B) because more dots appear", "B"), ("The answer is B because more dots appear", "B"),
    ("The correct answer is (A) the same number of dots.", "A"), ("Final answer: **C**", "C"),
    ("I choose A.", "A"), ("I'd go with (C)", "C"), ("My answer would be: c", "C"),
    ("Answer: the same", "same"),
    ("The answer is B. Actually, wait: the answer is C.", "C"),  # the last explicit answer
    ("C. Because the glass is wider, it looks like less", "C"),
    # the article "a" after "answer" is not option A
    ("To answer a question like this… the same", "same"),
    ("To answer a question like this, compare the frames. The amount is the same.", "same"),
    ("The options are (A) the same, (B) more, (C) less. The liquid was only poured, so the answer is A.", "A"),
    ("Is it (A) the same number of dots (B) more dots (C) fewer dots? The same.", "same"),
    # answer words, with negations and idioms
    ("They are the same.", "same"), ("There are fewer dots now", "less"),
    ("The stick is not longer; it is the same length.", "same"), ("Not the same: there is more liquid now.", "more"),
    ("Neither more nor less: the same amount.", "same"), ("The amount did not change.", "same"),
    ("There are no more dots than before; it is unchanged.", "same"),
    ("The liquid is no longer in the tall glass, but it is the same amount.", "same"),
]
# Letters followed by their option's words in the slots (same, more, less): under another order the
# words contradict the letter, which must give FAIL rather than either reading.
WITH_WORDS = {"**B) more dots**", "B. more dots", "The correct answer is (A) the same number of dots."}
# What must stay unparseable: ambiguous, hedged, contradictory or empty replies (FAIL, counted wrong).
UNPARSEABLE = [
    "more or less the same", "", "I cannot tell", "It depends on the container.", "A or B", "(A) or (B)",
    "B) less",  # the letter says more, its words say less
    "A child might say there is less, but the amount is unchanged.",  # two answers in one sentence
    "To answer more precisely, it is the same.",  # "more" and "same": no explicit answer
]


@pytest.mark.parametrize("order", list(itertools.permutations(ANSWERS)))
@pytest.mark.parametrize("text, expected", PHRASINGS)
def test_parse_response_reads_real_model_phrasings(text, expected, order):
    want = order[LETTERS.index(expected)] if expected in LETTERS else expected
    if text in WITH_WORDS and want != ANSWERS[LETTERS.index(expected)]:
        want = FAIL
    assert parse_response(text, order) == want


@pytest.mark.parametrize("text", UNPARSEABLE)
def test_parse_response_leaves_ambiguous_replies_unparsed(text):
    assert parse_response(text, ("same", "more", "less")) == FAIL
    assert parse_response(text, ("less", "same", "more")) == FAIL


@pytest.mark.parametrize("order", list(itertools.permutations(ANSWERS)))
def test_parse_response_maps_letters_through_the_option_order(order):
    """A letter names the option in that slot of this question, in every common form."""
    for i, letter in enumerate(LETTERS):
        for form in (f"The answer is {letter}.", f"Option {letter}", f"I think it is {letter}.",
                     f"**{letter}**", f"Answer: ({letter.lower()})", f"{letter}"):
            assert parse_response(form, order) == order[i], form
        other = next(a for a in ANSWERS if a != order[i])
        assert parse_response(f"{letter}) {other}", order) == FAIL


def test_parse_response_rejects_bad_options():
    with pytest.raises(ValueError, match="permutation"):
        parse_response("A", ("same", "more"))


def test_frame_features_match_brute_force(videos):
    frames = np.stack([v.frames for v in videos[:10]])
    f = frame_features(frames)
    for i, j in itertools.product(range(10), range(0, N_SOURCE, 5)):
        ink = frames[i, j] < INK_THRESHOLD
        ys, xs = np.nonzero(ink)
        ref = [ndimage.label(ink)[1], ink.sum(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1,
               xs.max() + 1]
        np.testing.assert_array_equal(f[i, j], ref)
    assert np.all(frame_features(np.full((3, 8, 8), 255, np.uint8)) == 0)


# --- analysis against independent references ------------------------------------------------

def _fake_answers(seed=0, n_models=4):
    tt = trial_table(generate(2, 0), counts=(3, 7, 16))
    rng = np.random.default_rng(seed)
    parts = []
    for m in range(n_models):
        truth = tt["truth"].to_numpy()
        pred = np.where(rng.random(len(tt)) < 0.3 + 0.15 * m, truth, rng.choice(ANSWERS + (FAIL,), len(tt)))
        parts.append(tt.assign(model=f"m{m}", probe="video", pred=pred))
        probe = tt[(tt.n_frames == 7) & (tt.selection == "uniform")]
        for p in ("blank", "text"):
            parts.append(probe.assign(model=f"m{m}", probe=p, pred=rng.choice(ANSWERS, len(probe))))
    return pd.concat(parts, ignore_index=True)


def test_accuracy_table_matches_a_brute_force_count():
    ans = _fake_answers()
    table = analysis.accuracy_table(ans)
    for m, g in ans[ans.probe == "video"].groupby("model"):
        c = g[g.conserving]
        assert table.loc[m, "C"] == pytest.approx(np.mean(c.pred == c.truth))
        assert table.loc[m, "FAIL"] == pytest.approx(np.mean(g.pred == FAIL))
        both = []
        for _key, pair in g.groupby(["prop", "pair", "selection", "n_frames", "template"]):
            assert len(pair) == 2
            both.append(all(pair.pred == pair.truth))
        assert table.loc[m, "strict"] == pytest.approx(np.mean(both))


def test_cross_model_correlation_matches_scipy_and_numpy():
    t = pd.DataFrame({"C": [0.9, 0.8, 0.7, 0.95, 0.6], "NC": [0.1, 0.3, 0.35, 0.05, 0.5]})
    r, p = analysis.cross_model_correlation(t)
    assert r == pytest.approx(np.corrcoef(t.C, t.NC)[0, 1])
    assert p == pytest.approx(stats.pearsonr(t.C, t.NC).pvalue)
    with pytest.raises(ValueError, match="at least 3 models"):
        analysis.cross_model_correlation(t.iloc[:2])


def test_frame_count_anova_matches_the_closed_form():
    ans = _fake_answers(1, n_models=5)
    res = analysis.frame_count_anova(ans)
    y = analysis.accuracy_by(ans, "n_frames").to_numpy()  # subjects x conditions
    n, k = y.shape
    grand = y.mean()
    ss_cond = n * ((y.mean(0) - grand) ** 2).sum()
    ss_subj = k * ((y.mean(1) - grand) ** 2).sum()
    ss_err = ((y - grand) ** 2).sum() - ss_cond - ss_subj
    f = (ss_cond / (k - 1)) / (ss_err / ((n - 1) * (k - 1)))
    assert res["F"] == pytest.approx(f)
    assert res["p"] == pytest.approx(stats.f.sf(f, k - 1, (n - 1) * (k - 1)))
    assert (res["df1"], res["df2"]) == (k - 1, (n - 1) * (k - 1))


def test_frame_count_pairs_are_bonferroni_corrected_paired_t_tests():
    ans = _fake_answers(3, n_models=5)
    pairs = analysis.frame_count_pairs(ans)
    acc = analysis.accuracy_by(ans, "n_frames")
    assert len(pairs) == 3  # counts 3, 7, 16
    ref = stats.ttest_rel(acc[16], acc[3])
    row = pairs.set_index("frames").loc["16 vs 3"]
    assert row["t"] == pytest.approx(ref.statistic)
    assert row["p (Bonferroni)"] == pytest.approx(min(1.0, 3 * ref.pvalue))


def test_transitions_are_conditional_rates_matching_counts():
    ans = _fake_answers(2)
    tab = analysis.transitions(ans, "blank")
    j = analysis._probe_join(ans, "blank")
    for a in ANSWERS:
        rows = j[j.pred_video == a]
        if len(rows):
            assert tab.loc[a].sum() == pytest.approx(1.0)
            assert tab.loc[a, "same"] == pytest.approx(np.mean(rows.pred_probe == "same"))


def test_chance_levels_match_enumerating_guesses():
    for k in (2, 3, 4):
        ch = analysis.chance_levels(k)
        guesses = list(itertools.product(range(k), repeat=2))  # two items, truth = option 0 each
        assert ch["strict pair"] == pytest.approx(sum(g == (0, 0) for g in guesses) / len(guesses))
        assert ch["item"] == pytest.approx(sum(g[0] == 0 for g in guesses) / len(guesses))
    with pytest.raises(ValueError):
        analysis.chance_levels(1)


def test_always_same_scores_half_mean_and_zero_strict():
    tt = trial_table(generate(2, 0), counts=(3,))
    t = analysis.accuracy_table(tt.assign(model="s", probe="video", pred="same")).loc["s"]
    assert (t.C, t.NC, t["mean"], t.strict) == (1.0, 0.0, 0.5, 0.0)


# --- stand-ins ----------------------------------------------------------------------------

def test_text_only_probe_follows_prior_and_slot_bias():
    orders = list(itertools.permutations(ANSWERS))
    flat = StandIn(StandInSpec("flat", 0.1, 1 / 3))
    flat.prior = np.full(3, 1 / 3)
    assert sorted(flat.text_only(orders)) == sorted(ANSWERS * 2)  # slot A wins: each answer twice
    biased = StandIn(StandInSpec("b", 0.1, 0.8))
    biased.prior = np.array([0.8, 0.1, 0.1])
    assert set(biased.text_only(orders)) == {"same"}
    with pytest.raises(ValueError):
        StandInSpec("bad", -1.0, 0.5)


# --- export -> answer -> score round trip, and bad input -----------------------------------------

@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    n = bench.export(d, n_pairs=2, seed=4, counts=(3, 7), selections=("uniform", "human"))
    return d, n


def test_export_writes_frames_and_questions(exported):
    d, n = exported
    assert n["videos"] == 16 and len(list((d / "frames").glob("*/*.png"))) == 16 * N_SOURCE
    qs = [json.loads(x) for x in (d / "questions.jsonl").read_text().splitlines()]
    assert len(qs) == n["questions"] == 16 * 2 * 2 * 4 + 16 * 4 * 2
    assert all("truth" not in q and "conserving" not in q for q in qs)  # no answers in the questions
    assert all((d / p).is_file() for q in qs for p in q["images"])


def test_round_trip_a_model_through_png_files_scores_like_the_in_memory_path(exported, tmp_path):
    d, _ = exported
    spec = StandInSpec("sharp", sigma=0.0, p_same=0.5)
    videos = generate(2, 4)
    tt = trial_table(videos, counts=(3, 7), selections=("uniform", "human"), templates=("direct",))
    feats = frame_features(np.stack([v.frames for v in videos]))
    x, y = [], []
    from minirepro.papers.conservationbench.models import encode
    for (_, k), g in tt.groupby(["selection", "n_frames"]):
        f = np.log1p(feats[g.video.to_numpy()[:, None], np.array(g.frames.tolist())])
        x.append(encode(f, np.full(len(g), k), g.prop.tolist(), False))
        y.append(g.truth.to_numpy())
    model = StandIn(spec).fit(np.concatenate(x), np.concatenate(y))
    trials = bench.load_trials(d, probe="video")
    out = tmp_path / "answers.jsonl"
    bench.answer(model, trials, out)
    bench.answer(ConstantModel("same"), trials, tmp_path / "same.jsonl")
    with open(out, "a") as fh:
        fh.write((tmp_path / "same.jsonl").read_text())
    res = bench.score(out, d / "answer_key.jsonl")
    table = res["table"]
    assert table.loc["always-same", "C"] == 1.0 and table.loc["always-same", "strict"] == 0.0
    # the same model on the in-memory frames (sigma 0: no noise) gives the same answers
    parsed = bench.load_answers(out, d / "answer_key.jsonl").set_index("qid")
    for tr in trials:
        vid = next(v for v in videos if v.video_id == tr.qid.split("/")[0])
        idx = select_frames(vid, len(tr.images), tr.qid.split("/")[1])
        assert all(np.array_equal(a, vid.frames[t]) for a, t in zip(tr.images, idx, strict=True))
        direct = model.decide(frame_features(vid.frames[idx])[None], np.array([len(idx)]), [vid.prop],
                              [tr.options], np.random.default_rng(0))[0]
        assert parsed.loc[tr.qid].query("model == 'sharp'")["pred"].item() == direct
    assert table.loc["sharp", "mean"] > 0.9  # a noiseless model reads the quantities


def test_bad_answers_name_the_line(exported, tmp_path, capsys):
    d, _ = exported
    qid = json.loads((d / "questions.jsonl").read_text().splitlines()[0])["id"]
    good = json.dumps({"id": qid, "model": "m", "response": "A"})
    cases = {"bad.jsonl": (good + "\n{not json\n", r"bad.jsonl:2: not valid JSON"),
             "missing.jsonl": (good + "\n" + json.dumps({"id": qid}) + "\n", r"missing.jsonl:2: missing field"),
             "unknown.jsonl": (json.dumps({"id": "nope", "model": "m", "response": "A"}) + "\n",
                               r"unknown.jsonl:1: unknown question id 'nope'"),
             "prop.jsonl": (json.dumps({"id": qid, "model": "m", "response": "A", "property": "weight"})
                            + "\n", r"prop.jsonl:1: unknown property 'weight'")}
    for name, (text, msg) in cases.items():
        p = tmp_path / name
        p.write_text(text)
        with pytest.raises(bench.BenchError, match=msg):
            bench.load_answers(p, d / "answer_key.jsonl")
        assert cli_main(["score", str(p), "--key", str(d / "answer_key.jsonl")]) == 2
        assert msg.replace("\\", "").split(":")[1] in capsys.readouterr().err
    key = tmp_path / "answer_key.jsonl"
    lines = (d / "answer_key.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    row["property"] = "mass"
    key.write_text("\n".join([lines[0], json.dumps(row)]) + "\n")
    with pytest.raises(bench.BenchError, match=r"answer_key.jsonl:2: unknown property 'mass'"):
        bench.load_answers(tmp_path / "bad.jsonl", key)


def test_cli_export_answer_score(tmp_path, capsys):
    d = tmp_path / "b"
    assert cli_main(["export", str(d), "--pairs", "1", "--no-probes"]) == 0
    assert cli_main(["answer", str(d), "--model", "always-same", "--out", str(d / "a.jsonl")]) == 0
    assert cli_main(["score", str(d / "a.jsonl"), "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "always-same" in out and json.loads((tmp_path / "s.json").read_text())["table"]
    assert cli_main(["score", str(tmp_path / "nothing.jsonl")]) == 2
    assert cli_main(["export", str(d), "--pairs", "0"]) == 2
    assert cli_main([]) == 2


def test_top_level_cli_hands_over():
    from minirepro.cli import main

    assert main(["conservationbench", "score", "/nonexistent/answers.jsonl"]) == 2


# --- the transformers adapter on a tiny LLaVA built here (no download) -----------------------------

def test_transformers_adapter_on_a_tiny_llava(tmp_path, exported):
    from minirepro.papers.conservationbench.hf import TransformersVLM, build_tiny_llava

    folder = build_tiny_llava(tmp_path / "tiny-llava")
    vlm = TransformersVLM(folder, max_new_tokens=4)
    d, _ = exported
    trials = [t for t in bench.load_trials(d) if t.qid.endswith(("/3/direct", "/3/direct/text"))][:3]
    trials.append(next(t for t in bench.load_trials(d) if t.qid.endswith("/text")))
    text = vlm.build_text(trials[0])
    inputs = vlm.processor(text=text, images=[np.stack([im] * 3, -1) for im in trials[0].images],
                           return_tensors="pt")
    image_id = vlm.processor.tokenizer.convert_tokens_to_ids("<image>")
    assert int((inputs["input_ids"] == image_id).sum()) == 3 * 17  # 3 frames x (16 patches + CLS)
    a, b = vlm.respond(trials), vlm.respond(trials)
    assert a == b and len(a) == len(trials) and all(isinstance(x, str) for x in a)
    assert all(parse_response(x, t.options) in ANSWERS + (FAIL,) for x, t in zip(a, trials, strict=True))
    vlm.processor.chat_template = ("{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == "
                                   "'image' %}<image> {% else %}{{ c['text'] }}{% endif %}{% endfor %}"
                                   "{% endfor %}")
    assert vlm.build_text(trials[0]).count("<image>") == 3
    assert isinstance(vlm.respond(trials[:1])[0], str)


def test_model_protocol_is_satisfied():
    from minirepro.papers.conservationbench.models import Model, RandomModel

    for m in (ConstantModel(), RandomModel(), StandIn(StandInSpec("x", 0.1, 0.5))):
        assert isinstance(m, Model)
    tr = Trial("q", "?", (), ("same", "more", "less"), "number")
    assert RandomModel(1).respond([tr]) == RandomModel(1).respond([tr])
    assert RandomModel(1).respond([tr])[0] in LETTERS
    assert FRAME_COUNTS == (3, 5, 7, 9, 16)
