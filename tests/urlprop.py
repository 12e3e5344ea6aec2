"""What the browser's address bar holds after an AppTest run, random control changes, and the
browser's Back and Next over the entries those changes made (`History`).

The URL of a Streamlit page has two writers: the script (st.query_params, which AppTest reports
in `at.query_params`) and the browser, which writes each bind="query-params" widget itself when
its value differs from the widget's default (and removes it when equal). `url_of` puts the two
together the way the browser does, with Streamlit's own serializer and URL formatting, so that
`AppTest(query_params=url_of(at))` is "open the link".

Controls are changed the way the browser does it too: a selection widget sends the label of the
picked option on the wire (what the frontend sends), so a random pick needs no Python value.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import random
from pathlib import Path

from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.runtime.scriptrunner import RerunData
from streamlit.runtime.state.query_params import _coerce_value_for_query_url
from streamlit.testing.v1 import AppTest, local_script_runner
from streamlit.testing.v1.element_tree import Selectbox

ROOT = Path(__file__).resolve().parent.parent

# Changing these is an action, not a setting (a picker of examples that fills the sentence and
# goes back to empty): changed like any control, left out of the comparison.
ACTIONS_ONLY = {"example"}
# Free text: a few values that matter (empty, blank, repeated tokens, Chinese, markup).
TEXTS = {
    "text": ["", "   ", "the cat saw the dog", "我爱水课", "The animal didn't cross <b>it</b>"],
    "pair": ["", "a dog barks"],
    "model": ["", "no-such-org/no-such-model-xyz"],
    "g_model": ["", "no-such-org/no-such-model-xyz"],  # blank: the picker's decoder again
    "po_a": ["狗咬人", "abc", "", "the cat"],
    "po_b": ["人咬狗", "cba", "abd", "cat the"],
}
SELECTION_KINDS = ("selectbox", "radio", "select_slider", "multiselect", "button_group")
VALUE_KINDS = ("slider", "toggle", "checkbox", "number_input", "text_input", "text_area")


_selectbox_state = Selectbox._widget_state.fget


def _widget_state(self: Selectbox) -> WidgetState:
    """AppTest (streamlit 1.67) keeps the format_func a selectbox had on its first run: after a
    switch to 中文, the English label of its value is not among its Chinese options and building
    the next run's states raised ValueError. The browser sends the label it shows; a state with
    no value keeps the session's value the same way."""
    try:
        return _selectbox_state(self)
    except ValueError:
        return WidgetState(id=self.id)


Selectbox._widget_state = property(_widget_state)


def _state(at: AppTest):
    return at._session_state._state


def url_of(at: AppTest) -> dict[str, str | list[str]]:
    """The query string the browser would show now."""
    ss = _state(at)
    bindings = ss.query_params._bindings_by_widget
    url = {k: v for k, v in at.query_params.items() if k not in ss.query_params._bindings_by_param}
    for wid in ss._query_param_bound_widget_ids:
        meta = ss._new_widget_state.widget_metadata.get(wid)
        binding = bindings.get(wid)
        if meta is None or binding is None:
            continue
        value = ss[wid]
        if value != meta.deserializer(None):
            url[binding.param_key] = _coerce_value_for_query_url(
                meta.serializer(value), meta.value_type
            )
    return url


def flat(url: dict) -> list[tuple[str, str]]:
    """A query dict as the address bar has it: (key, value) pairs, one per value, sorted by key
    (a list's values keep their order: silenced heads L2H5, L0H4 are not L0H4, L2H5)."""
    pairs = []
    for k, v in url.items():
        pairs += [(k, str(x)) for x in (v if isinstance(v, list) else [v])]
    return sorted(pairs, key=lambda pair: pair[0])


# Widgets whose value is deliberately not in the link: a pasted document (up to 100,000
# characters) is too long for an address bar; the page says so.
SESSION_ONLY = frozenset({"long_doc"})
# ... and what a download holds (the JSON's layers, heads and threshold): it is not what the page
# shows, and a link reopens the view, not a half-made download.
SESSION_ONLY_PREFIXES = ("json_",)
# Buttons that start live work whose result is the session's, not the link's: a training run in
# the Training lab, a live measurement on the Reproduce page (a link reopens their settings; the
# run is made again on request).
LIVE_ACTIONS = ("lab_train_", "rp_measure", "rp_stop")


