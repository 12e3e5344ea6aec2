"""Widgets and displays the pages share: charts with attnviz's modebar, grids, small matrices
with their numbers, tables that grow in projector mode, pickers kept in the URL by value."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import streamlit as st

from attnviz.engine.config import divisors
from attnviz.engine.trace import Trace
from attnviz.ui import markup, projector, url
from attnviz.ui.language import t
from attnviz.views.spec import PLOTLY_CONFIG, Spec, for_browser
from attnviz.views.tokens import legend, shown

_GIVEN = "_default_given_"
# A multiselect picks exactly what the user chose: no "Select N matches" entry (typing L3H1 and
# Enter once silenced L3H1, L3H10 and L3H11), typed text matched anywhere, in the options' order
# (so the first match of L3H1 is L3H1 itself, of 1 is position 1).
EXACT = {"select_all": False, "filter_mode": "contains"}


def follow_default(key: str, default: str) -> None:
    """Before a text box bound to the URL: if it still holds the default it was last given, it
    takes the new one (the language, or the page's model, changed); text a user typed or a link
    gave stays."""
    given = st.session_state.get(_GIVEN + key)
    if given is not None and given != default and st.session_state.get(key) == given:
        st.session_state[key] = default
    st.session_state[_GIVEN + key] = default


def grid(n: int, per_row: int) -> list:
    """n cells, `per_row` columns a row, in reading order: one st.columns row per group, so a
    narrow screen that stacks the columns keeps 0, 1, 2... instead of 0, 3, 1, 4, 2, 5."""
    cells = []
    for start in range(0, n, per_row):
        cells += st.columns(per_row)[: min(per_row, n - start)]
    return cells


def chart(fig, key: str | None = None, name: str | None = None, **kwargs) -> object:
    """st.plotly_chart with the shared modebar config (PNG export at 2x), its PNG named `name`
    (what it holds, e.g. weights_L5_H11), else after its key."""
    image = {**PLOTLY_CONFIG["toImageButtonOptions"], "filename": name or key or "attnviz"}
    config = {**PLOTLY_CONFIG, "toImageButtonOptions": image}
    if projector.on():
        import plotly.graph_objects as go

        from attnviz.views.projector import enlarge

        # A copy: the figure may be cached (the overview's mosaic, per trace), and enlarging it
        # in place grew its fonts again on every rerun.
        fig = enlarge(fig.figure() if isinstance(fig, Spec) else go.Figure(fig))
    shown = for_browser(fig)
    if shown is not fig:  # sent bare: drawn once, not three times (views.spec.for_browser)
        kwargs.setdefault("theme", None)
    return st.plotly_chart(shown, config=config, key=key, **kwargs)


def numbers(
    matrix, cols, rows, title: str, key: str, highlight: int | None = None, signed=True,
    mask=None,
):  # fmt: skip
    """A small matrix drawn with its numbers in the cells; `mask` ([q, k], True = may attend):
    the cells it forbids are blank and printed "–", never as a weight of 0.00."""
    from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map

    n = len(rows)
    # projector mode: every number grows (attnviz.views.projector); past 6 columns one decimal,
    # so that bigger digits still fit their cells
    digits = ".1f" if projector.on() and len(cols) > 6 else ".2f"
    colour = Colour.diverging("", show_bar=False) if signed else Colour(
        zmin=0.0, zmax=1.0, value="", show_bar=False
    )  # fmt: skip
    colour = replace(colour, digits=digits)
    fig = draw_map(
        matrix, Axis(cols), Axis(rows), colour, Marks.of_mask(mask, numbers=True, row=highlight),
        Frame(title, max(220, 44 * n + 110)),
    )  # fmt: skip
    if sum(len(str(c)) for c in cols) <= 36:  # longer token labels would run together flat
        fig.update_xaxes(tickangle=0)
    chart(fig, key=key)


def matrix_columns(n: int, key: str) -> list:
    """`n` columns for matrices of numbers, abreast where each has room for its cells' numbers
    and stacked where not (ui.projector.BASE: a matrix column is at least 24rem wide):
    three 8 x 8 matrices abreast at 1280 px ran their numbers together ("-3.76-0.930.53")."""
    return st.container(key=f"matrices_{key}").columns(n)


def report_trace_notes(trace: Trace) -> None:
    if not trace.truncated:
        return
    counts = trace.meta.get("n_input")
    if trace.source != "stack":  # a pretrained model: both sentences count together
        st.warning(t("warn.truncated_model", limit=len(trace.tokens)))
    elif counts and counts.get("pair") is not None:  # the toy stack's cross-attention pair
        for which, n, kept in (("text", counts["text"], len(trace.tokens)),
                               ("pair", counts["pair"], len(trace.key_tokens))):  # fmt: skip
            if n > kept:
                st.warning(t(f"warn.truncated_{which}", n=n, limit=kept))
    else:
        st.warning(t("warn.truncated", n=trace.n_input_tokens, limit=len(trace.tokens)))


def choice_slider(label: str, options: list, key: str, default, **kwargs):
    """A select_slider kept in the URL whose options may change (d_model moved, so the heads did).

    Not Streamlit's bind="query-params": that drops a value equal to the widget's *current* default
    (its first option, once options moved), so a link reopened with another value. Here the
    default is the one a fresh page computes from the same URL, so what the URL leaves out is
    exactly what a fresh page would pick. A stale value moves to the nearest valid option.
    """
    default = default if default in options else options[len(options) // 2]
    url.seed(key, options, default)
    old = st.session_state[key]
    if old not in options:
        numeric = isinstance(old, (int, float)) and all(
            isinstance(o, (int, float)) for o in options
        )
        st.session_state[key] = min(options, key=lambda o: abs(o - old)) if numeric else default
    value = st.select_slider(label, options, key=key, **kwargs)
    url.sync(key, default)
    return value


def kv_follow(n_heads: int, old_heads: int, old_kv: int) -> int:
    """The K/V heads after the query heads moved from old_heads to n_heads, keeping the kind:
    MHA stays MHA (K/V = heads), MQA stays MQA (1), GQA keeps its group size where it can and
    otherwise takes the nearest K/V count that is still grouped (1 < K/V < heads)."""
    if old_kv == old_heads:
        return n_heads
    if old_kv == 1:
        return 1
    group = old_heads // old_kv
    if n_heads % group == 0 and 1 < n_heads // group < n_heads:
        return n_heads // group
    grouped = [d for d in divisors(n_heads) if 1 < d < n_heads] or divisors(n_heads)
    return min(grouped, key=lambda d: abs(d - old_kv))


def kv_slider(label: str, n_heads: int, key: str, default: int, **kwargs) -> int:
    """The K/V-heads slider under a heads slider: when the heads change, the sharing kind stays."""
    seen = f"_{key}_heads"  # the heads this slider was last drawn for
    old_heads = st.session_state.get(seen)
    if key in st.session_state and old_heads is not None and old_heads != n_heads:
        st.session_state[key] = kv_follow(n_heads, old_heads, st.session_state[key])
    st.session_state[seen] = n_heads
    return choice_slider(label, divisors(n_heads), key, default, **kwargs)


def url_select(widget, label: str, options: list, key: str, default, **kwargs):
    """A selectbox/radio/segmented control kept in the URL by option value, not by its (translated)
    label, so a link is the same in both languages."""
    url.seed(key, options, default)
    if st.session_state[key] not in options:
        st.session_state[key] = default
    value = widget(label, options, key=key, **kwargs)
    url.sync(key, default)
    return value


def numbered(tokens, none: str | None = None) -> Callable[[int | None], str]:
    """A picker's format_func, "3: ␣cat" for position 3 (the token as every view draws it).
    Over the tokens only, never a trace or a page's namespace: Streamlit keeps a widget's
    format_func with the session (and a closed session for two minutes), and a lambda written
    in a page script would keep that page's globals, its traces included (~90 MiB a session at
    512 tokens; bench/load.py)."""
    tokens = [shown(tok) for tok in tokens]

    def label(i: int | None) -> str:
        return none if i is None else f"{i}: {tokens[i]}"

    return label


def distinct_labels(tokens: list[str]) -> list[str]:
    """Token labels for a picker, a repeat marked by its position ("the", "the·4"): Streamlit tells
    options apart by their label, so two "the" options would be one."""
    seen: set[str] = set()
    out = []
    for i, tok in enumerate(map(shown, tokens)):
        out.append(f"{tok}·{i}" if tok in seen else tok)
        seen.add(tok)
    return out


def token_legend(tokens) -> None:
    """The one-line legend under a chart or table of the marks its tokens show (␣ a space, ⏎ a
    line break, ◌ part of a character); nothing when they show none."""
    line = legend(tokens, t)
    if line:
        st.caption(markup.escape(line))


def trace_legend(trace: Trace) -> None:
    """`token_legend` of a trace's tokens (queries and keys)."""
    token_legend([*trace.tokens, *(trace.key_tokens or [])])


def table(
    data,
    hide_index: bool | None = None,
    column_config: dict | None = None,
    wrap: bool = False,
    **kwargs,
):
    """st.dataframe, or in projector mode an HTML st.table: its text grows with the page and
    wraps, where the canvas-drawn dataframe keeps small type and scrolls sideways at 150 % zoom.
    `wrap`: the HTML table always (a table of sentences, which the dataframe cuts off at 1280 px).
    Number formats of `column_config` (NumberColumn(format=...)) apply to both."""
    if not projector.on() and not wrap:
        return st.dataframe(data, hide_index=hide_index, column_config=column_config, **kwargs)
    import pandas as pd

    frame = data.copy() if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    for name, config in (column_config or {}).items():
        fmt = (
            (config or {}).get("type_config", {}).get("format")
            if isinstance(config, dict)
            else None
        )
        if fmt and name in frame:
            frame[name] = frame[name].map(lambda v, f=fmt: f % v)
    # st.table's own hide_index: a Styler's hidden index was drawn anyway (1.67)
    return st.table(frame, hide_index=hide_index)
