"""The Generate page's streamlit layer: the decoder, the run (cached per settings), a step."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.budget import size
from attnviz.engine.bundled import REGISTRY, TRAINED
from attnviz.engine.generate import (
    MAX_NEW_TOKENS,
    TRAINED_DECODER,
    Generation,
    Sampling,
    WhatIf,
    generate,
)
from attnviz.measures.whatif import head_ids, parse_head_ids
from attnviz.serve.public import allowed_models, public
from attnviz.ui import markup, url
from attnviz.ui.language import lang, said, t
from attnviz.ui.models import get_model, not_installed, pick_model, public_facts
from attnviz.ui.widgets import EXACT, chart, follow_default, url_select
from attnviz.views import training
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from attnviz.views.tokens import piece, shown


def decoder():
    """The decoder the page generates with (a bundled one from the picker, SmolLM2 or Gemma 3 by
    the UI's language where installed, or a name typed below it), or None after a message saying
    why not. In public mode, only the bundled decoders this server offers, never a typed name."""
    if public():
        offered = [n for n in allowed_models() if n in _DECODERS]
        if not offered:
            st.warning(t("gen.no_decoder"))
            return None
        default = url.default("g_pick", lang=lang())
        default = default if default in offered else offered[0]
        name = url_select(st.selectbox, t("gen.pick"), offered, "g_pick", default)
        public_facts(name)
    else:
        name = pick_model("g_pick", "g_model", t("gen.pick"), t("gen.other"), kind="decoder")
    if name == TRAINED_DECODER:
        st.caption(t("gen.default_note", name=markup.code(name)))
    if not name or not_installed(name):
        return None
    model = get_model(name, "auto")
    if model is not None and model.kind != "decoder":
        st.warning(t("gen.not_decoder", name=markup.code(model.name), kind=model.kind))
        return None
    return model


_DECODERS = {n for n, entry in TRAINED.items() if entry[1] == "decoder"} | {
    n for n, m in REGISTRY.items() if m.kind == "decoder"
}


@st.cache_resource(max_entries=8, show_spinner=False)  # a run: at most 64 rows per head
def _run(
    _model, model_key: str, prompt: str, n: int, sampling: Sampling, what_if: WhatIf
) -> Generation:
    return generate(_model, prompt, n, sampling, what_if)


def settings(model) -> tuple[str, int, Sampling, WhatIf] | None:
    """The prompt and every setting of the run, from widgets bound to the URL; None (after a
    message) when they do not make a run. Drawn without a model too (after a bad model name), so
    that the prompt and settings typed so far stay."""
    default = url.default("g_prompt", lang=lang())
    follow_default("g_prompt", default)  # in the UI's language, until one is typed
    prompt = st.text_area(t("gen.prompt"), default, height=80, **url.bound("g_prompt"))
    c1, c2, c3, c4, c5 = st.columns(5)
    n = c1.slider(t("gen.n"), 1, 64, url.default("g_n"), **url.bound("g_n"))
    greedy = c2.toggle(t("gen.greedy"), url.default("g_greedy"), **url.bound("g_greedy"))
    temp = c3.number_input(
        t("gen.stemp"), 0.05, 5.0, url.default("g_stemp"), 0.1, disabled=greedy,
        **url.bound("g_stemp"),
    )  # fmt: skip
    top_k = c4.number_input(
        t("gen.topk"), 0, 1000, url.default("g_topk"), 1, disabled=greedy, **url.bound("g_topk")
    )
    seed = c5.number_input(
        t("gen.seed"), 0, 2**31 - 1, url.default("g_seed"), 1, disabled=greedy,
        **url.bound("g_seed"),
    )  # fmt: skip
    with st.expander(t("gen.whatif"), expanded=bool(url.present("g_ablate"))):
        w1, w2, w3 = st.columns([1, 1, 2])
        use_scale = w1.toggle(t("gen.scale"), url.default("g_scale"), **url.bound("g_scale"))
        a_temp = w2.number_input(
            t("gen.atemp"), 0.05, 20.0, url.default("g_temp"), 0.1, **url.bound("g_temp")
        )
        kept = list(st.session_state.get("g_ablate", ()))
        if model is not None:
            ids = head_ids(model.n_layers, model.n_heads)
        else:  # no model to list its heads: keep what the session or the link has
            ids = list(dict.fromkeys(kept + url.values("g_ablate")))
        if any(h not in ids for h in kept):
            st.session_state["g_ablate"] = [h for h in st.session_state["g_ablate"] if h in ids]
        off = w3.multiselect(t("gen.ablate"), ids, list(url.default("g_ablate")),
                             placeholder=t("pretrained.pick_heads"), **EXACT,
                             **url.bound("g_ablate"))  # fmt: skip
    try:
        sampling = Sampling(greedy, float(temp), int(top_k), int(seed))
        what_if = WhatIf(use_scale, float(a_temp), frozenset(parse_head_ids(off)))
    except (ValueError, TypeError) as err:
        st.error(markup.escape(err))
        return None
    return prompt, min(n, MAX_NEW_TOKENS), sampling, what_if


def run(model, prompt: str, n: int, sampling: Sampling, what_if: WhatIf) -> Generation | None:
    try:
        with st.spinner(t("gen.running", n=n)):
            return _run(model, model.name, prompt, n, sampling, what_if)
    except (ValueError, TypeError) as err:  # the engine's refusals in the page's language
        st.error(markup.escape(said(err)))
        return None


ROWS_MAX_PX = 1000  # the rows chart's height: past ~38 heads a row gets thinner, not the page


def show(g: Generation) -> None:
    """The generated text, the step slider, the KV cache and the sink on the first token, and
    that step's rows in every layer and head."""
    # Every token drawn, whitespace as ␣ and ⏎: a run of spaces or line breaks is otherwise blank.
    pieces = [shown(piece(tok, text)) for tok, text in zip(g.tokens, _texts(g), strict=True)]
    prompt_text = markup.escape("".join(pieces[: g.n_prompt]))
    new_text = markup.escape("".join(pieces[g.n_prompt :]))
    st.markdown(t("gen.text", prompt=prompt_text, new=new_text, n=len(g.generated)))
    st.caption(t("gen.whitespace"))
    if g.stopped == "eos":
        st.caption(t("gen.stopped_eos"))
    last = len(g.steps) - 1
    step = url.read("g_step")
    if "g_step" not in st.session_state or st.session_state["g_step"] > last:
        st.session_state["g_step"] = min(step, last)
    if last > 0:
        st.slider(t("gen.step"), 0, last, key="g_step", help=t("gen.step_help"))
    step = min(int(st.session_state["g_step"]), last)
    url.sync("g_step", url.default("g_step"))
    s = g.steps[step]
    n_k = s.position + 1
    labels = pieces[:n_k]  # numbered "i: token" by the map where it helps (hover, sparse ticks)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric(t("gen.query"), pieces[s.position], help=t("gen.query_help"))
    c2.metric(t("gen.chosen", p=f"{s.p_next:.3g}"), pieces[s.position + 1])
    c3.metric(t("gen.cache"), size(s.kv_bytes), help=t("gen.cache_help", d=g.d_head))
    sink = float(g.sink(step).mean())
    c4.metric(t("gen.sink"), f"{sink:.0%}", help=t("gen.sink_help", u=1 / n_k))
    # The slider's small charts first, beside it: below SmolLM2's 270 rows they were 6,000 px
    # down the page from the slider that moves them.
    left, right = st.columns(2)
    with left:
        fig = training.cache_growth(
            [x.position + 1 for x in g.steps], [x.kv_bytes for x in g.steps], step,
            title=t("gen.cache_title"), x_title=t("gen.cache_x"), y_title="KiB",
        )  # fmt: skip
        chart(fig, key="gen_cache")
    with right:
        sinks = [float(g.sink(i).mean()) for i in range(len(g.steps))]
        uniform = [1 / (x.position + 1) for x in g.steps]
        xs = [x.position + 1 for x in g.steps]
        fig = training.curves(
            {t("gen.sink_series"): (xs, sinks), t("gen.uniform_series"): (xs, uniform)},
            title=t("gen.sink_title"), x_title=t("gen.cache_x"), y_title=t("w.weights"),
            guides=training.Guides(marks={str(step): xs[step]}), height=300, from_zero=False,
        )  # fmt: skip
        chart(fig, key="gen_sink")
    st.markdown(t("gen.sink_explained", sink=sink, u=1 / n_k))
    rows = s.weights.reshape(g.n_layers * g.n_heads, n_k)  # [layer * head, n_k]
    heads = [f"L{la}H{h}" for la in range(g.n_layers) for h in range(g.n_heads)]
    ticks = None if n_k > 40 else 48  # past 40 keys: as many labels as the pixels allow
    fig = draw_map(
        rows, Axis(labels, t("w.key"), ticks=ticks),
        Axis(heads, t("gen.head"), ticks=ticks, named=True),
        Colour(zmin=0.0, zmax=1.0, value=t("w.weights")), Marks(),
        Frame(t("gen.rows_title", tok=pieces[s.position], step=step),
              min(ROWS_MAX_PX, max(320, 22 * len(heads) + 160))),
    )  # fmt: skip
    chart(fig, key="gen_rows", name=f"generate_step_{step}")


def _texts(g: Generation) -> list[str]:
    """Each token's text (decoded alone); the raw tokens where a run has none."""
    return g.texts if len(g.texts) == len(g.tokens) else list(g.tokens)
