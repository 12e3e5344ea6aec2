"""Playground: the configurable stack, explored head by head."""

import streamlit as st

from attnviz import ui
from attnviz.ui import explorer

t = ui.t
st.title(t("pg.title"))
st.caption(t("pg.intro"))

config = ui.stack_controls()
if config is not None:
    trace = ui.run_stack_trace(config)
    if trace is not None:
        st.caption(
            t(
                "pg.heads_caption",
                h=config.n_heads,
                dk=config.d_head,
                scale=config.scale,
                sharing=config.sharing,
            )
        )
        explorer.explorer(trace, default_view="heads")
