"""The ledger as the book shows it: a summary a reader takes in at once, verdict badges,
and one compact table per chapter whose rows link to the chapter's claim.

Everything here renders records (:mod:`minirepro.claims.ledger`) as HTML; the page
(``book/ledger.md``), the chapters' verdict boxes and their claims tables
(:func:`minirepro.claims.results.claims_table`, drawn by :func:`claims_table_html`) call it. Classes are styled by ``book/_static/minirepro.css``.
"""

from __future__ import annotations

from html import escape
from typing import Any

from minirepro.claims.rules import VERDICTS
from minirepro.claims.tables import full_record, power_value, replication_text
from minirepro.claims.why import CAUSES

SHORT = {"reproduced": "reproduced", "partly": "partly", "not reproduced": "not reproduced",
         "not testable at this scale": "not testable"}
CSS = {"reproduced": "rep", "partly": "part", "not reproduced": "notrep",
       "not testable at this scale": "nottest"}


def badge(verdict: str | None, fragile: bool = False, title: str = "") -> str:
    """A verdict as a coloured badge with its text (and a "fragile" mark)."""
    v = verdict or "(pending)"
    cls = CSS.get(v, "pending")
    t = f' title="{escape(title)}"' if title else ""
    out = f'<span class="mr-badge mr-{cls}"{t}>{escape(SHORT.get(v, v))}</span>'
    if fragile:
        out += ' <span class="mr-fragile" title="more than one replication disagrees">fragile</span>'
    return out


def anchor(claim_id: str) -> str:
    """The HTML id of a claim's row on its chapter page."""
    return "claim-" + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in claim_id)


def chapter_href(entry: dict[str, Any], claim_id: str | None = None) -> str:
    """The chapter page's address relative to the ledger page (``book/ledger.html``)."""
    href = f"../notebooks/{entry['slug']}/{entry['chapter']}.html"
    return href + (f"#{anchor(claim_id)}" if claim_id else "")


def power_text(claim: dict[str, Any]) -> str:
    p = claim.get("power")
    if not isinstance(p, dict):
        return "-" if claim.get("kind", "paper") == "check" else "?"
    if p.get("value") is None:
        return f'<span title="{escape(p.get("why") or "")}">n/a</span>'
    return f'<span title="{escape(p.get("design") or "")}">{p["value"]:.2f}</span>'


def units_text(claim: dict[str, Any]) -> str:
    n = claim.get("n_units")
    if n is None:
        return "-"
    unit = claim.get("unit", "seed")
    return f"{n}&nbsp;{escape(unit)}{'s' if n != 1 and not unit.endswith('s') else ''}"


def counts_of(claims: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(1 for c in claims if c.get("verdict") == v) for v in VERDICTS}


def summary_html(entries: list[dict[str, Any]], short_names: dict[str, str]) -> str:
    """Per chapter: the paper's claims by verdict, fragile and underpowered ones, checks passed."""
    head = ("<tr><th>chapter</th><th>claims</th>"
            + "".join(f"<th>{badge(v)}</th>" for v in VERDICTS)
            + "<th>fragile</th><th>checks passed</th></tr>")
    body, tot = [], {v: 0 for v in VERDICTS}
    n_frag = n_paper = n_checks = n_passed = 0
    for e in entries:
        paper = [c for c in e["claims"] if c.get("kind", "paper") == "paper"]
        checks = [c for c in e["claims"] if c.get("kind", "paper") == "check"]
        cnt = counts_of(paper)
        frag = sum(bool(c.get("fragile")) for c in e["claims"])
        passed = sum(c.get("verdict") == VERDICTS[0] for c in checks)
        for v in VERDICTS:
            tot[v] += cnt[v]
        n_frag, n_paper, n_checks, n_passed = n_frag + frag, n_paper + len(paper), n_checks + len(checks), n_passed + passed
        name = escape(short_names.get(e["chapter"], e["title"]))
        link = f'<a href="{chapter_href(e)}">{name}</a>' if not e.get("missing") else name
        body.append(f"<tr><td>{link}</td><td>{len(paper)}</td>"
                    + "".join(f"<td>{cnt[v] or ''}</td>" for v in VERDICTS)
                    + f"<td>{frag or ''}</td><td>{passed}/{len(checks)}</td></tr>")
    foot = (f"<tr class='mr-total'><td>all</td><td>{n_paper}</td>"
            + "".join(f"<td>{tot[v]}</td>" for v in VERDICTS)
            + f"<td>{n_frag}</td><td>{n_passed}/{n_checks}</td></tr>")
    return (f'<table class="mr-ledger mr-summary"><thead>{head}</thead><tbody>{"".join(body)}{foot}'
            "</tbody></table>")


