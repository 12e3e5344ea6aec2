"""Attention while a decoder generates: scrub through the steps, every layer's and head's row."""

import streamlit as st

from attnviz import ui
from attnviz.ui import generate

t = ui.t
st.title(t("gen.title"))
st.markdown(t("gen.intro"))
model = generate.decoder()
chosen = generate.settings(model)  # drawn after a bad model name too: nothing typed is lost
if model is not None and chosen is not None:
    run = generate.run(model, *chosen)
    if run is not None:
        generate.show(run)