def controls(at: AppTest) -> list:
    """Every widget a user can change on the page now (keyed or not), buttons included."""
    found = []
    for kind in SELECTION_KINDS + VALUE_KINDS:
        found += [
            w
            for w in at.get(kind)
            if not w.disabled
            and w.key not in SESSION_ONLY
            and not str(w.key or "").startswith(SESSION_ONLY_PREFIXES)
        ]
    found += [
        b for b in at.get("button") if not b.disabled and not (b.key or "").startswith(LIVE_ACTIONS)
    ]
    return found


def _wire(at: AppTest, widget, labels: str | list[str]) -> None:
    """Send a selection the way the frontend does: the label(s) of the picked option(s)."""
    states = at._tree.get_widget_states()
    for ws in states.widgets:
        if ws.id == widget.id:
            ws.Clear()
            ws.id = widget.id
            if isinstance(labels, list):
                ws.string_array_value.data[:] = labels
            else:
                ws.string_value = labels
    at._run(states)


def name_of(widget) -> str:
    """A control's name in a walk: its key, or the label of a widget without one."""
    return widget.key or f"{widget.type}:{getattr(widget, 'label', '?')}"


# Pickers that show other controls (the explorer's views): a walk visits each of their options.
EVERY_OPTION = frozenset({"view"})


def targets(widget) -> set[str]:
    """What a walk must have done to a control: changed it, or picked each of its options."""
    name = name_of(widget)
    if widget.key in EVERY_OPTION:
        return {f"{name}#{i}" for i in range(len(widget.options))}
    return {name}


def change(at: AppTest, rng: random.Random, done: set[str] | None = None) -> str:
    """Change one random control to a random valid value and rerun; returns what was done.

    With `done` (the targets reached so far, updated here), a control the page shows that was
    never changed comes first (buttons after the others), then a view never opened, so a short
    walk reaches every control."""
    # The browser sends the address bar with every rerun: the script's st.query_params is the
    # URL the page shows now (bound widgets included), not what the last run left there.
    at.query_params = url_of(at)
    found = controls(at)
    if done is not None:  # a control never changed, else a view never opened, else any
        fresh = [w for w in found if w.key not in EVERY_OPTION and name_of(w) not in done]
        # a button may leave the view (Link's "open in Head detail"): the view's other controls
        # first, or they are shown once and never changed
        fresh = [w for w in fresh if w.type != "button"] or fresh
        views = [w for w in found if w.key in EVERY_OPTION and not targets(w) <= done]
        found = fresh or views or found
    widget = rng.choice(found)
    if done is not None and widget.key in EVERY_OPTION:
        name = name_of(widget)
        todo = [i for i in range(len(widget.options)) if f"{name}#{i}" not in done]
        i = rng.choice(todo or range(len(widget.options)))
        done.add(f"{name}#{i}")
        label = list(widget.options)[i]
        _wire(at, widget, [label] if widget.type in ("select_slider", "button_group") else label)
        return f"{name} = {label!r}"
    if done is not None:
        done.add(name_of(widget))
    kind, name = widget.type, widget.key or getattr(widget, "label", "?")
    if kind == "button":
        widget.click().run()
        return f"click {widget.label!r}"
    if kind in ("selectbox", "radio", "select_slider", "button_group"):
        label = rng.choice(list(widget.options))
        _wire(at, widget, [label] if kind in ("select_slider", "button_group") else label)
        return f"{name} = {label!r}"
    if kind == "multiselect":
        picked = rng.sample(list(widget.options), k=min(len(widget.options), rng.randint(0, 2)))
        _wire(at, widget, picked)
        return f"{name} = {picked!r}"
    if kind in ("toggle", "checkbox"):
        value = not widget.value
    elif kind == "slider":
        value = rng.randint(int(widget.min), int(widget.max))
    elif kind == "number_input":
        lo, hi, step = widget.min, widget.max, widget.step or 1
        n_steps = int((hi - lo) / step)
        value = lo + step * rng.choice([0, 1, 2, rng.randint(0, min(n_steps, 50)), n_steps])
        value = round(min(value, hi), 6)
        value = int(value) if isinstance(widget.value, int) else float(value)
    else:
        value = rng.choice(TEXTS.get(widget.key, ["", "hello world", "我爱水课"]))
    widget.set_value(value).run()
    return f"{name} = {value!r}"


