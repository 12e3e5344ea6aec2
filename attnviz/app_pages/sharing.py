"""MHA, MQA and GQA (note 003): who shares which K/V, keys per group, live equivalence checks."""

import pandas as pd
import streamlit as st

from attnviz import ui
from attnviz.engine.config import StackConfig
from attnviz.lessons.sharing import comparison, kv_head_of
from attnviz.ui import pretrained, url
from attnviz.views import charts
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map

t = ui.t
st.title(t("sh.title"))
st.caption(t("sh.intro"))

c1, c2, c3 = st.columns(3)
with c1:
    d_model = ui.choice_slider(
        t("pg.d_model"), list(url.key("sh_d").options), "sh_d", url.default("sh_d")
    )
with c2:
    n_heads = ui.choice_slider(
        t("pg.heads"), list(url.key("sh_h").options), "sh_h", url.default("sh_h")
    )
with c3:
    n_kv = ui.kv_slider(t("sh.kv"), n_heads, "sh_kv", url.default("sh_kv", heads=n_heads))
config = StackConfig(d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv)

st.markdown(
    t("sh.mode", mode=config.sharing, h=n_heads, kv=n_kv, g=n_heads // n_kv),
)
kv_of = kv_head_of(n_heads, n_kv)
ui.chart(
    charts.sharing_diagram(kv_of, q_label=t("sh.q_heads"), kv_label=t("sh.kv_row")), key="diagram"
)
st.caption(t("sh.rule"))

trace = ui.run_stack_trace(config)
if trace is not None:
    st.subheader(t("sh.keys"))
    layer = trace.layers[0]
    per_row = min(n_kv, 4)
    cells = ui.grid(n_kv, per_row)
    for g in range(n_kv):
        heads = ", ".join(str(h) for h in range(n_heads) if kv_of[h] == g)
        k = layer.k[g]  # [k, d_head]
        fig = draw_map(
            k, Axis.dims(k.shape[-1], t("w.dim"), ticks=8),
            Axis(trace.key_tokens, t("w.key"), ticks=8), Colour.diverging("k", show_bar=False),
            Marks(),
            Frame(t("sh.k_title", g=g, heads=heads), 320),
        )  # fmt: skip
        with cells[g]:
            ui.chart(fig, key=f"k_{g}")

    st.subheader(t("sh.check"))
    check = ui.cached_sharing_check(ui.text(), config)
    m1, m2, m3 = st.columns(3)
    m1.metric(t("sh.check_tied"), f"{check.gqa_vs_tied_mha:.1e}")
    m2.metric(t("sh.check_all"), f"{check.all_groups_vs_mha:.1e}")
    m3.metric(t("sh.check_one"), f"{check.one_group_vs_mqa:.1e}")
    st.caption(t("sh.check_help"))

st.subheader(t("sh.table"))
seq_len = 4096
numbers = comparison(config, seq_len=seq_len)
mha, mqa, gqa = numbers.values()
own, group, shared = t("sh.own"), t("sh.shared_group"), t("sh.shared_all")
rows = {
    t("sh.row.q"): (own, own, own),
    t("sh.row.k"): (own, shared, group),
    t("sh.row.v"): (own, shared, group),
    t("sh.row.kv_heads"): tuple(str(c["kv_heads"]) for c in (mha, mqa, gqa)),
    t("sh.row.params"): tuple(f"{c['params']:,}" for c in (mha, mqa, gqa)),
    t("sh.row.kv_params"): tuple(f"{c['kv_params']:,}" for c in (mha, mqa, gqa)),
    t("sh.row.cache", n=seq_len): tuple(
        f"{c['cache_bytes'] / 2**20:,.2f} MiB" for c in (mha, mqa, gqa)
    ),
    t("sh.row.flex"): (t("sh.flex.mha"), t("sh.flex.mqa"), t("sh.flex.gqa")),
    t("sh.row.use"): (t("sh.use.mha"), t("sh.use.mqa"), t("sh.use.gqa")),
}
ui.table(
    pd.DataFrame(rows, index=list(numbers)).T.reset_index(names=""),
    hide_index=True,
    wrap=True,  # sentences in its cells ("the usual compromise in recent LLMs")
)

pretrained.grouping_section(ui.text())

ui.lesson_nav("sharing")
