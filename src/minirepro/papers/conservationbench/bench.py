"""Export the benchmark for any VLM harness, answer it with a :class:`Model`, score the answers.

Layout of an exported folder::

    DIR/frames/<video_id>/<t:02d>.png   every source frame, 64x64 grey PNG
    DIR/blank.png                        the white image of the blank-image probe
    DIR/questions.jsonl                  one question per line (no answers)
    DIR/answer_key.jsonl                 id -> truth and condition (keep it away from the model)
    DIR/manifest.json                    seed, sizes, version

A question line: ``{"id", "prompt", "images": [paths relative to DIR], "options":
{"A": "same", ...}, "property", "probe"}``. An answers line, written by the model's
harness: ``{"id": ..., "model": ..., "response": "<free text>"}``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from minirepro.papers.conservationbench import analysis
from minirepro.papers.conservationbench.conditions import (
    FRAME_COUNTS,
    LETTERS,
    SELECTIONS,
    TEMPLATES,
    prompt,
    trial_table,
)
from minirepro.papers.conservationbench.generator import (
    ANSWERS,
    N_SOURCE,
    PROPERTIES,
    SIZE,
    generate,
)
from minirepro.papers.conservationbench.models import Model, Trial, parse_response

VERSION = 1


class BenchError(ValueError):
    """Bad benchmark input: a malformed line, an unknown id or property."""


def _question_rows(trials: pd.DataFrame, probes: bool) -> Iterable[dict]:
    for r in trials.itertuples(index=False):
        frames = [f"frames/{r.video_id}/{t:02d}.png" for t in r.frames]
        base = {"property": r.prop, "options": dict(zip(LETTERS, r.order, strict=True))}
        key = {"video_id": r.video_id, "property": r.prop, "pair": int(r.pair),
               "conserving": bool(r.conserving), "truth": r.truth, "selection": r.selection,
               "n_frames": int(r.n_frames), "template": r.template}
        yield ({"id": r.qid, "prompt": prompt(r.prop, r.template, r.n_frames, r.order), "images": frames,
                "probe": "video", **base}, {"id": r.qid, "probe": "video", **key})
        if probes and r.n_frames == analysis.PROBE_FRAMES and r.selection == analysis.PROBE_SELECTION:
            yield ({"id": r.qid + "/blank", "prompt": prompt(r.prop, r.template, r.n_frames, r.order),
                    "images": ["blank.png"] * r.n_frames, "probe": "blank", **base},
                   {"id": r.qid + "/blank", "probe": "blank", **key})
            yield ({"id": r.qid + "/text", "prompt": prompt(r.prop, r.template, 0, r.order), "images": [],
                    "probe": "text", **base}, {"id": r.qid + "/text", "probe": "text", **key})


def export(folder: str | Path, n_pairs: int = 48, seed: int = 0, counts: tuple[int, ...] = FRAME_COUNTS,
           selections: tuple[str, ...] = SELECTIONS, templates: tuple[str, ...] = TEMPLATES,
           probes: bool = True) -> dict[str, int]:
    """§3 [reconstruction]: write the benchmark to ``folder``; returns counts of what it wrote."""
    from PIL import Image

    folder = Path(folder)
    videos = generate(n_pairs, seed)
    trials = trial_table(videos, counts, selections, templates)
    for v in videos:
        d = folder / "frames" / v.video_id
        d.mkdir(parents=True, exist_ok=True)
        for t in range(N_SOURCE):
            Image.fromarray(v.frames[t]).save(d / f"{t:02d}.png")
    Image.fromarray(np.full((SIZE, SIZE), 255, dtype=np.uint8)).save(folder / "blank.png")
    n = 0
    with open(folder / "questions.jsonl", "w") as fq, open(folder / "answer_key.jsonl", "w") as fk:
        for q, k in _question_rows(trials, probes):
            fq.write(json.dumps(q) + "\n")
            fk.write(json.dumps(k) + "\n")
            n += 1
    manifest = {"version": VERSION, "seed": seed, "n_pairs": n_pairs, "counts": list(counts),
                "selections": list(selections), "templates": list(templates), "probes": probes,
                "videos": len(videos), "questions": n}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return {"videos": len(videos), "frames": len(videos) * N_SOURCE, "questions": n}


def read_jsonl(path: str | Path, required: tuple[str, ...]) -> list[dict]:
    """Lines of a JSONL file as dicts; a malformed line raises ``BenchError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"{path}: no such file")
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{path}:{i}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise BenchError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
        missing = [k for k in required if k not in row]
        if missing:
            raise BenchError(f"{path}:{i}: missing field(s) {', '.join(missing)}")
        if "property" in row and row["property"] not in PROPERTIES:
            raise BenchError(f"{path}:{i}: unknown property {row['property']!r}; "
                             f"expected one of {', '.join(PROPERTIES)}")
        row["_line"] = i
        rows.append(row)
    return rows


