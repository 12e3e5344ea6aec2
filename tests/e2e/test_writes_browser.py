"""What a head writes, in a real browser: head logits, the logit lens, compare,
and the moved and words switches, in English and Chinese at a laptop and a projector size; each
drawn without an error, shot for a person to look at (out/screenshots/writes-*)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.e2e.conftest import FULL_SHOTS

PLOTS = '[data-testid="stPlotlyChart"]'
TEXT = (
    "The animal didn't cross the street because it was too tired. The animal didn't cross the str"
)
EDIT = TEXT.replace("tired", "wide")
PIECES = "the unbelievably tired animal didn't cross the street because it was exhausted"  # ##
CHAR = "model=attnviz-char-zh-en&text=" + quote(TEXT)
ZH = "狗咬人不是新闻，人咬狗才是新闻。"
# view, query, at least this many charts (tables count as dataframes)
VIEWS = {
    "logits": (f"{CHAR}&view=logits", 1),
    "lens": (f"{CHAR}&view=lens", 1),
    "compare": (f"{CHAR}&view=compare&cmp={quote(EDIT)}", 3),
    "moved": ("view=detail&field=moved&layer=2&head=3", 3),
    "words": ("view=overview&unit=word&text=" + quote(PIECES), 2),
    "words_detail": ("view=detail&unit=word&text=" + quote(PIECES), 1),
    "stats_moved": ("view=stats&field=moved", 0),
    # SmolLM2's byte-level BPE splits a Chinese character into byte pieces: one per character
    "chars": ("model=smollm2-135m&view=detail&unit=char&layer=2&head=1&text=" + quote(ZH), 1),
    # projector mode: bigger type in every new chart
    "logits_projector": (f"{CHAR}&view=logits&projector=true", 1),
    "lens_projector": (f"{CHAR}&view=lens&projector=true", 1),
    "flow": (f"{CHAR}&view=flow", 1),
    "flow_projector": (f"{CHAR}&view=flow&projector=true", 1),
}


# `make shots` (whole pages, for a person to look at): every view in both languages. `make test`
# (window shots): each new view once, the languages taking turns (~75 s at load 6 on 2 cores).
SHOTS_ONLY = {"words_detail", "stats_moved", "lens_projector", "chars", "flow_projector"}
CASES = [(v, lang) for v in VIEWS for lang in ("en", "zh")]
if not FULL_SHOTS:
    CASES = [
        (v, ("en", "zh")[i % 2]) for i, v in enumerate(v for v in VIEWS if v not in SHOTS_ONLY)
    ]


@pytest.mark.parametrize(("view", "lang"), CASES)
def test_writes_views_draw_in_both_languages_at_two_sizes(view: str, lang: str, page) -> None:
    query, charts = VIEWS[view]
    page.open(f"pretrained?lang={lang}&{query}")
    for p in page.sizes():
        if charts:
            assert p.wait_count(PLOTS, charts, at_least=True) >= charts
        else:
            assert p.wait_count('[data-testid="stDataFrame"]', 1, at_least=True) >= 1
        p.assert_no_error()
        p.shot(f"writes-{view}-{lang}")
