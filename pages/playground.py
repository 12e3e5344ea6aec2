"""Playground: the configurable stack, one softmax-weights heatmap per head."""

import streamlit as st

from attnviz import figures, ui

t = ui.t
st.title(t("pg.title"))
st.caption(t("pg.intro"))

config = ui.stack_controls()
if config is not None:
    trace = ui.run_stack_trace(config)
    if trace is not None:
        layer = 0
        if config.n_layers > 1:
            layer = st.slider(t("pg.layer"), 0, config.n_layers - 1, 0, key="layer")
        lt = trace.layers[layer]
        st.caption(
            t(
                "pg.heads_caption",
                h=config.n_heads,
                dk=config.head_dim,
                scale=lt.scale,
                sharing=config.sharing,
            )
        )
        per_row = min(config.n_heads, 3)
        cols = st.columns(per_row)
        for h in range(config.n_heads):
            fig = figures.heatmap(
                lt.weights[h],
                trace.key_tokens,
                trace.tokens,
                title=t("pg.head_title", h=h),
                value_name=t("w.weights"),
                zmin=0.0,
                zmax=1.0,
                height=380,
                show_scale=h % per_row == per_row - 1,
                x_title=t("w.key"),
                y_title=t("w.query"),
            )
            with cols[h % per_row]:
                ui.chart(fig, key=f"head_{h}")