def snapshot(at: AppTest) -> dict:
    """What the page shows: widget values by key, figure data, tables, metrics and texts."""
    widgets = {}
    for kind in SELECTION_KINDS + VALUE_KINDS:
        for w in at.get(kind):
            if w.key and w.key not in ACTIONS_ONLY:
                widgets[f"{kind}:{w.key}"] = repr(w.value)
    figures = [c.proto.spec for c in at.get("plotly_chart")]  # the figure JSON, as sent
    tables = [df.value.to_json() for df in at.get("dataframe")]
    texts = []
    for kind in ("title", "subheader", "markdown", "caption", "latex", "info", "warning", "error"):
        texts += [f"{kind}:{e.value}" for e in at.get(kind)]
    metrics = [f"{m.label}={m.value}" for m in at.get("metric")]
    return {
        "widgets": widgets,
        "figures": figures,
        "tables": tables,
        "texts": texts,
        "metrics": metrics,
    }


def differences(a: dict, b: dict) -> list[str]:
    """Human-readable differences between two snapshots (empty when they match)."""
    out = []
    for key in sorted(set(a["widgets"]) | set(b["widgets"])):
        if a["widgets"].get(key) != b["widgets"].get(key):
            out.append(f"{key}: {a['widgets'].get(key)} != {b['widgets'].get(key)}")
    if len(a["figures"]) != len(b["figures"]):
        out.append(f"{len(a['figures'])} figures != {len(b['figures'])}")
    else:
        for i, (fa, fb) in enumerate(zip(a["figures"], b["figures"], strict=True)):
            if fa != fb:
                title = json.loads(fa).get("layout", {}).get("title", {}).get("text", "")
                out.append(f"figure {i} ({title!r}) differs")
    for kind in ("tables", "texts", "metrics"):
        if a[kind] != b[kind]:
            only_a = [x for x in a[kind] if x not in b[kind]][:3]
            only_b = [x for x in b[kind] if x not in a[kind]][:3]
            out.append(f"{kind} differ: {str(only_a)[:300]} vs {str(only_b)[:300]}")
    return out


def compact(snap: dict) -> dict:
    """A snapshot that keeps each figure as its title and a digest (a walk keeps one a step)."""
    figures = []
    for spec in snap["figures"]:
        title = json.loads(spec).get("layout", {}).get("title", {}).get("text", "")
        digest = hashlib.sha1(spec.encode()).hexdigest()
        figures.append(json.dumps({"layout": {"title": {"text": title}}, "sha1": digest}))
    return {**snap, "figures": figures}


@contextlib.contextmanager
def _history_navigation():
    # The run the browser asks for on Back or Next (Streamlit's isHistoryNavigation): the URL of
    # the entry it returns to wins over the widget states it sends.
    plain = local_script_runner.RerunData
    local_script_runner.RerunData = functools.partial(RerunData, is_history_navigation=True)
    try:
        yield
    finally:
        local_script_runner.RerunData = plain


class History:
    """The browser's history of one page as attnviz/assets/js/history.js keeps it: one entry per
    step that changed the address (the step's URL, and what the page showed), Back and Next
    rerun the page as the browser does on an entry's URL. A change after Back drops the entries
    ahead, as a browser does."""

    def __init__(self, at: AppTest) -> None:
        self.entries = [(flat(url_of(at)), compact(snapshot(at)))]
        self.at = 0

    def step(self, at: AppTest, what: str) -> None:
        """After a user's change: a new entry if the address changed, else the same one."""
        url, shown = flat(url_of(at)), compact(snapshot(at))
        if url == self.entries[self.at][0]:
            self.entries[self.at] = (url, shown)
            return
        del self.entries[self.at + 1 :]
        self.entries.append((url, shown))
        self.at += 1

    def can_go(self, by: int) -> bool:
        return 0 <= self.at + by < len(self.entries)

    def go(self, at: AppTest, by: int) -> list[str]:
        """Back (by=-1) or Next (+1); what differs from what the entry showed (empty: none)."""
        self.at += by
        url, shown = self.entries[self.at]
        query: dict[str, list[str]] = {}
        for k, v in url:
            query.setdefault(k, []).append(v)
        at.query_params = {k: v[0] if len(v) == 1 else v for k, v in query.items()}
        with _history_navigation():
            at._run(at._tree.get_widget_states())
        diff = differences(shown, compact(snapshot(at)))
        if flat(url_of(at)) != url:
            diff.append(f"the address became ?{url_of(at)}")
        return diff
