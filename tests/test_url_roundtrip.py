"""Every control of every page round-trips through the URL, in any order of changes.

A property test: from each page of app.py's navigation, seeded random sequences of control changes
(the way the browser sends them), then "open the link": a fresh AppTest started from the URL the
browser would show must have the same widget values, figure data, tables and texts. Between
sequences the walk goes Back and Next over the entries it made (one per step that changed the
address, as attnviz/assets/js/history.js keeps them): each must show what it showed then. Plus
spelled-out sequences: K/V heads kept through head changes, and Back and Next step by step.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.apphelpers import app, pages, small_atlas_probes
from tests.urlprop import (
    History,
    change,
    controls,
    differences,
    flat,
    snapshot,
    targets,
    url_of,
)

# Sequences per page: >= 200 over the 11 pages of today's navigation (ATTNVIZ_URL_SEQUENCES to
# change it). Each sequence continues from where the last one left the page (a random walk), so
# the cost is one fresh page per sequence plus its changes. A walk picks a control it has not
# changed yet (or a view it has not opened) first, and goes on past SEQUENCES (up to three times
# as many) until it has changed every control the page showed on the way.
SEQUENCES = int(os.environ.get("ATTNVIZ_URL_SEQUENCES", "19"))
MAX_CHANGES = 3
BACK_AND_NEXT = 0.5  # the share of sequences followed by Back and Next steps


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
    # g_n still round-trips through the URL; the runs make at most 2 tokens (a real LLM's 64
    # would cost seconds each, and what is generated is not what this walk checks).
    monkeypatch.setattr("attnviz.ui.generate.MAX_NEW_TOKENS", 2)
    rng = random.Random(f"url-{page}")
    at = app(page)
    assert not at.exception
    shown = set().union(*map(targets, controls(at)))
    changed: set[str] = set()
    history = History(at)
    walked = moved = 0
    while walked < SEQUENCES or (shown - changed and walked < 3 * SEQUENCES):
        done = []
        for _ in range(rng.randint(1, MAX_CHANGES)):
            done.append(change(at, rng, changed))
            history.step(at, done[-1])
        assert not at.exception, (done, [e.value for e in at.exception])
        assert_link_reopens(at, page, done)
        if rng.random() < BACK_AND_NEXT:  # Back a step or two, then Next some of the way
            back = rng.randint(1, 2)
            for by in [-1] * back + [1] * rng.randint(0, back):
                if history.can_go(by):
                    diff = history.go(at, by)
                    assert not at.exception, (done, by, [e.value for e in at.exception])
                    assert not diff, f"after {done}, {'Next' if by > 0 else 'Back'}: {diff}"
                    moved += 1
        shown = shown.union(*map(targets, controls(at)))
        walked += 1
    assert not shown - changed, f"{walked} sequences never changed {sorted(shown - changed)}"
    print(f"{page}: {walked} sequences ({moved} Back/Next steps) changed all {len(changed)} "
          f"controls: {sorted(changed)}")  # fmt: skip


def test_navigation_is_discovered() -> None:
    assert "app_pages/playground.py" in pages() and len(pages()) >= 7
    assert SEQUENCES * len(pages()) >= 200 or "ATTNVIZ_URL_SEQUENCES" in os.environ


def test_playground_mqa_link_survives_fewer_heads() -> None:
    # Regression: heads 8, then K/V heads 1, then heads 4 reopened with K/V 4 (MHA, not MQA).
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
    # Regression: heads 16, K/V 8, K/V 1, d_model 64 kept only ?sh_h=16 and reopened as GQA, 4 K/V.
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
    # Regression: 4 -> 8 heads kept K/V at 4 and turned MHA into GQA without a word.
    at = app()
    at.select_slider(key="heads").set_value(start).run()
    at.select_slider(key="kv").set_value(kv).run()
    at.select_slider(key="heads").set_value(to).run()
    assert at.select_slider(key="kv").value == expected


PRETRAINED = "app_pages/pretrained.py"
VIEW_KEYS = ("lang", "view", "layer", "head")  # in every link of the explorer, from the first run


def test_the_link_holds_the_whole_view_from_the_first_run() -> None:
    # Regression: the address named lang, view, layer and head only once they left their defaults
    # (a link copied at once opened in the reader's language, on whatever view is the default).
    at = app(PRETRAINED)
    url = url_of(at)
    assert {k: url.get(k) for k in VIEW_KEYS} == {
        "lang": "English", "view": "overview", "layer": "0", "head": "0"
    }, url  # fmt: skip
    at.segmented_control(key="view").set_value("query").run()
    assert url_of(at)["query"] == "0"  # One query's default, named
    zh = app(PRETRAINED, query={"lang": "zh"})
    assert url_of(zh)["lang"] == "中文" and url_of(zh)["view"] == "overview"


def test_a_view_without_a_head_picker_keeps_the_head() -> None:
    # Regression: from view=detail&layer=3&head=7, Lines wrote view=lines&layer=3 (head lost), drew
    # head 0's lines, and Head detail came back on head 0.
    at = app(PRETRAINED, query={"view": "detail", "layer": "3", "head": "7"})
    at.segmented_control(key="view").set_value("lines").run()
    assert not at.exception
    assert (url_of(at)["layer"], url_of(at)["head"]) == ("3", "7")
    assert at.multiselect(key="lines_heads").value == [7]  # the lines drawn are head 7's
    for view in ("link", "stats", "detail"):
        at.segmented_control(key="view").set_value(view).run()
        assert (url_of(at)["layer"], url_of(at)["head"]) == ("3", "7"), view
    assert (at.slider(key="layer").value, at.slider(key="head").value) == (3, 7)


def test_link_opens_on_its_own_pair_after_one_query_and_keeps_a_picked_query() -> None:
    # Regression: One query (or Rollout), then Link gave query=0 and "[CLS] -> animal": a key picked
    # for another query. A query nobody picked follows each view's default; a picked one stays,
    # and the key is then that query's own.
    at = app(PRETRAINED)
    for view in ("query", "rollout"):
        at.segmented_control(key="view").set_value(view).run()
        at.segmented_control(key="view").set_value("link").run()
        query, key = at.selectbox(key="query"), at.selectbox(key="link_key")
        assert query.value != 0 and query.format_func(query.value).endswith("it"), view
        assert key.format_func(key.value).endswith("animal"), view
        assert url_of(at)["query"] == str(query.value)
        assert url_of(at)["link_key"] == str(key.value)
    at.segmented_control(key="view").set_value("query").run()
    at.selectbox(key="query").set_value(2).run()  # picked: "animal"
    at.segmented_control(key="view").set_value("link").run()
    query, key = at.selectbox(key="query"), at.selectbox(key="link_key")
    assert query.value == 2 and key.value not in (1, 2, 3)  # its own key, not its neighbours
    fresh = app(PRETRAINED, query=url_of(at))
    assert (fresh.selectbox(key="query").value, fresh.selectbox(key="link_key").value) == (
        2, key.value,
    )  # fmt: skip


def test_back_and_next_retrace_each_step() -> None:
    # Regression: overview -> detail -> layer 1 -> head 1 -> head 2 -> Lines, then Back showed a
    # state that never existed (head=2&layer=1&view=lines), then nothing, then Lines at layer 0,
    # then left the app. Each Back must show the step before; each Next the step after.
    at = app(PRETRAINED)
    history = History(at)
    steps = [
        lambda: at.segmented_control(key="view").set_value("detail").run(),
        lambda: at.slider(key="layer").set_value(1).run(),
        lambda: at.slider(key="head").set_value(1).run(),
        lambda: at.slider(key="head").set_value(2).run(),
        lambda: at.segmented_control(key="view").set_value("lines").run(),
    ]
    for i, step in enumerate(steps):
        at.query_params = url_of(at)  # the browser sends its address with every rerun
        step()
        history.step(at, f"step {i}")
    assert len(history.entries) == len(steps) + 1
    for by in [-1] * len(steps) + [1] * len(steps):
        diff = history.go(at, by)
        assert not at.exception and not diff, (history.at, diff)
        if history.at == 0:
            assert at.segmented_control(key="view").value == "overview"
    assert url_of(at)["view"] == "lines" and url_of(at)["head"] == "2"
