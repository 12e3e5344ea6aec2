"""The Atlas page's streamlit layer: which texts to measure, the measurement (cached per model and
texts, with a progress bar and a stop button), the grid, one head's evidence and the table."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from attnviz.engine.budget import budget
from attnviz.measures import roles
from attnviz.ui import markup, url
from attnviz.ui.language import lang, t
from attnviz.ui.widgets import chart, table
from attnviz.views import atlas as figures


@dataclass(frozen=True)
class Atlas:
    """What the page shows: the sums per text and head, the merged atlas, the model's name, and
    the texts (measured here: every text whole; a saved atlas: its metadata's, each {"id",
    "source", "text" (a snippet unless "whole"), "tokens"})."""

    sums: pd.DataFrame
    frame: pd.DataFrame
    model: str
    texts: list[str] | None = None
    saved: dict[int, dict] | None = None
    skipped: tuple[tuple[str, str], ...] = ()  # a saved atlas's (source, why) of texts it skipped

    def text(self, text_id: int) -> tuple[str, bool, str]:
        """(text, whole, source) of a text number; ("", False, "") when unknown."""
        if self.texts is not None:
            ok = 0 <= text_id < len(self.texts)
            return (self.texts[text_id], True, f"#{text_id}") if ok else ("", False, "")
        found = (self.saved or {}).get(text_id)
        if found is None:
            return "", False, ""
        return str(found.get("text", "")), bool(found.get("whole")), str(found.get("source", ""))


PROBES = url.key("at_probes").options
PARTS = url.key("at_part").options
KEPT = 32  # atlases kept per process (the sums of a probe set: tens of KB each)
MAX_FILE_BYTES = 4 * 100_000  # a .txt file of user texts (UTF-8, so up to 4 bytes a character)
_atlases: OrderedDict[tuple, Atlas] = OrderedDict()
_lock = threading.Lock()


def _unknown_share(model, texts: list[str]) -> float:
    """The share of the texts' tokens the model's tokenizer maps to its unknown token."""
    tok = model.tokenizer
    if tok.unk_token_id is None:
        return 0.0
    ids = [i for text in texts for i in tok(text, add_special_tokens=False)["input_ids"]]
    return sum(i == tok.unk_token_id for i in ids) / max(1, len(ids))


def probe_language(model) -> str:
    """The probe set the page measures: the URL's, or for "auto" the UI's language, except
    English where the model's vocabulary turns most Chinese probes into [UNK]."""
    url.seed("at_probes", list(PROBES), url.default("at_probes"))
    choice = st.segmented_control(
        t("at.probes"),
        PROBES,
        format_func=lambda p: t(f"at.probes.{p}"),
        key="at_probes",
        help=t("at.probes_help"),
    )
    url.sync("at_probes", url.default("at_probes"))
    choice = choice or "auto"
    if choice != "auto":
        return choice
    if lang() == "zh":
        share = _unknown_share(model, roles.probe_list("zh"))
        if share > 0.3:
            st.caption(t("at.unk_note", share=f"{share:.0%}"))
            return "en"
        return "zh"
    return "en"