def load_trials(folder: str | Path, limit: int | None = None, probe: str | None = None) -> list[Trial]:
    """The exported questions of ``folder`` as :class:`Trial` objects with their images."""
    from PIL import Image

    folder = Path(folder)
    qs = read_jsonl(folder / "questions.jsonl", ("id", "prompt", "images", "options", "property"))
    out, cache = [], {}
    for q in qs:
        if probe is not None and q.get("probe") != probe:
            continue
        imgs = []
        for p in q["images"]:
            if p not in cache:
                cache[p] = np.asarray(Image.open(folder / p).convert("L"))
            imgs.append(cache[p])
        out.append(Trial(q["id"], q["prompt"], tuple(imgs), tuple(q["options"][L] for L in LETTERS),
                         q["property"]))
        if limit is not None and len(out) >= limit:
            break
    return out


def answer(model: Model, trials: list[Trial], out: str | Path, batch: int = 256) -> int:
    """Run ``model`` on ``trials`` and write its answers JSONL; returns the number written."""
    n = 0
    with open(out, "w") as fh:
        for i in range(0, len(trials), batch):
            chunk = trials[i:i + batch]
            for tr, text in zip(chunk, model.respond(chunk), strict=True):
                fh.write(json.dumps({"id": tr.qid, "model": model.name, "response": str(text)}) + "\n")
                n += 1
    return n


def load_answers(answers: str | Path, key: str | Path) -> pd.DataFrame:
    """Join an answers JSONL with the answer key: the long table the analysis takes.

    Every answer line needs ``id``, ``model`` and ``response``; an id that is not in the
    key, a malformed line or an unknown property raises ``BenchError`` naming the line.
    """
    keys = {k["id"]: k for k in read_jsonl(key, ("id", "probe", "property", "pair", "conserving", "truth",
                                                 "selection", "n_frames", "template"))}
    qpath = Path(key).with_name("questions.jsonl")
    options = {}
    if qpath.is_file():
        options = {q["id"]: tuple(q["options"][L] for L in LETTERS)
                   for q in read_jsonl(qpath, ("id", "options"))}
    rows, seen = [], set()
    for a in read_jsonl(answers, ("id", "model", "response")):
        k = keys.get(a["id"])
        if k is None:
            raise BenchError(f"{answers}:{a['_line']}: unknown question id {a['id']!r} "
                             f"(not in {key})")
        if (a["model"], a["id"]) in seen:
            raise BenchError(f"{answers}:{a['_line']}: a second answer of {a['model']!r} to {a['id']!r}")
        seen.add((a["model"], a["id"]))
        opts = options.get(a["id"], ANSWERS)
        rows.append({"qid": a["id"], "model": str(a["model"]), "prop": k["property"], "pair": k["pair"],
                     "conserving": k["conserving"], "truth": k["truth"], "selection": k["selection"],
                     "n_frames": k["n_frames"], "template": k["template"], "probe": k["probe"],
                     "pred": parse_response(str(a["response"]), opts)})
    if not rows:
        raise BenchError(f"{answers}: no answers")
    return pd.DataFrame(rows)


def score(answers: str | Path, key: str | Path) -> dict:
    """The full analysis of an answers file: tables and tests (whatever the data allow)."""
    ans = load_answers(answers, key)
    out: dict = {"chance": analysis.chance_levels(3), "table": analysis.accuracy_table(ans),
                 "by_property": analysis.accuracy_by(ans, "prop"),
                 "by_frames": analysis.accuracy_by(ans, "n_frames")}
    n_models = ans["model"].nunique()
    if n_models >= 3:
        out["correlation"] = analysis.cross_model_correlation(out["table"])
    if n_models >= 2 and ans.loc[ans["probe"] == "video", "n_frames"].nunique() >= 2:
        out["anova"] = analysis.frame_count_anova(ans)
        out["frame_pairs"] = analysis.frame_count_pairs(ans)
    for probe in ("blank", "text"):
        if (ans["probe"] == probe).any():
            out[f"transitions_{probe}"] = analysis.transitions(ans, probe)
            out[f"same_share_{probe}"] = analysis.same_share(ans, probe)
    return out


def report(result: dict) -> str:
    """The score as text for the terminal."""
    ch = result["chance"]
    lines = [f"chance: item {ch['item']:.3f}, strict pair {ch['strict pair']:.3f} "
             "(always 'same': C 1, NC 0, mean 0.5, strict 0)", "",
             (100 * result["table"]).round(1).drop(columns="n").to_string(), "",
             "accuracy by property (%):", (100 * result["by_property"]).round(1).to_string(), "",
             "accuracy by frame count (%):", (100 * result["by_frames"]).round(1).to_string()]
    if "correlation" in result:
        r, p = result["correlation"]
        lines += ["", f"cross-model correlation of C and NC accuracy: r = {r:.3f} (p = {p:.3g})"]
    if "anova" in result:
        a = result["anova"]
        lines += [f"frame count, repeated-measures ANOVA: F({a['df1']:.0f}, {a['df2']:.0f}) = "
                  f"{a['F']:.2f}, p = {a['p']:.3g}", "paired t tests across models, Bonferroni-corrected:",
                  result["frame_pairs"].round(3).to_string(index=False)]
    for probe in ("blank", "text"):
        if f"transitions_{probe}" in result:
            lines += ["", f"{probe} probe: P(answer | answer with the video), conditional rates:",
                      result[f"transitions_{probe}"].dropna(how="all").round(2).to_string()]
    return "\n".join(lines)
