"""Masks (note 002, with 001 and 004): causal, padding, the note's "1e-10", a fully masked row,
cross-attention. Every number comes from attnviz.lessons.masks."""

import pandas as pd
import streamlit as st

from attnviz import ui
from attnviz.lessons import formulas, masks
from attnviz.ui import url

t = ui.t
st.title(t("mk.title"))
st.caption(t("mk.intro"))


def fmt(x: float) -> str:
    if x != x:  # NaN
        return "NaN"
    return "−∞" if x == float("-inf") else f"{x:.3f}"


try:
    causal = masks.causal_lesson(ui.text())
except ValueError:
    st.info(t("err.empty"))
    st.stop()
tokens = causal.tokens
if causal.n_input_tokens > len(tokens):
    st.info(t("mk.truncated", n=causal.n_input_tokens, k=len(tokens)))

# 1 · the decoder's causal mask
st.subheader(t("mk.causal"))
st.markdown(t("mk.causal_help"))
st.latex(formulas.step("weights", formulas.Knobs(masked=True)))
c1, c2, c3 = ui.matrix_columns(3, key="mk_causal")
with c1:
    ui.numbers(causal.logits, tokens, tokens, t("mk.logits"), key="mk_logits")
with c2:
    ui.numbers(masks.additive(causal.mask), tokens, tokens, t("mk.m"), key="mk_m")
with c3:
    ui.numbers(causal.masked_logits, tokens, tokens, t("mk.masked_logits"), key="mk_masked")

# 2 · note 002's "1e-10" beside -inf
st.subheader(t("mk.fill"))
st.markdown(t("mk.fill_help"))
fills = [name for name in masks.FILLS if name != "-inf"]
url.seed("mk_fill", fills, url.default("mk_fill"))  # by value: the labels are translated
fill = st.segmented_control(
    t("mk.fill_pick"), fills, format_func={n: t(f"mk.fill.{n}") for n in fills}.get, key="mk_fill"
)
url.sync("mk_fill", url.default("mk_fill"))
fill = fill or url.default("mk_fill")
c1, c2 = ui.matrix_columns(2, key="mk_fill")
with c1:
    ui.numbers(causal.weights["-inf"], tokens, tokens, t("mk.w_inf"), key="mk_w_inf", signed=False)
with c2:
    ui.numbers(
        causal.weights[fill],
        tokens,
        tokens,
        t("mk.w_fill", fill=t(f"mk.fill.{fill}")),
        key="mk_w_fill",
        signed=False,
    )
m1, m2 = st.columns(2)
m1.metric(t("mk.leak", fill="−∞"), f"{causal.leak['-inf']:.3f}")
m2.metric(t("mk.leak", fill=t(f"mk.fill.{fill}")), f"{causal.leak[fill]:.3f}")
st.caption(t(f"mk.fill_says.{fill}"))

# 3 · a padding mask over a batch of two sentences
st.subheader(t("mk.padding"))
st.markdown(t("mk.padding_help"))
second = ui.pair() or t("mk.default_pair")
try:
    pad = masks.padding_lesson(ui.text(), second)
except ValueError as err:
    st.info(str(err))
else:
    cols = ui.matrix_columns(2, key="mk_padding")
    for b, col in enumerate(cols):
        with col:
            ui.numbers(
                pad.weights[b],
                pad.tokens[b],
                pad.tokens[b],
                t("mk.pad_title", b=b),
                key=f"mk_pad_{b}",
                signed=False,
            )
    m1, m2 = st.columns(2)
    m1.metric(t("mk.pad_weight"), f"{pad.pad_weight:.1e}")
    m2.metric(t("mk.pad_gap"), f"{pad.unpadded_gap:.1e}")

# 4 · a row with every key masked
st.subheader(t("mk.empty"))
empty = masks.empty_row(causal.logits[0])
rows = {t("mk.empty_logits"): empty.logits.tolist()}
rows.update(
    {t("mk.empty_naive", fill=t(f"mk.fill.{name}")): w.tolist() for name, w in empty.naive.items()}
)
rows[t("mk.empty_ours")] = empty.attnviz.tolist()
ui.table(
    pd.DataFrame(
        {name: [fmt(x) for x in values] for name, values in rows.items()},
        index=[f"{j}: {tok}" for j, tok in enumerate(tokens)],
    ).T,
    width="stretch",
    key="mk_empty_table",
)
st.markdown(t("mk.empty_help"))

# 5 · cross-attention
st.subheader(t("mk.cross"))
st.markdown(t("mk.cross_help"))
cross = masks.cross_lesson(ui.text(), second)
lt = cross.layer
ui.numbers(
    lt.weights[0],
    cross.kv_tokens,
    cross.q_tokens,
    t("mk.cross_title"),
    key="mk_cross",
    signed=False,
)
ui.table(
    pd.DataFrame(
        {
            t("mk.tensor"): list(cross.shapes),
            t("mk.shape"): [" × ".join(map(str, s)) for s in cross.shapes.values()],
            t("mk.from"): [t(f"mk.from.{name}") for name in cross.shapes],
        }
    ),
    hide_index=True,
    width="stretch",
    key="mk_shapes",
)
st.caption(t("mk.cross_check", gap=cross.sdpa_gap, q=len(cross.q_tokens), k=len(cross.kv_tokens)))
ui.lesson_nav("masks")
