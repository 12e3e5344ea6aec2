"""The only streamlit importer in the package: cached engine calls and shared widgets."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from attnviz.engine.config import StackConfig
from attnviz.engine.stack import trace_text
from attnviz.engine.trace import Trace
from attnviz.i18n import LANGUAGES, examples, language_of, translate
from attnviz.ui import markup
from attnviz.views.spec import PLOTLY_CONFIG, Spec

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


def browser_locale() -> str | None:
    """The browser's language (navigator.language, e.g. "zh-CN"); None outside a browser."""
    try:
        return st.context.locale
    except Exception:  # noqa: BLE001  (no script run context: a bare import, a test harness)
        return None


_LANG_TO_URL = "_lang_to_url"  # the language was picked from an alias or the browser: URL it


def _seed_language() -> None:
    """Before the language picker's first run: a link's ?lang=zh (or zh-CN, cn, chinese...) opens
    in Chinese, though the picker itself writes its label (?lang=中文), which nobody types. With no
    language in the link, a browser set to Chinese opens in Chinese. A value that names no language
    is dropped from the URL (the page opens in English, the default)."""
    if st.session_state.pop(_LANG_TO_URL, False):
        # Set again now that the picker has run once: the binding then writes it to the URL.
        st.session_state["lang"] = st.session_state["lang"]
        return
    if "lang" in st.session_state:  # from the first run on, the picker decides
        return
    raw = st.query_params.get("lang")
    code = language_of(raw) if raw is not None else language_of(browser_locale())
    if raw is not None and code != "zh":  # English is the default: not kept in the URL
        del st.query_params["lang"]
    if code == "zh":
        st.session_state["lang"] = LANGUAGES["zh"]
        st.session_state[_LANG_TO_URL] = raw != LANGUAGES["zh"]


def sidebar() -> None:
    """Language, the sentence and its examples: shared by every page, kept in the URL."""
    _seed_language()
    with st.sidebar:
        st.radio(
            translate("side.language"),
            list(LANGUAGES.values()),
            key="lang",
            horizontal=True,
            bind="query-params",
        )
        from attnviz.ui.projector import toggle as projector_toggle

        projector_toggle()
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
    """Start a widget from the URL (?key=value) when it (re)appears, by option value, not label.

    For widgets whose labels are translated: streamlit's bind="query-params" would put the
    translated label in the URL, so a link would change with the language. Without a value in the
    URL, the last value this session had (kept by url_sync) comes back: the browser drops the
    query string when you go to another page, and coming back must not reset the page.
    """
    if key in st.session_state:
        return
    by_text = {str(o): o for o in options}
    kept = st.session_state.get(_KEPT + key)
    fallback = kept if kept in options else default
    st.session_state[key] = by_text.get(st.query_params.get(key), fallback)


_KEPT = "_url_kept_"


def url_sync(key: str, default) -> None:
    """Write the widget's value to the URL, or drop it when it is the default; keep it for
    url_seed in case the widget goes away (another page, a run without it)."""
    value = st.session_state.get(key)
    st.session_state[_KEPT + key] = value
    if value is None or value == default:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != str(value):
        st.query_params[key] = str(value)


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
    if st.session_state.get("projector"):
        import plotly.graph_objects as go

        from attnviz.views.projector import enlarge

        # A copy: the figure may be cached (the overview's mosaic, per trace), and enlarging it
        # in place grew its fonts again on every rerun.
        fig = enlarge(fig.figure() if isinstance(fig, Spec) else go.Figure(fig))
    return st.plotly_chart(fig, config=config, key=key, **kwargs)


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
    url_seed(key, options, default)
    old = st.session_state[key]
    if old not in options:
        numeric = isinstance(old, (int, float)) and all(
            isinstance(o, (int, float)) for o in options
        )
        st.session_state[key] = min(options, key=lambda o: abs(o - old)) if numeric else default
    value = st.select_slider(label, options, key=key, **kwargs)
    url_sync(key, default)
    return value


