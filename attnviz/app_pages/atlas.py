"""Head atlas: what every head of a model does, measured over many texts (here, or a corpus atlas
saved by `attnviz atlas`), each head's roles on a layer x head grid, the evidence one click away,
the texts where it is strongest, and the table of scores."""

import streamlit as st

from attnviz import ui
from attnviz.serve.public import allowed_models, public
from attnviz.ui import atlas, atlas_head, atlas_saved, models, pretrained, url

t = ui.t
st.title(t("at.title"))
st.caption(t("at.intro"))

model = None
if atlas_saved.pick_source() == "saved":
    data = atlas_saved.open_saved()
    if data is None:
        st.stop()
    atlas_saved.about(data)
else:
    with st.sidebar:
        if public():  # a class server: only the allowlist, never a typed name or folder
            name = st.selectbox(
                t("pretrained.model_public"), allowed_models(), **url.bound("at_model")
            )
            models.public_facts(name)
        else:  # a bundled model, or a name typed below it (as on the Pretrained page)
            name = models.pick_model("at_pick", "at_model", t("pick.label"), t("pick.other"))
    if models.not_installed(name.strip()):  # a registry LLM before `attnviz models`
        st.stop()
    model = models.get_model(name.strip() or None, "auto")
    if model is None:
        st.stop()
    pretrained.summary(model)
    with st.expander(t("at.texts"), expanded=False):
        probes = atlas.probe_language(model)
        own = atlas.own_texts()
    texts = atlas.roles.probe_list(probes) + own
    if len(texts) > atlas.roles.MAX_TEXTS:
        st.warning(t("at.too_many", n=len(texts), most=atlas.roles.MAX_TEXTS))
        texts = texts[: atlas.roles.MAX_TEXTS]
    st.caption(t("at.texts_count", n=len(texts), own=len(own)))
    data = atlas.measure(model, texts)
    if data is None:
        st.stop()

part = atlas.pick_part(data.frame)
rows = data.frame[data.frame.part == part]
layer, head = atlas.pick_head(rows)
atlas.grid(rows, part, (layer, head))
row = rows[(rows.layer == layer) & (rows["head"] == head)].iloc[0]
atlas_head.head_card(model, data, row, part)
if model is not None:
    atlas_head.qk_map(model, data.texts, part, layer, head)
atlas.head_table(rows)
atlas.how_to_read()
