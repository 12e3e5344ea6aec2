"""The browser's Back and Next in Chromium: one history entry per user step, each a
state that was drawn, and Back / Next walk them one at a time (attnviz/assets/js/history.js)."""

from __future__ import annotations

import time
import urllib.parse

# the view picker: the button group that offers Head detail (the Pretrained page's Tokens switch
# "pieces | words" may stand before it)
VIEW = '[data-testid="stButtonGroup"]:has(button:has-text("Head detail")) >> button[role="radio"]'
KEYS = ("view", "layer", "head")


def _wait(p) -> None:
    time.sleep(0.6)
    p.settle()


def _state(p) -> dict[str, str]:
    query = urllib.parse.parse_qs(urllib.parse.urlparse(p.page.url).query)
    return {k: query.get(k, ["?"])[0] for k in KEYS}


def _drawn(p) -> dict[str, str]:
    """What the page shows: the view picked and the layer and head sliders' values."""
    buttons = p.page.locator(VIEW)
    view = [
        buttons.nth(i).inner_text()
        for i in range(buttons.count())
        if buttons.nth(i).get_attribute("aria-checked") == "true"
    ]
    sliders = {}
    for name, label in (("layer", "Layer"), ("head", "Head")):
        thumb = p.page.locator(f'input[type="range"][aria-label^="{label}"]')
        sliders[name] = thumb.first.get_attribute("aria-valuetext") if thumb.count() else None
    return {"view": view, **sliders}


def _press(p, label: str, key: str) -> None:
    thumb = p.page.locator(f'input[type="range"][aria-label^="{label}"]').first
    thumb.focus()
    thumb.press(key)
    _wait(p)


def test_back_and_next_walk_one_user_step_at_a_time(page) -> None:
    p = page
    p.open("pretrained")
    # the first run ends with the whole view in the address bar and the history rule loaded
    p.page.locator(VIEW).first.wait_for(timeout=90_000)
    p.page.wait_for_function("() => window.__attnvizHistory && location.search.includes('head=')")
    _wait(p)
    start = p.page.evaluate("history.length")
    steps = [
        lambda: p.page.locator(VIEW).filter(has_text="Head detail").click(),
        lambda: _press(p, "Layer", "ArrowRight"),
        lambda: _press(p, "Head", "ArrowRight"),
        lambda: _press(p, "Head", "ArrowRight"),
        lambda: p.page.locator(VIEW).filter(has_text="Lines").click(),
    ]
    seen = [(_state(p), _drawn(p))]
    for step in steps:
        step()
        _wait(p)
        seen.append((_state(p), _drawn(p)))
    # one entry a step: the first run's writes and each step's reruns replaced, never pushed
    assert p.page.evaluate("history.length") - start == len(steps), seen
    states = [s for s, _ in seen]
    assert states[0] == {"view": "overview", "layer": "0", "head": "0"}, states
    assert states[-1] == {"view": "lines", "layer": "1", "head": "2"}, states
    for i in range(len(steps) - 1, -1, -1):  # Back: each step before, drawn as it was
        p.page.go_back()
        _wait(p)
        assert (_state(p), _drawn(p)) == seen[i], (i, _state(p), seen[i])
    p.shot("history-back-at-start")
    for i in range(1, len(steps) + 1):  # Next: each step after
        p.page.go_forward()
        _wait(p)
        assert (_state(p), _drawn(p)) == seen[i], (i, _state(p), seen[i])
    p.assert_no_error()
