"""Multi-head attention and its cost (notes 000, 001, 003, 004): shapes, heads, concat, W_O,
parameter and KV-cache calculators, Table 3 of the paper reproduced."""

import pandas as pd
import streamlit as st

from attnviz import StackConfig, ui
from attnviz.engine.config import divisors
from attnviz.lessons import costs, formulas
from attnviz.ui import url
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map

t = ui.t
st.title(t("mh.title"))
st.markdown(t("mh.intro"))

c1, c2, c3, c4, c5 = st.columns(5)
with c1:
    d_model = ui.choice_slider(
        t("pg.d_model"), list(url.key("mh_d").options), "mh_d", url.default("mh_d")
    )
with c2:
    heads = [h for h in divisors(d_model) if h <= 32]
    n_heads = ui.choice_slider(t("pg.heads"), heads, "mh_h", url.default("mh_h"))
with c3:
    n_kv = ui.kv_slider(t("pg.kv_heads"), n_heads, "mh_kv", url.default("mh_kv", heads=n_heads))
with c4:
    n_layers = st.slider(t("pg.layers"), 1, 12, url.default("mh_layers"), **url.bound("mh_layers"))
with c5:
    d_ff = ui.choice_slider(
        t("mh.d_ff"), list(url.key("mh_ff").options), "mh_ff", url.default("mh_ff")
    )
d_k = d_model // n_heads
config = StackConfig(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv)


def calculators(n: int | None) -> None:
    """Parameters, KV cache, FLOPs (for n tokens, when there is a sentence) and Table 3."""
    attention_params()
    transformer_params()
    kv_cache()
    if n is not None:  # FLOPs need the sentence's length
        flops(n)
    table3()


def attention_params() -> None:
    """One attention layer's parameters: one head, h heads, GQA and MQA."""
    st.subheader(t("mh.params"))
    st.caption(t("mh.params_help"))
    rows = [
        (t("mh.row.single"), costs.attention_params(d_model, 1, out_proj=False)),
        (t("mh.row.multi", h=n_heads), costs.attention_params(d_model, n_heads)),
    ]
    if 1 < n_kv < n_heads:
        rows.append(
            (t("mh.row.gqa", kv=n_kv), costs.attention_params(d_model, n_heads, n_kv_heads=n_kv))
        )
    rows.append((t("mh.row.mqa"), costs.attention_params(d_model, n_heads, n_kv_heads=1)))
    ui.table(
        pd.DataFrame(
            {
                t("mh.col.layer"): [r[0] for r in rows],
                t("mh.col.params"): [f"{r[1]:,}" for r in rows],
                t("mh.col.in_d2"): [f"{r[1] / d_model**2:.3f} d²" for r in rows],
            }
        ),
        hide_index=True,
        width="stretch",
    )


def transformer_params() -> None:
    """A whole transformer's parameters, part by part, for a vocabulary the reader picks."""
    st.markdown(f"**{t('mh.transformer')}**")
    vocab = st.number_input(
        t("mh.vocab"), 1000, 300_000, url.default("mh_vocab"), step=1000, **url.bound("mh_vocab")
    )
    parts = costs.transformer_params_breakdown(
        d_model, n_heads, d_ff, n_layers, int(vocab), n_kv_heads=n_kv
    )
    st.caption(t("mh.total", m=sum(parts.values()) / 1e6))
    ui.table(
        ui.localized(
            pd.DataFrame(
                {"part": list(parts), t("mh.col.params"): [f"{v:,}" for v in parts.values()]}
            ),
            cells=("part",),
        ),
        hide_index=True,
    )


def kv_cache() -> None:
    """The KV cache per token and in all for MHA, GQA and MQA, at a length and batch picked."""
    st.subheader(t("mh.kv"))
    st.caption(t("mh.kv_help"))
    k1, k2, k3 = st.columns(3)
    seq = k1.number_input(
        t("mh.seq"), 1, 1_000_000, url.default("mh_seq"), step=512, **url.bound("mh_seq")
    )
    batch = k2.number_input(
        t("mh.batch"), 1, 4096, url.default("mh_batch"), **url.bound("mh_batch")
    )
    nbytes = k3.selectbox(
        t("mh.bytes"),
        options := list(url.key("mh_bytes").options),
        index=options.index(url.default("mh_bytes")),
        **url.bound("mh_bytes"),
    )
    kinds = [("MHA", n_heads)] + ([("GQA", n_kv)] if 1 < n_kv < n_heads else []) + [("MQA", 1)]
    ui.table(
        pd.DataFrame(
            {
                t("mh.col.kind"): [k for k, _ in kinds],
                t("mh.col.kv_heads"): [kv for _, kv in kinds],
                t("mh.col.per_token"): [
                    f"{costs.kv_cache_per_token(n_layers, kv, d_k, nbytes) / 1024:,.1f} KiB"
                    for _, kv in kinds
                ],
                t("mh.col.total"): [
                    f"{cache / 2**20:,.1f} MiB"
                    for cache in (
                        costs.kv_cache_bytes(n_layers, kv, d_k, int(seq), int(batch), nbytes)
                        for _, kv in kinds
                    )
                ],
            }
        ),
        hide_index=True,
        width="stretch",
    )


