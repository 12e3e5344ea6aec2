"""The Playground's controls inside the server's budget, and its cached traces.

Only settings that fit are offered; a link that asks for more is told so (the engine refuses
over-budget work anyway). The toy stack's traces are cached by bytes (attnviz.ui.caching).
"""

from __future__ import annotations

import streamlit as st

from attnviz.engine.budget import budget, check_stack_run
from attnviz.engine.config import StackConfig, divisors
from attnviz.engine.request import TraceRequest
from attnviz.engine.tokenize import tokenize
from attnviz.engine.trace import Trace
from attnviz.ui import markup, url
from attnviz.ui.language import input_problem, t
from attnviz.ui.sidebar import pair, text
from attnviz.ui.widgets import choice_slider, kv_slider, report_trace_notes, url_select

D_MODELS = list(url.key("d_model").options)


def tokens_of(text: str | None) -> int:
    """How many tokens the toy stack will run for `text` (cut at the limit); 1 if it has none."""
    try:
        n = len(tokenize(text or ""))
    except (ValueError, TypeError):
        return 1
    return max(1, min(n, budget().max_tokens, StackConfig.max_tokens))


def refusal(n_q: int, n_k: int, **settings) -> str | None:
    """The engine's message if a toy-stack trace with these StackConfig settings is refused."""
    try:
        check_stack_run(StackConfig(**settings), n_q, n_k)
    except (ValueError, TypeError) as err:
        return str(err)
    return None


def fits(n_q: int, n_k: int, **settings) -> bool:
    return refusal(n_q, n_k, **settings) is None


def link_refusal(n_q: int, n_k: int) -> str | None:
    """What the engine says about the Playground settings the URL asks for (?d_model=...&heads=...),
    read before any widget clamps them; None when they fit or the link sets none of them."""
    names = ("d_model", "dk_auto", "d_head", "heads", "kv", "layers", "ffn")
    if not any(url.present(name) for name in names):
        return None
    heads = url.read("heads")
    return refusal(
        n_q,
        n_k,
        d_model=url.read("d_model"),
        n_heads=heads,
        d_head=None if url.read("dk_auto") else url.read("d_head"),
        n_kv_heads=url.read("kv", heads=heads),
        n_layers=url.read("layers"),
        ffn=url.read("ffn"),
    )


def stack_controls() -> StackConfig | None:
    """The Playground's sliders; only valid combinations are reachable. None (with a message) if
    the settings still do not fit together."""
    n_q, n_k = tokens_of(text()), tokens_of(pair() or text())
    refused = "d_model" not in st.session_state and link_refusal(n_q, n_k)
    if refused:  # a link asked for more than the budget: say so, and trace nothing this run
        st.error(t("err.link_budget", msg=markup.escape(refused)))
    c1, c2, c3, c4, c5 = st.columns(5)
    with c1:
        d_model = choice_slider(t("pg.d_model"), D_MODELS, "d_model", url.default("d_model"))
    with c3:
        auto = st.toggle(t("pg.d_head_auto"), value=url.default("dk_auto"), **url.bound("dk_auto"))
        d_head = None
        if not auto:
            d_head = st.number_input(
                t("pg.d_head"), 1, 1024, value=url.default("d_head"), step=1, **url.bound("d_head")
            )
    with c2:
        head_options = [h for h in divisors(d_model) if h <= 32] if auto else list(range(1, 33))
        fit = [h for h in head_options if fits(n_q, n_k, d_model=d_model, n_heads=h, d_head=d_head)]
        head_options = fit or head_options[:1]
        n_heads = choice_slider(
            t("pg.heads"), head_options, "heads", url.default("heads"), help=t("pg.heads_help")
        )
    with c4:
        n_kv = kv_slider(t("pg.kv_heads"), n_heads, "kv", url.default("kv", heads=n_heads))
    with c5:
        ffn_on = st.session_state.get("ffn") is True
        more = [n for n in range(2, 7) if fits(n_q, n_k, d_model=d_model, n_heads=n_heads,
                d_head=d_head, n_kv_heads=n_kv, n_layers=n, ffn=ffn_on)]  # fmt: skip
        n_layers = 1
        if more:
            top = max(more)
            if isinstance(st.session_state.get("layers"), int) and st.session_state["layers"] > top:
                st.session_state["layers"] = top  # the text grew: keep the slider in its range
            n_layers = st.slider(
                t("pg.layers"), 1, top, min(url.default("layers"), top), **url.bound("layers")
            )
        else:
            st.caption(t("pg.one_layer"))
    t1, t2, t3, t4, t5, t6 = st.columns(6)
    use_scale = t1.toggle(
        t("pg.scale"), value=url.default("scale"), help=t("pg.scale_help"), **url.bound("scale")
    )
    causal = t2.toggle(t("pg.causal"), value=url.default("causal"), **url.bound("causal"))
    add_norm = t3.toggle(t("pg.add_norm"), value=url.default("addnorm"), **url.bound("addnorm"))
    ffn = t4.toggle(t("pg.ffn"), value=url.default("ffn"), **url.bound("ffn"))
    positional = url_select(
        t5.selectbox,
        t("pg.positional"),
        list(url.key("pos").options),
        "pos",
        url.default("pos"),
        format_func={p: t(f"pg.positional.{p}") for p in url.key("pos").options}.get,
        help=t("pg.positional_help"),
    )
    temperature = t6.number_input(
        t("pg.temperature"), 0.05, 20.0, value=url.default("temp"), step=0.25, **url.bound("temp")
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


def stack_trace(text: str, config: StackConfig, text_pair: str | None = None) -> Trace:
    """The toy stack's trace, cached on (text, config, pair) by bytes and shared: read-only."""
    from attnviz.ui.caching import cached_trace

    return cached_trace(TraceRequest(config, text, text_pair))


def run_stack_trace(config: StackConfig, say: bool = True) -> Trace | None:
    """Trace the sidebar's text; a clear message instead of a traceback when the text is bad.

    say=False stays silent: for a second trace of the same text, whose notes were already shown.
    """
    try:
        trace = stack_trace(text(), config, pair())
    except (ValueError, TypeError) as err:
        if say:
            st.info(input_problem(err))
        return None
    if say:
        report_trace_notes(trace)
    return trace