def kv_follow(n_heads: int, old_heads: int, old_kv: int) -> int:
    """The K/V heads after the query heads moved from old_heads to n_heads, keeping the kind:
    MHA stays MHA (K/V = heads), MQA stays MQA (1), GQA keeps its group size where it can and
    otherwise takes the nearest K/V count that is still grouped (1 < K/V < heads)."""
    from attnviz.engine.config import divisors

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
    from attnviz.engine.config import divisors

    seen = f"_{key}_heads"  # the heads this slider was last drawn for
    old_heads = st.session_state.get(seen)
    if key in st.session_state and old_heads is not None and old_heads != n_heads:
        st.session_state[key] = kv_follow(n_heads, old_heads, st.session_state[key])
    st.session_state[seen] = n_heads
    return choice_slider(label, divisors(n_heads), key, default, **kwargs)


def url_select(widget, label: str, options: list, key: str, default, **kwargs):
    """A selectbox/radio/segmented control kept in the URL by option value, not by its (translated)
    label, so a link is the same in both languages."""
    url_seed(key, options, default)
    if st.session_state[key] not in options:
        st.session_state[key] = default
    value = widget(label, options, key=key, **kwargs)
    url_sync(key, default)
    return value


D_MODELS = [8, 16, 32, 64, 128, 256, 512, 1024]


def stack_controls(defaults: dict | None = None) -> StackConfig | None:
    """The Playground's sliders; only valid combinations are reachable. None (with a message) if
    the settings still do not fit together."""
    from attnviz.engine.config import divisors
    from attnviz.ui import limits

    d = {"d_model": 64, "heads": 4, "layers": 1, **(defaults or {})}
    n_q, n_k = limits.tokens_of(text()), limits.tokens_of(pair() or text())
    refused = "d_model" not in st.session_state and limits.link_refusal(n_q, n_k)
    if refused:  # a link asked for more than the budget: say so, and trace nothing this run
        st.error(t("err.link_budget", msg=markup.escape(refused)))
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
        fit = [h for h in head_options if limits.fits(n_q, n_k, d_model=d_model, n_heads=h,
                                                      d_head=d_head)]  # fmt: skip
        head_options = fit or head_options[:1]
        n_heads = choice_slider(
            t("pg.heads"), head_options, "heads", d["heads"], help=t("pg.heads_help")
        )
    with c4:
        n_kv = kv_slider(t("pg.kv_heads"), n_heads, "kv", n_heads)
    with c5:
        ffn_on = st.session_state.get("ffn") is True
        more = [n for n in range(2, 7) if limits.fits(n_q, n_k, d_model=d_model, n_heads=n_heads,
                d_head=d_head, n_kv_heads=n_kv, n_layers=n, ffn=ffn_on)]  # fmt: skip
        n_layers = 1
        if more:
            top = max(more)
            if isinstance(st.session_state.get("layers"), int) and st.session_state["layers"] > top:
                st.session_state["layers"] = top  # the text grew: keep the slider in its range
            n_layers = st.slider(
                t("pg.layers"), 1, top, min(d["layers"], top), key="layers", bind="query-params"
            )
        else:
            st.caption(t("pg.one_layer"))
    t1, t2, t3, t4, t5, t6 = st.columns(6)
    use_scale = t1.toggle(
        t("pg.scale"), value=True, key="scale", help=t("pg.scale_help"), bind="query-params"
    )
    causal = t2.toggle(t("pg.causal"), value=False, key="causal", bind="query-params")
    add_norm = t3.toggle(t("pg.add_norm"), value=False, key="addnorm", bind="query-params")
    ffn = t4.toggle(t("pg.ffn"), value=False, key="ffn", bind="query-params")
    positional = url_select(
        t5.selectbox,
        t("pg.positional"),
        ["sinusoidal", "none"],
        "pos",
        "sinusoidal",
        format_func={p: t(f"pg.positional.{p}") for p in ("sinusoidal", "none")}.get,
        help=t("pg.positional_help"),
    )
    temperature = t6.number_input(
        t("pg.temperature"), 0.05, 20.0, value=1.0, step=0.25, key="temp", bind="query-params"
    )
    if refused:
        return None
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
    except (ValueError, TypeError) as err:
        st.error(t("err.config", msg=markup.escape(err)))
        return None