def flops(n: int) -> None:
    """The FLOPs of one attention layer over n tokens, h heads against one."""
    st.subheader(t("mh.flops"))
    st.caption(t("mh.flops_help", n=n))
    many = costs.flops_attention(n, n, d_model, n_heads, d_k)
    one = costs.flops_attention(n, n, d_model, 1, d_model)
    ui.table(
        ui.localized(
            pd.DataFrame(
                {
                    "part": list(many),
                    f"h = {n_heads}": [f"{v:,}" for v in many.values()],
                    "h = 1": [f"{v:,}" for v in one.values()],
                }
            ),
            cells=("part",),
        ),
        hide_index=True,
    )


def table3() -> None:
    """Table 3 of the paper, its parameter counts recomputed by the calculator."""
    st.subheader(t("mh.table3"))
    st.caption(t("mh.table3_help"))
    table = pd.DataFrame(costs.TABLE3)
    table["calculator_m"] = [round(costs.table3_params(row) / 1e6, 1) for row in costs.TABLE3]
    table["calc / paper"] = [
        None if p is None else round(c / p, 3)
        for c, p in zip(table["calculator_m"], table["paper_params_m"], strict=True)
    ]
    # The paper leaves rows A blank: show "—", not "None".
    table["paper_params_m"] = ["—" if pd.isna(p) else f"{p:.0f}" for p in table["paper_params_m"]]
    table["calc / paper"] = ["—" if pd.isna(r) else f"{r:.3f}" for r in table["calc / paper"]]
    ui.table(
        ui.localized(
            table[
                [
                    "row",
                    "n_layers",
                    "d_model",
                    "d_ff",
                    "n_heads",
                    "d_k",
                    "d_v",
                    "paper_params_m",
                    "calculator_m",
                    "calc / paper",
                ]
            ],
            cells=("row",),
        ),
        hide_index=True,
        width="stretch",
    )


trace = ui.run_stack_trace(config)
if trace is None:  # the calculators and Table 3 do not need the sentence
    calculators(None)
    st.stop()
n = len(trace.tokens)

st.subheader(t("mh.shapes", n=n))
# Written from the config that computed the heads below.
st.latex(
    formulas.head(
        formulas.Knobs(
            use_scale=config.use_scale, temperature=config.temperature, masked=config.causal
        )
    )
)
ui.table(
    ui.localized(
        pd.DataFrame(costs.multihead_shapes(n, d_model, n_heads, n_kv_heads=n_kv, lang=ui.lang()))
    ),
    hide_index=True,
    width="stretch",
)

layer = trace.layers[0]
st.markdown(f"**{t('mh.heads_z')}**")
shown = min(n_heads, 8)
cols = st.columns(shown)
for h in range(shown):
    with cols[h]:
        fig = draw_map(
            layer.z[h],
            Axis.dims(d_k, "", ticks=4),
            Axis(trace.tokens, ticks=4, labels=h == 0),
            Colour.diverging("z", show_bar=False),
            Marks(),
            Frame(t("pg.head_title", h=h), 300),
        )
        ui.chart(fig, key=f"z_{h}")
concat = layer.z.transpose(0, 1).reshape(n, n_heads * d_k)  # [n, h*d_k]: torch.cat of the heads
panels = (
    (concat, f"{t('mh.concat')} · {n} × {n_heads * d_k}", "concat"),
    (layer.output, f"{t('mh.output')} · {n} × {d_model}", "output"),
)
for col, (matrix, title, name) in zip(st.columns(2), panels, strict=True):
    with col:
        fig = draw_map(
            matrix, Axis.dims(matrix.shape[-1], t("w.dim")), Axis(trace.tokens, ticks=16),
            Colour.diverging(name), Marks(), Frame(title, 320),
        )  # fmt: skip
        ui.chart(fig, key=name)

calculators(n)

ui.lesson_nav("multihead")
