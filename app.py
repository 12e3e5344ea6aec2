"""attnviz: the router. Page setup, the shared sidebar, navigation; no tensor code here."""

import streamlit as st

from attnviz import ui

st.set_page_config(page_title="attnviz", page_icon="🔍", layout="wide")
ui.sidebar()

pages = [
    st.Page("pages/playground.py", title=ui.t("nav.playground"), icon="🎛️", default=True),
]
st.navigation(pages).run()
