"""Reproduce: published claims about attention, measured on the shipped models by `attnviz
reproduce`: the saved report's table of verdicts, one card per claim (badge per model, figure,
the view behind it, the command), and measuring again here."""

import streamlit as st

from attnviz import ui
from attnviz.ui import reproduce

t = ui.t
st.title(t("rp.title"))
st.caption(t("rp.intro"))
facts, records = reproduce.saved()
reproduce.summary(facts, records)
reproduce.live()
for claim in reproduce.CLAIMS:
    mine = [r for r in records if r.claim == claim]
    if mine:
        reproduce.card(claim, mine)
