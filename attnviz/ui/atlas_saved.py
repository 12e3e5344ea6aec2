"""The Atlas page's other source: a corpus atlas saved by `attnviz atlas` (its atlas.parquet),
uploaded, or picked from the folders under the server's ATTNVIZ_ATLAS_DIR (never in public mode:
upload only). Bounded by the budget's max_atlas_bytes; opened once per file per process."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import pandas as pd
import streamlit as st

from attnviz.engine.budget import MiB, budget
from attnviz.measures import roles
from attnviz.serve import corpus
from attnviz.serve.public import public
from attnviz.ui import markup, url
from attnviz.ui.atlas import Atlas
from attnviz.ui.language import t
from attnviz.ui.widgets import table

SOURCES = url.key("at_source").options
SKIPPED_SHOWN = 50  # skipped texts listed on the page (all of them are in the file)
KEPT = 2  # saved atlases kept per process (each up to the budget's max_atlas_bytes, unpacked more)
_opened: OrderedDict[str, Atlas] = OrderedDict()
_lock = threading.Lock()


def pick_source() -> str:
    """Measure here ("measure") or open a saved corpus atlas ("saved"), kept in the URL."""
    url.seed("at_source", list(SOURCES), url.default("at_source"))
    choice = st.segmented_control(
        t("at.source"), SOURCES, format_func=lambda s: t(f"at.source.{s}"), key="at_source"
    )
    url.sync("at_source", url.default("at_source"))
    return choice or url.default("at_source")


def _open(key: str, source) -> Atlas | None:
    """The saved atlas at `source` (bytes or a path), from this process's few kept, else read
    and merged; None after an error message."""
    with _lock:
        if key in _opened:
            _opened.move_to_end(key)
            return _opened[key]
    try:
        saved = corpus.open_atlas(source)
        frame = roles.merge_sums(saved.sums)
    except ValueError as err:
        st.error(markup.escape(err))
        return None
    texts = {int(x["id"]): x for x in saved.meta.get("texts", []) if isinstance(x, dict)}
    skipped = tuple((str(x[1]), str(x[2])) for x in saved.meta.get("skipped", [])
                    if isinstance(x, list) and len(x) == 3)  # fmt: skip
    atlas = Atlas(saved.sums, frame, str(saved.meta.get("model", "")), None, texts, skipped)
    with _lock:
        _opened[key] = atlas
        while len(_opened) > KEPT:
            _opened.popitem(last=False)
    return atlas


def open_saved() -> Atlas | None:
    """A saved corpus atlas the user picked: a folder under ATTNVIZ_ATLAS_DIR (not in public
    mode) or an uploaded atlas.parquet; None until one is picked (or when it is refused)."""
    most = budget().max_atlas_bytes
    folders = [] if public() else corpus.atlas_folders()
    names = [f.name for f in folders]
    if names:
        url.seed("at_saved", ["", *names], "")
        st.selectbox(
            t("at.saved_folder"), ["", *names], key="at_saved",
            format_func=lambda n: n or t("at.saved_none"), help=t("at.saved_folder_help"),
        )  # fmt: skip
        url.sync("at_saved", "")
    label = t("at.saved_upload" if names else "at.saved_upload_alone", mb=most // MiB)
    upload = st.file_uploader(
        label, type=["parquet"], key="at_upload", max_upload_size=max(1, most // MiB),
        help=t("at.saved_upload_help", mb=most // MiB),
    )  # fmt: skip
    if upload is not None:
        data = upload.getvalue()
        if len(data) > most:
            st.error(t("at.saved_too_big", mb=most // MiB))
            return None
        return _open("upload:" + hashlib.sha256(data).hexdigest(), data)
    chosen = st.session_state.get("at_saved")
    if chosen in names:
        path = folders[names.index(chosen)] / "atlas.parquet"
        stat = path.stat()
        return _open(f"file:{path}:{stat.st_mtime_ns}:{stat.st_size}", path)
    st.info(t("at.saved_pick" if names else "at.saved_pick_upload"))
    return None


def about(atlas: Atlas) -> None:
    """One line on what the saved atlas holds: the model, texts measured and skipped."""
    meta_texts = len(atlas.saved or {})
    n = int(atlas.sums["text"].nunique()) if len(atlas.sums) else 0
    st.caption(t("at.saved_about", model=markup.escape(atlas.model), n=n, listed=meta_texts))
    if atlas.skipped:
        with st.expander(t("at.saved_skipped", n=len(atlas.skipped))):
            columns = [t("at.saved_skipped_text"), t("at.saved_skipped_why")]
            table(pd.DataFrame(atlas.skipped[:SKIPPED_SHOWN], columns=columns), hide_index=True)
            if len(atlas.skipped) > SKIPPED_SHOWN:
                st.caption(t("at.saved_skipped_more", n=len(atlas.skipped) - SKIPPED_SHOWN))
