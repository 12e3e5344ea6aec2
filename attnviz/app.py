"""attnviz: the router. Page setup, the shared sidebar, navigation; no tensor code here."""

import streamlit as st

from attnviz import ui
from attnviz.ui import history, language


def page(path: str, **how) -> st.Page:
    # By absolute path: Streamlit resolves a relative one against the main script, which is the
    # repository root's app.py under `streamlit run app.py` (it runs this file).
    return st.Page(ui.page_file(path), **how)


st.set_page_config(page_title="attnviz", page_icon=":material/visibility:", layout="wide")
history.one_entry_per_step()  # before anything writes the address bar
ui.url.migrate()  # older key names in a link (b_ablate) read as today's (wi_silence)
language.seed_language()  # the titles below are translated

explore = [
    page(
        "app_pages/playground.py",
        title=ui.t("nav.playground"),
        icon=":material/tune:",
        default=True,
    ),
    page("app_pages/pretrained.py", title=ui.t("nav.pretrained"), icon=":material/psychology:"),
    page("app_pages/generate.py", title=ui.t("nav.generate"), icon=":material/auto_awesome:"),
    page("app_pages/atlas.py", title=ui.t("nav.atlas"), icon=":material/grid_view:"),
    page("app_pages/reproduce.py", title=ui.t("nav.reproduce"), icon=":material/fact_check:"),
]
# The classroom pages in teaching order (attnviz.lessons.path; the lesson ends on the Pretrained
# page).
lesson = [
    page("app_pages/step_by_step.py", title=ui.t("nav.steps"), icon=":material/footprint:"),
    page("app_pages/why_scale.py", title=ui.t("nav.why_scale"), icon=":material/functions:"),
    page("app_pages/lab.py", title=ui.t("nav.lab"), icon=":material/model_training:"),
    page("app_pages/masks.py", title=ui.t("nav.masks"), icon=":material/visibility_off:"),
    page("app_pages/multihead.py", title=ui.t("nav.multihead"), icon=":material/calculate:"),
    page("app_pages/sharing.py", title=ui.t("nav.sharing"), icon=":material/share:"),
    page("app_pages/positions.py", title=ui.t("nav.positions"), icon=":material/swap_horiz:"),
]
# Older paths (/bert) open today's page with the same link; not listed in the menu.
moved = [
    st.Page(lambda new=new: ui.url.redirect(new), title=ui.t("nav.pretrained"), url_path=old,
            visibility="hidden")
    for old, new in ui.url.PAGE_ALIASES.items()
]  # fmt: skip
shown = st.navigation({ui.t("nav.explore"): explore + moved, ui.t("nav.lesson"): lesson})
language.language_to_url()  # a ?lang=zh link: into the address bar now (reruns once)
ui.sidebar(shown.url_path)
try:
    shown.run()
finally:  # a page that stops early (st.stop) still ends with its whole URL in the address bar
    history.address_bar()
