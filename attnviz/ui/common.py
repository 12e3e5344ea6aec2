"""The only streamlit importer in the package: cached engine calls and shared widgets."""

from __future__ import annotations

import streamlit as st

from attnviz.config import StackConfig
from attnviz.figures import PLOTLY_CONFIG
from attnviz.i18n import LANGUAGES, examples, translate
from attnviz.stack import trace_text
from attnviz.trace import Trace

PAIR_SEP = "|||"
DEFAULT_TEXT = next(iter(examples("en").values()))


def lang() -> str:
    # The radio shows (and puts in the URL) "English" / "中文"; code uses "en" / "zh".
    label = st.session_state.get("lang", LANGUAGES["en"])
    return next((code for code, name in LANGUAGES.items() if name == label), "en")


def t(key: str, **fmt: object) -> str:
    return translate(key, lang(), **fmt)


def stack_trace(text: str, config: StackConfig, text_pair: str | None = None) -> Trace:
    """The toy stack's trace, cached on (text, config, pair) by bytes and shared: read-only."""
    from attnviz.ui.caching import cached_trace

    key = ("stack", text, config, text_pair)
    return cached_trace(key, lambda: trace_text(text, config, text_pair=text_pair))


def _apply_example() -> None:
    choice = st.session_state.get("example")
    if choice in examples(lang()):
        text, _, pair = examples(lang())[choice].partition(PAIR_SEP)
        st.session_state["text"] = text
        st.session_state["pair"] = pair
    st.session_state["example"] = None


def sidebar() -> None:
    """Language, the sentence and its examples: shared by every page, kept in the URL."""
    with st.sidebar:
        st.radio(
            translate("side.language"),
            list(LANGUAGES.values()),
            key="lang",
            horizontal=True,
            bind="query-params",
        )
        st.selectbox(
            t("side.example"),
            list(examples(lang())),
            index=None,
            placeholder=t("side.example_pick"),
            key="example",
            on_change=_apply_example,
        )
        st.text_area(
            t("side.text"),
            value=DEFAULT_TEXT,
            key="text",
            help=t("side.text_help"),
            height=100,
            max_chars=20_000,
            bind="query-params",
        )
        st.text_input(t("side.pair"), key="pair", help=t("side.pair_help"), bind="query-params")


def text() -> str:
    return st.session_state.get("text", DEFAULT_TEXT)


def pair() -> str | None:
    p = st.session_state.get("pair", "")
    return p if p and p.strip() else None


def url_seed(key: str, options: list, default) -> None:
    """Start a widget from the URL (?key=value) on its first run, by option value, not label.

    For widgets whose labels are translated: streamlit's bind="query-params" would put the
    translated label in the URL, so a link would change with the language.
    """
    if key in st.session_state:
        return
    raw = st.query_params.get(key)
    by_text = {str(o): o for o in options}
    st.session_state[key] = by_text.get(raw, default)


def url_sync(key: str, default) -> None:
    """Write the widget's value to the URL, or drop it when it is the default."""
    value = st.session_state.get(key)
    if value is None or value == default:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != str(value):
        st.query_params[key] = str(value)


def chart(fig, key: str | None = None, **kwargs) -> object:
    """st.plotly_chart with the shared modebar config (PNG export at 2x)."""
    return st.plotly_chart(fig, config=PLOTLY_CONFIG, key=key, **kwargs)


def report_trace_notes(trace: Trace) -> None:
    if trace.truncated:
        st.warning(t("warn.truncated", n=trace.n_input_tokens, limit=len(trace.tokens)))