def claims_rows_html(entry: dict[str, Any], claims: list[dict[str, Any]], link: bool = True) -> str:
    """One row per claim: the claim (its measurement, the paper's figure and the rule behind a
    toggle), the verdict badge, units, power and replications."""
    rows = []
    for c in claims:
        title = escape(c["statement"])
        if link and not entry.get("missing"):
            title = f'<a href="{chapter_href(entry, c["id"])}">{title}</a>'
        more = (f'<details class="mr-more"><summary>measured</summary>'
                f'<p><b>here:</b> {escape(str(c.get("measured")))}</p>'
                f'<p><b>paper:</b> {escape(str(c.get("paper_value")))}</p>'
                + (f'<p><b>this run alone:</b> {escape(str(c.get("run_verdict")))}</p>'
                   if c.get("run_verdict") not in (None, c.get("verdict")) else "")
                + (f'<p><b>recorded before the withdrawal:</b> {escape(str(c["recorded_verdict"]))}</p>'
                   if c.get("recorded_verdict") else "")
                + (f'<p><b>why:</b> {escape(str(c["why"].get("evidence")))}</p>' if c.get("why") else "")
                + f'<p><b>rule:</b> {escape(str(c.get("rule")))}</p></details>')
        cause = (c.get("why") or {}).get("cause")
        extra = f'<br><span class="mr-cause mr-cause-{cause}">why: {cause}</span>' if cause else ""
        full = full_record(entry, c["id"])
        if full:
            extra += f'<br><small>at full scale: {escape(str(full.get("verdict")))}</small>'
        rows.append(f'<tr data-cause="{cause or ""}"><td>{title}{more}</td>'
                    f'<td>{badge(c.get("verdict"), bool(c.get("fragile")))}{extra}</td>'
                    f"<td>{units_text(c)}</td><td>{power_text(c)}</td>"
                    f"<td>{escape(replication_text(entry, c))}</td></tr>")
    head = "<tr><th>claim</th><th>verdict</th><th>units</th><th>power</th><th>replications</th></tr>"
    return f'<table class="mr-ledger mr-claims"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>'


def ledger_html(entries: list[dict[str, Any]], short_names: dict[str, str],
                build_note: str = "") -> str:
    """The ledger page's body: the headline counts, a note on this build, the summary per
    chapter, then one compact table per chapter (the paper's claims, then the checks)."""
    paper = [c for e in entries for c in e["claims"] if c.get("kind", "paper") == "paper"]
    checks = [c for e in entries for c in e["claims"] if c.get("kind", "paper") == "check"]
    cnt = counts_of(paper)
    frag = sum(bool(c.get("fragile")) for e in entries for c in e["claims"])
    causes = {k: sum((c.get("why") or {}).get("cause") == k for c in paper) for k in CAUSES}
    head = (f'<p class="mr-headline"><b>{len(paper)} claims of the papers:</b> '
            + ", ".join(f"{badge(v)} {cnt[v]}" for v in VERDICTS)
            + ". Of those not reproduced or not testable, by cause: "
            + ", ".join(f"{n} {k}" for k, n in causes.items() if n)
            + f". <b>{frag}</b> verdicts are fragile (more than one replication disagrees). "
            f"<b>{len(checks)} checks of the miniature</b>, "
            f"{sum(c.get('verdict') == VERDICTS[0] for c in checks)} passed.</p>")
    options = "".join(f'<option value="{k}">{k} ({n})</option>' for k, n in causes.items() if n)
    filt = ('<p class="mr-filter"><label>Show the claims whose cause is '
            f'<select id="mr-cause-filter"><option value="">any (all claims)</option>{options}</select>'
            "</label></p><script>document.addEventListener('DOMContentLoaded',function(){"
            "var s=document.getElementById('mr-cause-filter');if(!s)return;s.addEventListener('change',"
            "function(){document.querySelectorAll('table.mr-claims tbody tr').forEach(function(r){"
            "r.style.display=(!s.value||r.dataset.cause===s.value)?'':'none';});});});</script>")
    out = [head, filt]
    if build_note:
        out.append(f'<p class="mr-note">{build_note}</p>')
    out.append(summary_html(entries, short_names))
    for e in entries:
        name = escape(short_names.get(e["chapter"], e["title"]))
        out.append(f'<h3 class="mr-chapter" id="ledger-{escape(e["chapter"])}">'
                   f'<a href="{chapter_href(e)}">{name}</a>: {escape(e["title"])}</h3>')
        if e.get("missing"):
            out.append("<p>No ledger entry yet.</p>")
            continue
        stale = "" if e.get("current") else " The chapter changed since: its entry is out of date."
        if e.get("withdrawn"):
            stale = (f" <b>Withdrawn:</b> {escape(e['withdrawn']['why'])} Its verdicts are shown as not "
                     "testable until it runs again; the recorded ones are under each claim.")
        rep = e.get("replication") or {}
        reps = (f"; replications over {escape(str(rep.get('param')))} at {rep.get('values')}"
                + ("" if rep.get("current", True) else " (older notebook: not pooled)") if rep else "")
        cpu = e.get("cpu_seconds")
        out.append(f'<p class="mr-meta">Recorded at {escape(str(e.get("scale", "book")))} scale in '
                   f'{float(e.get("seconds") or 0):.0f} s' + (f" (CPU {cpu:.0f} s)" if cpu else "")
                   + f', {escape(str(e.get("date", "")))}{reps}.{stale}</p>')
        for kind, heading in (("paper", "The paper's claims"), ("check", "Checks of the miniature")):
            claims = [c for c in e["claims"] if c.get("kind", "paper") == kind]
            if claims:
                out.append(f'<p class="mr-kind">{heading}</p>' + claims_rows_html(e, claims))
    return "\n".join(out)


