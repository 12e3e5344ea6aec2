"""Every control of every page round-trips through the URL, in any order of changes.

A property test: from each page of app.py's navigation, seeded random sequences of control changes
(the way the browser sends them), then "open the link": a fresh AppTest started from the URL the
browser would show must have the same widget values, figure data, tables and texts. Plus the two
sequences of issue 9 defect 1, spelled out.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.apphelpers import app, pages, small_atlas_probes
from tests.urlprop import change, controls, differences, flat, snapshot, targets, url_of

# Sequences per page: >= 200 over the 11 pages of today's navigation (ATTNVIZ_URL_SEQUENCES to
# change it). Each sequence continues from where the last one left the page (a random walk), so
# the cost is one fresh page per sequence plus its changes. A walk picks a control it has not
# changed yet (or a view it has not opened) first, and goes on past SEQUENCES (up to three times
# as many) until it has changed every control the page showed on the way.
SEQUENCES = int(os.environ.get("ATTNVIZ_URL_SEQUENCES", "19"))
MAX_CHANGES = 3


def assert_link_reopens(at, page: str, what: list[str]) -> None:
    url = url_of(at)
    fresh = app(page, query=url)
    assert not fresh.exception, [e.value for e in fresh.exception]
    diff = differences(snapshot(at), snapshot(fresh))
    assert not diff, f"after {what} the link ?{url} reopens differently: {diff}"
    assert flat(url_of(fresh)) == flat(url), (
        f"after {what} the reopened page rewrote ?{url} to ?{url_of(fresh)}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", pages())
def test_every_control_round_trips_through_the_url(page: str, monkeypatch) -> None:
    small_atlas_probes(monkeypatch)  # every text set the walk makes is measured, with 2 probes
    rng = random.Random(f"url-{page}")
    at = app(page)
    assert not at.exception
    shown = set().union(*map(targets, controls(at)))
    changed: set[str] = set()
    walked = 0
    while walked < SEQUENCES or (shown - changed and walked < 3 * SEQUENCES):
        done = [change(at, rng, changed) for _ in range(rng.randint(1, MAX_CHANGES))]
        assert not at.exception, (done, [e.value for e in at.exception])
        assert_link_reopens(at, page, done)
        shown = shown.union(*map(targets, controls(at)))
        walked += 1
    assert not shown - changed, f"{walked} sequences never changed {sorted(shown - changed)}"
    print(f"{page}: {walked} sequences changed all {len(changed)} controls: {sorted(changed)}")


def test_navigation_is_discovered() -> None:
    assert "app_pages/playground.py" in pages() and len(pages()) >= 7
    assert SEQUENCES * len(pages()) >= 200 or "ATTNVIZ_URL_SEQUENCES" in os.environ


def test_playground_mqa_link_survives_fewer_heads() -> None:
    # Defect 1: heads 8, then K/V heads 1, then heads 4 reopened with K/V 4 (MHA, not MQA).
    at = app()
    at.select_slider(key="heads").set_value(8).run()
    at.select_slider(key="kv").set_value(1).run()
    at.select_slider(key="heads").set_value(4).run()
    assert at.select_slider(key="kv").value == 1
    fresh = app(query=url_of(at))
    assert fresh.select_slider(key="heads").value == 4
    assert fresh.select_slider(key="kv").value == 1
    assert_link_reopens(at, "app_pages/playground.py", ["heads 8, kv 1, heads 4"])


def test_sharing_page_link_keeps_every_slider() -> None:
    # Defect 1: heads 16, K/V 8, K/V 1, d_model 64 kept only ?sh_h=16 and reopened as GQA, 4 K/V.
    page = "app_pages/sharing.py"
    at = app(page)
    at.select_slider(key="sh_h").set_value(16).run()
    at.select_slider(key="sh_kv").set_value(8).run()
    at.select_slider(key="sh_kv").set_value(1).run()
    at.select_slider(key="sh_d").set_value(64).run()
    fresh = app(page, query=url_of(at))
    assert fresh.select_slider(key="sh_h").value == 16
    assert fresh.select_slider(key="sh_kv").value == 1
    assert fresh.select_slider(key="sh_d").value == 64
    assert_link_reopens(at, page, ["sh_h 16, sh_kv 8, sh_kv 1, sh_d 64"])


@pytest.mark.parametrize(
    ("start", "kv", "to", "expected"),
    [(4, 4, 8, 8), (8, 8, 2, 2), (8, 1, 16, 1), (8, 2, 16, 4), (16, 4, 8, 2), (8, 4, 2, 2)],
)
def test_more_heads_keep_the_sharing_kind(start: int, kv: int, to: int, expected: int) -> None:
    # Defect 8: 4 -> 8 heads kept K/V at 4 and turned MHA into GQA without a word.
    at = app()
    at.select_slider(key="heads").set_value(start).run()
    at.select_slider(key="kv").set_value(kv).run()
    at.select_slider(key="heads").set_value(to).run()
    assert at.select_slider(key="kv").value == expected
