"""The Reproduce page (AppTest): it reads the saved report (attnviz/assets/reproduce/report.json,
written by `attnviz reproduce`), shows the table of verdicts and one card per claim with a badge
per model, its figure, the link into the view behind it and the command; says so when there is
no report; speaks Chinese; and measures a claim again live, whose record then replaces the saved
one."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

from attnviz.claims import report
from attnviz.claims.run import CLAIMS
from attnviz.i18n import translate
from attnviz.ui.reproduce import REPORT, REPORT_ENV
from attnviz.ui.url_table import KEYS
from tests.apphelpers import app, specs

PAGE = "app_pages/reproduce.py"


def test_every_claim_of_the_saved_report_has_its_card():
    at = app(PAGE)
    assert not at.exception, at.exception
    _, records = report.read(REPORT)
    titles = [h.value for h in at.subheader]
    for claim in CLAIMS:  # one card each, titled in the page's language
        assert titles.count(translate(f"rp.claim.{claim}")) == 1, claim
    badges = [m.value for m in at.markdown if "-badge[" in m.value]
    for model, verdict in {(r.model, r.verdict) for r in records}:  # a badge per record
        want = sum(r.model == model and r.verdict == verdict for r in records)
        assert sum(f"{model}: {verdict}]" in b for b in badges) == want, (model, verdict)
    # one figure over all models for the sink metric, the in-context curve and the heads
    # needed, one per model for the norms, the shares, the prefix matching, the knock-out and
    # the lab's phase change; none for the BOS check
    per_model = {"sink_norms", "kobayashi", "prefix_matching", "knockout", "phase_change"}
    over_all = {"sink", "in_context", "heads_needed"}
    expected = len(over_all & {r.claim for r in records if r.figure})
    expected += sum(r.claim in per_model for r in records if r.figure)
    charts = specs(at)
    assert len(charts) == expected
    titles = [s["layout"]["title"]["text"] for s in charts]
    assert "&amp;" not in " ".join(titles)
    assert len(at.get("code")) == len(records)  # every record's command


def test_links_open_views_with_known_url_keys():
    at = app(PAGE)
    urls = [b.proto.url for b in at.get("link_button")]
    assert urls
    for url in urls:
        page, _, query = url.partition("?")
        assert page in ("pretrained", "atlas", "lab")
        for key in parse_qs(query):
            assert key in KEYS and {page, "*"} & set(KEYS[key].pages), (url, key)
    codes = [c.value for c in at.get("code")]
    assert all(c.startswith("attnviz reproduce --only ") for c in codes)


def test_the_numbers_shown_are_the_reports(tmp_path, monkeypatch):
    """A report with a changed number shows the changed number: nothing on the page is typed in."""
    data = json.loads(REPORT.read_text(encoding="utf-8"))
    for r in data["records"]:
        if r["claim"] == "sink":
            r["numbers"]["sink_metric"] = 0.4321
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setenv(REPORT_ENV, str(path))
    at = app(PAGE)
    assert not at.exception
    assert "43.2%" in " ".join(m.value for m in at.markdown)


def test_no_report_says_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv(REPORT_ENV, str(tmp_path / "none.json"))
    at = app(PAGE)
    assert not at.exception
    assert "attnviz reproduce --out DIR" in at.info[0].value


def test_chinese_and_projector():
    at = app(PAGE, {"lang": "zh", "projector": "true"})
    assert not at.exception
    assert at.title[0].value.startswith("复现")
    assert any("通过" in m.value or "未通过" in m.value for m in at.markdown)


def test_measured_live_replaces_the_saved_record():
    at = app(PAGE)
    at.multiselect(key="rp_claims").set_value(["sink"])
    at.multiselect(key="rp_models").set_value(["attnviz-char-zh-en"])
    at.button(key="rp_measure").click().run(timeout=300)
    assert not at.exception, at.exception
    assert any("1" in c.value and "session" in c.value for c in at.caption)