def own_texts() -> list[str]:
    """The user's texts: one a line in the text area (kept in the URL), plus a .txt file's
    paragraphs; each within the budget's text limit, all within roles.MAX_TEXTS."""
    limit = budget().max_text_chars
    raw = st.text_area(
        t("at.own"), height=90, max_chars=4000, help=t("at.own_help"), **url.bound("at_texts")
    )
    texts = [line.strip() for line in (raw or "").splitlines() if line.strip()]
    upload = st.file_uploader(t("at.file", kb=MAX_FILE_BYTES // 1000), type=["txt"],
                              help=t("at.file_help"), key="at_file")  # fmt: skip
    if upload is not None:
        data = upload.getvalue()
        if len(data) > MAX_FILE_BYTES:
            st.warning(t("at.file_too_big", kb=MAX_FILE_BYTES // 1000))
        else:
            try:
                body = data.decode("utf-8")
            except UnicodeDecodeError:
                st.warning(t("at.file_not_text"))
            else:
                texts += [p.strip() for p in body.replace("\r\n", "\n").split("\n\n") if p.strip()]
    long = [i for i, text in enumerate(texts) if len(text) > limit]
    if long:
        st.warning(t("at.text_too_long", n=len(long), chars=limit))
        texts = [text for text in texts if len(text) <= limit]
    return texts


# For the browser tests: a measurement whose texts hold this variable's value waits at its first
# text until the Stop button's rerun ends it (once per session and texts), so that Stop cannot land
# after the work has finished.
HOLD_ENV = "ATTNVIZ_TEST_HOLD_ATLAS"
HOLD_S = 120.0


def _hold_for_stop(key, texts: list[str], redraw) -> None:
    marker = os.environ.get(HOLD_ENV, "")
    if not marker or st.session_state.get("at_held") == key:
        return
    if not any(marker in text for text in texts):
        return
    st.session_state["at_held"] = key
    end = time.monotonic() + HOLD_S
    while time.monotonic() < end:
        time.sleep(0.2)
        redraw()  # a pending rerun (the Stop click) ends the script here


def measure(model, texts: list[str]) -> Atlas | None:
    """The atlas of the model on the texts (roles.head_role_sums, merged): from the per-process
    cache, else measured here with a progress bar and a stop button (None when stopped)."""
    key = (model.key, tuple(texts))
    with _lock:
        if key in _atlases:
            _atlases.move_to_end(key)
            return _atlases[key]
    if st.session_state.get("at_stop_button"):  # the stop button's rerun ended the measurement
        st.session_state["at_stopped"] = key
    if st.session_state.get("at_stopped") == key:
        st.info(t("at.stopped"))
        if not st.button(t("at.measure"), key="at_restart", type="primary"):
            return None
        st.session_state.pop("at_stopped", None)
    bar = st.progress(0.0, text=t("at.measuring", done=0, total=len(texts)))
    stop = st.empty()
    stop.button(t("at.stop"), key="at_stop_button", icon=":material/stop:")

    def progress(done: int, total: int) -> None:
        draw = lambda: bar.progress(done / total, text=t("at.measuring", done=done, total=total))  # noqa: E731
        draw()
        _hold_for_stop(key, texts, draw)

    try:
        sums = roles.head_role_sums(model, texts, progress=progress)
        atlas = Atlas(sums, roles.merge_sums(sums), model.name, list(texts))
    except (ValueError, TypeError) as err:
        bar.empty()
        stop.empty()
        st.error(markup.escape(err))
        return None
    bar.empty()
    stop.empty()
    with _lock:
        _atlases[key] = atlas
        while len(_atlases) > KEPT:
            _atlases.popitem(last=False)
    return atlas


def pick_part(frame: pd.DataFrame) -> str:
    parts = [p for p in PARTS if p in set(frame.part)]
    if len(parts) == 1:
        return parts[0]
    url.seed("at_part", parts, parts[0])
    part = st.segmented_control(
        t("pm.part"), parts, format_func=lambda p: t(f"pm.part.{p}"), key="at_part"
    )
    url.sync("at_part", url.default("at_part"))
    return part or parts[0]


def _pick_from_grid() -> None:
    event = st.session_state.get("at_grid")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    for point in points:
        data = point.get("customdata")
        if data and len(data) == 2:
            st.session_state["at_layer"], st.session_state["at_head"] = int(data[0]), int(data[1])
            return


def role_label(role: str) -> str:
    return t(f"at.role.{role}")


def score_label(score: str) -> str:
    return t(f"at.score.{score}")


def pick_head(rows: pd.DataFrame) -> tuple[int, int]:
    """The head shown below the grid: layer and head pickers kept in the URL (a click on the
    grid moves them)."""
    n_layers, n_heads = int(rows.layer.max()) + 1, int(rows["head"].max()) + 1
    url.seed("at_layer", list(range(n_layers)), url.default("at_layer"))
    url.seed("at_head", list(range(n_heads)), url.default("at_head"))
    for name, n in (("at_layer", n_layers), ("at_head", n_heads)):
        if st.session_state.get(name) not in range(n):  # another model had more
            st.session_state[name] = 0
    c1, c2 = st.columns(2)
    layer = c1.selectbox(t("at.layer"), range(n_layers), key="at_layer")
    head = c2.selectbox(t("at.head"), range(n_heads), key="at_head")
    url.sync("at_layer", url.default("at_layer"))
    url.sync("at_head", url.default("at_head"))
    return layer, head


def grid(rows: pd.DataFrame, part: str, chosen: tuple[int, int]) -> None:
    title = t("at.grid_title", part=t(f"pm.part.{part}"))
    words = figures.GridWords(role_label, score_label, title,
                              short=lambda role: t(f"at.short.{role}"),
                              axes=(t("at.layer"), t("at.head")))  # fmt: skip
    fig = figures.grid(rows, words, chosen)
    clickable(fig, "at_grid", f"atlas_{part}", _pick_from_grid, t("at.grid_help"))


def clickable(fig, key: str, name: str, on_select, caption: str) -> None:
    """A chart whose points are picked by a click (on_select reads the point), and its caption."""
    chart(fig, key=key, name=name, on_select=on_select, selection_mode="points")
    st.caption(caption)


def head_table(rows: pd.DataFrame) -> None:
    """Every head's scores, sortable by any column (click its header)."""
    st.subheader(t("at.table"))
    shown = rows.drop(columns=["part", "role", "example_score", "example_text", "example_key"])
    shown = shown.copy()
    shown["roles"] = shown["roles"].map(lambda rs: ", ".join(map(role_label, rs.split(","))))
    names = {s: score_label(s) for s in (*roles.SCORES, *roles.EXTRA)}
    names |= {"layer": t("at.layer"), "head": t("at.head"), "roles": t("at.roles")}
    names |= {"n_repeats": t("at.n_repeats"), "example_row": t("at.example_row")}
    shown = shown.rename(columns=names)
    fmt = {names[s]: st.column_config.NumberColumn(format="%.3f") for s in roles.SCORES}
    fmt[names["distance"]] = st.column_config.NumberColumn(format="%.1f")
    for c in roles.QK_COLUMNS:
        if c in shown.columns:
            shown = shown.rename(columns={c: t(f"col.{c}")})
            fmt[t(f"col.{c}")] = st.column_config.NumberColumn(format="%.2f")
    table(shown, hide_index=True, column_config=fmt)


def how_to_read() -> None:
    thresholds = ", ".join(
        f"{role_label(r)} ≥ {th}" for r, th in roles.THRESHOLDS.items() if r != "broad"
    )
    order = " › ".join(role_label(r) for r in roles.ROLE_ORDER)
    with st.expander(t("at.read_title")):
        st.markdown(
            t("at.read_body", thresholds=thresholds, broad=roles.THRESHOLDS["broad"], order=order),
        )