def run_stack_trace(config: StackConfig, say: bool = True) -> Trace | None:
    """Trace the sidebar's text; a clear message instead of a traceback when the text is bad.

    say=False stays silent: for a second trace of the same text, whose notes were already shown.
    """
    try:
        trace = stack_trace(text(), config, pair())
    except (ValueError, TypeError) as err:
        if say:
            st.info(t("err.empty") if "empty" in str(err) else markup.escape(err))
        return None
    if say:
        report_trace_notes(trace)
    return trace


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_walkthrough(
    text: str, d_k: int, use_scale: bool, causal: bool, temperature: float = 1.0
):
    from attnviz.lessons.walkthrough import walkthrough

    return walkthrough(text, d_k=d_k, use_scale=use_scale, causal=causal, temperature=temperature)


def numbers(matrix, cols, rows, title: str, key: str, highlight: int | None = None, signed=True):
    """A small matrix drawn with its numbers in the cells."""
    from attnviz.views import heatmaps

    n = len(rows)
    fig = heatmaps.heatmap(
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
    if sum(len(str(c)) for c in cols) <= 36:  # longer token labels would run together flat
        fig.update_xaxes(tickangle=0)
    chart(fig, key=key)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_sharing_check(text: str, config: StackConfig):
    from attnviz.lessons.sharing import sharing_check

    return sharing_check(text, config)


@st.cache_resource(show_spinner=False)
def cached_sweeps() -> tuple[list[dict], list[dict]]:
    """The variance and saturation sweeps of the Why-√d_k page: deterministic, computed once."""
    from attnviz.lessons.scaling import saturation_sweep, variance_sweep

    return variance_sweep(n_samples=20_000), saturation_sweep()


@st.cache_resource(max_entries=16, show_spinner=False)
def cached_order_check(text_a: str, text_b: str, config: StackConfig):
    from attnviz.lessons.positions import order_blindness

    return order_blindness(text_a, text_b, config)


def localized(table, cells: tuple[str, ...] = ()):
    """A DataFrame for display in the UI language: columns named by t("col.<name>") where the
    language file has that key, and the listed columns' text cells by t("cell.<value>").
    Missing values show as "—" in those columns. The engine's frames keep their English names
    (CSV exports and the JSON trace stay stable)."""
    from attnviz.i18n import strings

    known = strings(lang())
    table = table.copy()
    for col in cells:
        table[col] = [
            "—" if v is None or v != v else t(f"cell.{v}") if f"cell.{v}" in known else v
            for v in table[col]
        ]
    names = {c: t(f"col.{c}") for c in table.columns if f"col.{c}" in known}
    names |= {c: t("col.on", name=c[3:]) for c in table.columns if str(c).startswith("on ")}
    return table.rename(columns=names)


def numbered(tokens, none: str | None = None) -> Callable[[int | None], str]:
    """A picker's format_func, "3: cat" for position 3. Over the tokens only, never a trace or a
    page's namespace: Streamlit keeps a widget's format_func with the session (and a closed
    session for two minutes), and a lambda written in a page script would keep that page's
    globals, its traces included (~90 MiB a session at 512 tokens; bench/load.py)."""
    tokens = list(tokens)

    def label(i: int | None) -> str:
        return none if i is None else f"{i}: {tokens[i]}"

    return label


def distinct_labels(tokens: list[str]) -> list[str]:
    """Token labels for a picker, a repeat marked by its position ("the", "the·4"): Streamlit tells
    options apart by their label, so two "the" options would be one."""
    seen: set[str] = set()
    out = []
    for i, tok in enumerate(tokens):
        out.append(f"{tok}·{i}" if tok in seen else tok)
        seen.add(tok)
    return out
