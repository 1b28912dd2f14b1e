"""A book build's ledger: the stored records, and this build's verdicts beside them."""

from __future__ import annotations

import json
import subprocess
import sys

from minirepro.book import apply_repository
from minirepro.claims import build_results, ledger


def test_a_chapter_kernel_writes_its_record_into_the_build_folder(tmp_path):
    chapter = tmp_path / "notebooks" / "07-toy"
    chapter.mkdir(parents=True)
    code = ("from minirepro.claims import results\n"
            "from minirepro.claims.rules import Threshold\n"
            "results.declare_claim('c1', 'a claim', '-', Threshold('x', 1.0, partly_bound=2.0))\n"
            "results.claims()[0].settle(values=[1.5])\n")
    env = {"MINIREPRO_RESULTS_DIR": str(tmp_path / "results"), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], cwd=chapter, env=env, check=True)
    rec = json.loads((tmp_path / "results" / "07-toy.json").read_text())
    assert [c["verdict"] for c in rec["claims"]] == ["partly"] and rec["seconds"] >= 0
    # outside a chapter's folder (the ledger page, a script) nothing is written
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True)
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["07-toy.json"]


def test_a_build_at_the_records_scale_marks_a_verdict_that_differs(tmp_path):
    stored = ledger.load()
    entry = next(e for e in stored if e.get("claims"))
    # the build's single run gives each claim its recorded run's verdict (not the pooled one)
    built = {"claims": [{**c, "verdict": c.get("run_verdict", c["verdict"])} for c in entry["claims"]],
             "metrics": {}, "seconds": 3.0}
    flipped = built["claims"][0]
    run_verdict = entry["claims"][0].get("run_verdict", entry["claims"][0]["verdict"])
    flipped["verdict"] = "partly" if run_verdict != "partly" else "reproduced"
    (tmp_path / f"{entry['slug']}.json").write_text(json.dumps(built))
    with build_results.current_build(tmp_path):
        os_scale = __import__("os").environ.get("MINIREPRO_SCALE")
        entries = build_results.load_built(folder=tmp_path, scale="book")
        smoke = build_results.load_built(folder=tmp_path, scale="smoke")
    assert ledger.load is build_results._original_load  # restored
    assert os_scale is None or os_scale
    assert build_results.differences(entries) == [(entry["chapter"], flipped["id"], flipped["verdict"], run_verdict)]
    # a smoke build's single runs are not the book's evidence: nothing is compared
    assert build_results.differences(smoke) == []
    assert next(e for e in smoke if e["chapter"] == entry["chapter"])["build_scale"] == "smoke"


def test_the_repository_is_one_setting_and_unset_hides_the_buttons():
    unset = apply_repository({"repository": {"url": ""}, "html": {"use_repository_button": True},
                              "launch_buttons": {"binderhub_url": "https://mybinder.org",
                                                 "colab_url": "https://colab.research.google.com"}})
    assert not unset["html"]["use_repository_button"] and not unset["html"]["use_issues_button"]
    assert unset["launch_buttons"]["binderhub_url"] == "" == unset["launch_buttons"]["colab_url"]
    on = apply_repository({"repository": {"url": ""}}, "https://example.org/r")
    assert on["repository"]["url"] == "https://example.org/r" and on["html"]["use_issues_button"]
    assert on["launch_buttons"]["colab_url"] == ""  # Colab cannot open the .md chapters


def test_the_claims_table_shows_long_cells_in_full_on_the_page():
    from minirepro.claims import results

    results.reset()
    long = "a measured value that is much longer than fifty characters, " * 3
    from minirepro.claims.rules import Threshold

    results.declare_claim("c-long", "a claim " * 20, "-", Threshold("a metric " * 10, 1.0))
    results.claims()[0].settle(values=[0.5], note=long)
    try:
        html = results.claims_table()._repr_html_()
        assert long.strip() in html and "…" not in html and "..." not in html
        # the rule is there in full, behind a toggle under the claim; no index column
        rule = html.split("<summary>rule</summary>")[1].split("</details>")[0]
        assert ("a metric " * 10).strip() in rule
        assert "<th></th>" not in html and html.count("<th>") == 5
    finally:
        results.reset()
