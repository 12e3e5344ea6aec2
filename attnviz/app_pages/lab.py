"""The training lab: an induction head forming, and ÷√d_k measured in training, live."""

import streamlit as st

from attnviz import ui
from attnviz.ui import lab

t = ui.t
st.title(t("lab.title"))
st.markdown(t("lab.intro"))

st.header(t("lab.ind_header"))
st.markdown(t("lab.ind_intro"))
config = lab.induction_config()
lab.controls("induction", None if config is None else (config,))
lab.section("induction")

st.header(t("lab.sc_header"))
st.markdown(t("lab.sc_intro"))
lab.controls("scaling", lab.scaling_configs())
lab.section("scaling")
st.page_link(ui.page_file("app_pages/why_scale.py"), label=t("lab.back_to_why"), icon="⬅️")