def choice_slider(label: str, options: list, key: str, default, **kwargs):
    """A URL-bound select_slider whose options may change (d_model moved, so the heads did).

    A stale value is moved to the nearest valid option; on the first run the widget's own default
    applies, so a value from the URL is not overwritten.
    """
    if key in st.session_state and st.session_state[key] not in options:
        old = st.session_state[key]
        numeric = isinstance(old, (int, float)) and all(
            isinstance(o, (int, float)) for o in options
        )
        st.session_state[key] = min(options, key=lambda o: abs(o - old)) if numeric else default
    first = (
        {}
        if key in st.session_state
        else {"value": default if default in options else options[len(options) // 2]}
    )
    return st.select_slider(label, options, key=key, bind="query-params", **first, **kwargs)


D_MODELS = [8, 16, 32, 64, 128, 256, 512, 1024]


def stack_controls(defaults: dict | None = None) -> StackConfig | None:
    """The Playground's sliders; only valid combinations are reachable. None (with a message) if
    the settings still do not fit together."""
    from attnviz.config import divisors

    d = {"d_model": 64, "heads": 4, "layers": 1, **(defaults or {})}
    c1, c2, c3, c4, c5 = st.columns(5)
    with c1:
        d_model = choice_slider(t("pg.d_model"), D_MODELS, "d_model", d["d_model"])
    with c3:
        auto = st.toggle(t("pg.d_head_auto"), value=True, key="dk_auto", bind="query-params")
        d_head = None
        if not auto:
            d_head = st.number_input(
                t("pg.d_head"), 1, 1024, value=16, step=1, key="d_head", bind="query-params"
            )
    with c2:
        head_options = [h for h in divisors(d_model) if h <= 32] if auto else list(range(1, 33))
        n_heads = choice_slider(
            t("pg.heads"), head_options, "heads", d["heads"], help=t("pg.heads_help")
        )
    with c4:
        kv_options = divisors(n_heads)
        n_kv = choice_slider(t("pg.kv_heads"), kv_options, "kv", n_heads)
    with c5:
        n_layers = st.slider(t("pg.layers"), 1, 6, d["layers"], key="layers", bind="query-params")
    t1, t2, t3, t4, t5, t6 = st.columns(6)
    use_scale = t1.toggle(
        t("pg.scale"), value=True, key="scale", help=t("pg.scale_help"), bind="query-params"
    )
    causal = t2.toggle(t("pg.causal"), value=False, key="causal", bind="query-params")
    add_norm = t3.toggle(t("pg.add_norm"), value=False, key="addnorm", bind="query-params")
    ffn = t4.toggle(t("pg.ffn"), value=False, key="ffn", bind="query-params")
    positional = t5.selectbox(
        t("pg.positional"),
        ["sinusoidal", "none"],
        key="pos",
        help=t("pg.positional_help"),
        bind="query-params",
    )
    temperature = t6.number_input(
        t("pg.temperature"), 0.05, 20.0, value=1.0, step=0.25, key="temp", bind="query-params"
    )
    try:
        return StackConfig(
            d_model=d_model,
            n_heads=n_heads,
            d_head=d_head,
            n_kv_heads=n_kv,
            n_layers=n_layers,
            use_scale=use_scale,
            temperature=float(temperature),
            causal=causal,
            positional=positional,
            add_norm=add_norm,
            ffn=ffn,
        )
    except ValueError as err:
        st.error(t("err.config", msg=err))
        return None


def run_stack_trace(config: StackConfig) -> Trace | None:
    """Trace the sidebar's text; a clear message instead of a traceback when the text is bad."""
    try:
        trace = stack_trace(text(), config, pair())
    except ValueError as err:
        st.info(t("err.empty") if "empty" in str(err) else str(err))
        return None
    report_trace_notes(trace)
    return trace


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_walkthrough(text: str, d_k: int, use_scale: bool, causal: bool):
    from attnviz.walkthrough import walkthrough

    return walkthrough(text, d_k=d_k, use_scale=use_scale, causal=causal)


def numbers(matrix, cols, rows, title: str, key: str, highlight: int | None = None, signed=True):
    """A small matrix drawn with its numbers in the cells."""
    from attnviz import figures

    n = len(rows)
    fig = figures.heatmap(
        matrix,
        cols,
        rows,
        title=title,
        value_name="",
        signed=signed,
        zmin=0.0 if not signed else None,
        zmax=1.0 if not signed else None,
        show_values=True,
        highlight_row=highlight,
        height=max(220, 44 * n + 110),
        show_scale=False,
        x_title="",
        y_title="",
    )
    fig.update_xaxes(tickangle=0)
    chart(fig, key=key)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_sharing_check(text: str, config: StackConfig):
    from attnviz.sharing import sharing_check

    return sharing_check(text, config)


@st.cache_resource(show_spinner=False)
def cached_sweeps() -> tuple[list[dict], list[dict]]:
    """The variance and saturation sweeps of the Why-√d_k page: deterministic, computed once."""
    from attnviz.lessons import saturation_sweep, variance_sweep

    return variance_sweep(n_samples=20_000), saturation_sweep()


@st.cache_resource(max_entries=16, show_spinner=False)
def cached_order_check(text_a: str, text_b: str, config: StackConfig):
    from attnviz.positions import order_blindness

    return order_blindness(text_a, text_b, config)