def claims_table_html(table, entry: dict[str, Any]) -> str:
    """The claims table as the page shows it: every cell in full, no index column, the rule
    behind a "rule" toggle under each claim, this run's verdict and the book's pooled one
    (from ``entry``, the chapter's current ledger entry, ``{}`` when it has none)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in ("claim", "paper", "measured here", "this run",
                                                      "the book's verdict"))
    rows = []
    for _, r in table.iterrows():
        claim = (f"{escape(str(r['claim']))}<details class=\"minirepro-rule\"><summary>rule</summary>"
                 f"{escape(str(r['rule']))}</details>")
        book = r["book"]
        if isinstance(book, dict):
            cause = book.get("why") or {}
            full = full_record(entry, book.get("id"))
            book_cell = (f"{badge(book.get('verdict'), bool(book.get('fragile')))}<br>"
                         f"<small>{units_text(book)}; power {power_text(book)}; "
                         f"replications {escape(replication_text(entry, book))}</small>"
                         + (f"<br><small><b>why: {escape(cause['cause'])}</b>: {escape(cause['evidence'])}</small>"
                            if cause else "")
                         + (f"<br><small>at full scale: {escape(str(full.get('verdict')))}</small>" if full else ""))
        else:
            book_cell = "<small>no current record</small>"
        cells = [claim, escape(str(r["paper"])), escape(str(r["measured here"])), badge(str(r["verdict"])),
                 book_cell]
        rows.append(f'<tr id="{anchor(str(r["id"]))}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<table class="dataframe minirepro-claims"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


# ----------------------------------------------------------------- a chapter's verdict box
def _tally(claim: dict[str, Any]) -> str:
    """``"4/5 reproduced, 1/5 partly"`` (short verdict names, most frequent first), or ``"-"``."""
    counts, k = claim.get("replications") or {}, claim.get("k") or 0
    if not k or not counts:
        return "-"
    return ", ".join(f"{n}/{k}&nbsp;{escape(SHORT.get(v, v)).replace(' ', '&nbsp;')}"
                     for v, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


def _replications_note(entry: dict[str, Any]) -> str:
    """Once per box: what the replications varied, or why there are none."""
    rep = entry.get("replication") or {}
    if entry.get("withdrawn"):
        return ""
    if entry.get("robustness_fixed"):
        return f"Not re-seeded: {escape(str(entry['robustness_fixed']))}."
    if not rep:
        return "No replications were run."
    if not rep.get("current", True):
        return "Its replications ran an older notebook and are not pooled."
    param = rep.get("param") or "seed"
    k = len(rep.get("values") or []) or (entry.get("plan") or {}).get("k") or "its"
    return (f"Each verdict is decided on the recorded run and {k} replications (over "
            f"<code>{escape(str(param))}</code>) pooled; the last column gives each replication's own verdict.")


def _state_note(entry: dict[str, Any], name: str, cmd: str) -> tuple[str, str]:
    """``(state, note)``: ``"withdrawn"``, ``"stale"`` or ``"current"``, and in words (for the
    first two) what the record waits for."""
    if entry.get("withdrawn"):
        w = entry["withdrawn"]
        missing = w.get("missing") if w.get("missing") is not None else w.get("needs", [])
        builds = ", ".join(f"<code>minirepro artifacts build {escape(n)}</code>" for n in missing)
        wait = (f"They wait for {'the artifact' if len(missing) == 1 else 'the artifacts'} "
                f"{', '.join(f'<code>{escape(n)}</code>' for n in missing)} to be built ({builds}), "
                f"then for the chapter to run again ({cmd})." if missing else
                f"What they need is built now: they wait for the chapter to run again ({cmd}).")
        return "withdrawn", (f'<p class="mr-vstate"><b>These verdicts are withdrawn:</b> '
                             f'{escape(str(w.get("why", "")))} {wait} Until then every claim reads '
                             "<i>not testable</i>; the verdict recorded before is shown beside it, "
                             "for the record.</p>")
    if not entry.get("current"):
        when = f" ({escape(str(entry['date']))})" if entry.get("date") else ""
        return "stale", (f'<p class="mr-vstate"><b>Out of date:</b> the chapter\'s code changed since '
                         f"these verdicts were recorded{when}. They are the last recorded ones, not this "
                         f"page's; they wait for the chapter to run again at book scale ({cmd}) with its "
                         f"replications (<code>minirepro claims --robustness K --only {escape(name)}"
                         "</code>).</p>")
    return "current", ""


def _verdict_row(c: dict[str, Any]) -> str:
    """One paper claim of the box: statement (a link to its row at the end of the page),
    verdict badge with its cause (or the verdict recorded before a withdrawal), n, power, tally."""
    why = c.get("why") or {}
    mark = badge(c.get("verdict"), bool(c.get("fragile")), title=str(why.get("evidence") or ""))
    if c.get("recorded_verdict"):
        was = SHORT.get(c["recorded_verdict"], c["recorded_verdict"])
        mark += f'<span class="mr-cause">was {escape(was)}</span>'
    elif why.get("cause"):
        mark += f'<span class="mr-cause">{escape(why["cause"])}</span>'
    pw = power_value(c)
    design = escape(str((c.get("power") or {}).get("design") or ""))
    power = f'<span title="{design}">{pw:.2f}</span>' if pw is not None else "-"
    return (f'<tr><td class="mr-vclaim"><a href="#{anchor(c["id"])}">{escape(c["statement"])}</a></td>'
            f'<td class="mr-vverdict">{mark}</td><td class="mr-vn">{units_text(c)}</td>'
            f'<td class="mr-vpower">{power}</td><td class="mr-vreps">{_tally(c)}</td></tr>')


def verdicts_html(entry: dict[str, Any] | None, ledger_href: str, name: str = "") -> str:
    """A chapter's verdict box (``{minirepro-verdicts}``, at the top of its page): the paper's
    claims, one row each, with the ledger's verdict (and a "fragile" mark, the cause of a
    verdict other than reproduced), the units it was decided on, the power of the whole rule
    and the replications' tally; the checks of the miniature in one line; and, for a record that
    is withdrawn, out of date or missing, that fact in words and what it waits for.

    ``entry`` is the chapter's ledger entry (:func:`minirepro.claims.ledger.load`), ``None``
    when it has none; ``ledger_href`` the address of the chapter's section of the ledger page.
    """
    name = name or (entry or {}).get("chapter", "")
    link = f'<a href="{escape(ledger_href)}">the claims ledger</a>'
    cmd = f"<code>minirepro claims --update {escape(name)}</code>"
    if entry is None or entry.get("missing"):
        return (f'<div class="mr-verdicts" data-chapter="{escape(name)}" data-state="missing">'
                f'<p class="mr-vstate"><b>No verdicts are recorded for this chapter yet.</b> They wait '
                f"for its first book-scale run ({cmd}) and its replications; {link} will show them.</p></div>")
    paper = [c for c in entry.get("claims", []) if c.get("kind", "paper") == "paper"]
    checks = [c for c in entry.get("claims", []) if c.get("kind", "paper") == "check"]
    cnt = counts_of(paper)
    state, note = _state_note(entry, name, cmd)
    summary = " ".join(f'<span class="mr-badge mr-{CSS[v]}">{cnt[v]}&nbsp;{escape(SHORT[v])}</span>'
                       for v in VERDICTS if cnt[v]) or "none"
    head = (f'<p class="mr-vhead"><b>The verdicts</b> on the paper\'s {len(paper)} '
            f"claim{'s' if len(paper) != 1 else ''}: {summary} "
            f'<span class="mr-vsource">(book scale, from {link})</span></p>')
    table = ('<table class="mr-verdicts-table"><thead><tr><th>claim of the paper</th><th>verdict</th>'
             '<th>n</th><th title="P(reproduced) of the whole rule at its design point">power</th>'
             f'<th>replications</th></tr></thead><tbody>{"".join(map(_verdict_row, paper))}</tbody></table>'
             if paper else "")
    foot = []
    if checks:
        n = f"{len(checks)} check{'s' if len(checks) != 1 else ''} of the miniature"
        foot.append(f"{n}, withdrawn with the rest." if state == "withdrawn" else
                    f"{n}: {sum(c.get('verdict') == VERDICTS[0] for c in checks)} passed.")
    if paper and _replications_note(entry):
        foot.append(_replications_note(entry))
    foot.append("Power: the probability that the whole rule says <i>reproduced</i> at its design point; "
                "each claim's rule and measurement are in the table at the end of the page.")
    return (f'<div class="mr-verdicts" data-chapter="{escape(name)}" data-state="{state}">{head}{note}'
            f'{table}<p class="mr-vfoot">{" ".join(foot)}</p></div>')


def book_summary_html(entries: list[dict[str, Any]], ledger_href: str, status_href: str,
                      short_names: dict[str, str] | None = None) -> str:
    """The landing page's result summary: the paper's claims by verdict, the checks of the
    miniature passed, the fragile verdicts, and the chapters whose records are withdrawn or
    out of date (by ``short_names``, chapter -> the paper's short name, else the title's
    first part); with links to the ledger and to this build's status page."""
    def short(e):
        return escape((short_names or {}).get(e["chapter"]) or e["title"].split(":")[0])

    paper = [c for e in entries for c in e.get("claims", []) if c.get("kind", "paper") == "paper"]
    checks = [c for e in entries for c in e.get("claims", []) if c.get("kind", "paper") == "check"]
    cnt = counts_of(paper)
    frag = sum(bool(c.get("fragile")) for c in paper + checks)
    withdrawn = [e for e in entries if e.get("withdrawn")]
    stale = [e for e in entries if not e.get("missing") and not e.get("current") and not e.get("withdrawn")]
    missing = [e for e in entries if e.get("missing")]
    badges = " ".join(f'<span class="mr-badge mr-{CSS[v]}">{cnt[v]}&nbsp;{escape(SHORT[v])}</span>'
                      for v in VERDICTS if cnt[v])
    lines = [f"<b>{len(paper)} claims of {len(entries)} papers</b>: {badges}",
             f"<b>{len(checks)} checks of the miniature</b>: "
             f"{sum(c.get('verdict') == VERDICTS[0] for c in checks)} passed",
             f"<b>{frag}</b> verdict{'s' if frag != 1 else ''} fragile (more than one replication disagrees)"]
    if withdrawn:
        lines.append(f"<b>{len(withdrawn)} chapter{'s' if len(withdrawn) != 1 else ''} withdrawn</b> "
                     f"({', '.join(map(short, withdrawn))}): their claims count "
                     "as not testable until the model they need is built and they run again")
    if stale:
        lines.append(f"<b>{len(stale)} out of date</b> ({', '.join(map(short, stale))}): "
                     "their code changed since their verdicts were recorded")
    if missing:
        lines.append(f"<b>{len(missing)} without a record yet</b>")
    items = "".join(f"<li>{x}</li>" for x in lines)
    return (f'<div class="mr-book-summary"><p class="mr-vhead"><b>The results so far</b>, at book scale, '
            f"each verdict pooled over a chapter's recorded run and its replications:</p><ul>{items}</ul>"
            f'<p class="mr-vfoot">Every claim with its verdict, units and power: '
            f'<a href="{escape(ledger_href)}">the claims ledger</a>. How each chapter ran in the build you are '
            f'reading: <a href="{escape(status_href)}">the execution status</a>.</p></div>')


__all__ = ["anchor", "badge", "book_summary_html", "chapter_href", "claims_rows_html", "claims_table_html",
           "counts_of", "ledger_html", "power_text", "summary_html", "units_text", "verdicts_html"]
