"""The Atlas page's streamlit layer: which texts to measure, the measurement (cached per model and
texts, with a progress bar and a stop button), the grid, one head's evidence and the table."""

from __future__ import annotations

import threading
from collections import OrderedDict
from urllib.parse import quote, urlencode

import pandas as pd
import streamlit as st

from attnviz.engine import roles
from attnviz.engine.budget import budget
from attnviz.engine.hooked.families import DEFAULT_NAME
from attnviz.ui import markup, url
from attnviz.ui.language import lang, t
from attnviz.ui.models import model_trace, request
from attnviz.ui.widgets import chart, table
from attnviz.views import atlas as figures
from attnviz.views.spec import escape

PROBES = url.key("at_probes").options
PARTS = url.key("at_part").options
KEPT = 32  # atlases kept per process (a DataFrame of a few KB each)
MAX_FILE_BYTES = 4 * 100_000  # a .txt file of user texts (UTF-8, so up to 4 bytes a character)
_atlases: OrderedDict[tuple, pd.DataFrame] = OrderedDict()
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


def measure(model, model_key: tuple, texts: list[str]) -> pd.DataFrame | None:
    """head_roles of the model on the texts: from the per-process cache, else measured here with
    a progress bar and a stop button (None when stopped)."""
    key = (model_key, tuple(texts))
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
        bar.progress(done / total, text=t("at.measuring", done=done, total=total))

    try:
        frame = roles.head_roles(model, texts, progress=progress)
    except (ValueError, TypeError) as err:
        bar.empty()
        stop.empty()
        st.error(markup.escape(err))
        return None
    bar.empty()
    stop.empty()
    with _lock:
        _atlases[key] = frame
        while len(_atlases) > KEPT:
            _atlases.popitem(last=False)
    return frame


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
    short = lambda role: t(f"at.short.{role}")  # noqa: E731
    axes = (t("at.layer"), t("at.head"))
    fig = figures.grid(rows, role_label, score_label, title, chosen, short, axes)
    _clickable(fig, "at_grid", f"atlas_{part}", _pick_from_grid, t("at.grid_help"))


def _clickable(fig, key: str, name: str, on_select, caption: str) -> None:
    """A chart whose points are picked by a click (on_select reads the point), and its caption."""
    chart(fig, key=key, name=name, on_select=on_select, selection_mode="points")
    st.caption(caption)


def head_card(model, model_key: tuple, texts: list[str], row: pd.Series, part: str) -> None:
    """One head: its scores, and the example where it shows its role most, with a link that
    opens it in the Pretrained model page's Head detail, the cell outlined."""
    layer, head = int(row["layer"]), int(row["head"])
    st.subheader(t("at.head_title", layer=layer, head=head, role=role_label(row.role)))
    cols = st.columns(5)
    for col, score in zip(
        cols, ("previous_token", "first_token", "self", "induction", "entropy"), strict=True
    ):
        col.metric(score_label(score), f"{row[score]:.2f}")
    shown = row.example_score
    if row.example_text < 0 or row.example_text >= len(texts):
        return
    text = texts[int(row.example_text)]
    trace = model_trace(model, request(model, text)).part(part)
    i, k = int(row.example_row), int(row.example_key)
    weights = trace.layers[layer].head("weights", head)[i].tolist()  # [n_k]
    title = t(
        "at.example_title",
        score=score_label(shown),
        query=f"{i}: {escape([trace.tokens[i]])[0]}",
        to=f"{k}: {escape([trace.key_tokens[k]])[0]}",
        w=weights[k],
    )
    chart(figures.example_bars(weights, trace.key_tokens, i, k, title), key="at_example")
    detail_link(model, text, part, layer, head, (i, k), "at_open_example")


def detail_link(
    model, text: str, part: str, layer: int, head: int, mark: tuple[int, int], key: str
) -> None:
    """A link that opens the Pretrained model page on `text`, Head detail of this head, with the
    (query, key) cell outlined, in a new tab: a fresh session takes the sentence from the link,
    where in this session the sidebar's sentence would overrule ?text= (and st.switch_page
    cannot carry it: the key is bound to a widget)."""
    params = {"text": text, "view": "detail", "layer": layer, "head": head}
    params["mark"] = f"{mark[0]},{mark[1]}"
    if model.name != DEFAULT_NAME:
        params["model"] = model.name
    if part != "encoder":
        params["part"] = part
    # Relative to this page (<base>/atlas), so it works behind a reverse proxy's path too.
    href = "pretrained?" + urlencode(params, quote_via=quote)
    st.link_button(t("at.open_detail"), href, icon=":material/open_in_new:", key=key)


def head_table(rows: pd.DataFrame) -> None:
    """Every head's scores, sortable by any column (click its header)."""
    st.subheader(t("at.table"))
    shown = rows.drop(columns=["part", "example_score", "example_text", "example_key"]).copy()
    shown["role"] = shown["role"].map(role_label)
    names = {s: score_label(s) for s in (*roles.SCORES, *roles.EXTRA)}
    names |= {"layer": t("at.layer"), "head": t("at.head"), "role": t("at.role")}
    names |= {"n_repeats": t("at.n_repeats"), "example_row": t("at.example_row")}
    shown = shown.rename(columns=names)
    fmt = {names[s]: st.column_config.NumberColumn(format="%.3f") for s in roles.SCORES}
    fmt[names["distance"]] = st.column_config.NumberColumn(format="%.1f")
    table(shown, hide_index=True, column_config=fmt)


def how_to_read() -> None:
    thresholds = ", ".join(
        f"{role_label(r)} ≥ {th}" for r, th in roles.THRESHOLDS.items() if r != "broad"
    )
    with st.expander(t("at.read_title")):
        st.markdown(
            t("at.read_body", thresholds=thresholds, broad=roles.THRESHOLDS["broad"]),
        )


def _pick_point() -> None:
    """A click on the Q/K map: remember (text, position, trace number) of the point."""
    event = st.session_state.get("at_qk_chart")
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    for point in points:
        data = point.get("customdata")
        if data and len(data) == 2:
            picked = (int(data[0]), int(data[1]), point.get("curve_number"))
            st.session_state["_at_qk_point"] = picked
            return


def _token_kind(token: str, position: int, special: set[int]) -> str:
    if position in special:
        return "special"
    return "punctuation" if roles.is_punctuation(token) else "word"


def qk_map(model, model_key: tuple, texts: list[str], part: str, layer: int, head: int) -> None:
    """The Q/K map of the head (AttentionViz's joint embedding), on request: every query and key
    of the measured texts in one plane; a click on a point opens its row in Head detail."""
    st.subheader(t("at.qk_title"))
    if not st.toggle(t("at.qk_show"), help=t("at.qk_help"), **url.bound("at_qk")):
        return
    url.seed("at_qk_colour", ["position", "kind"], url.default("at_qk_colour"))
    colour = st.segmented_control(
        t("at.qk_colour"),
        ["position", "kind"],
        format_func=lambda c: t(f"at.qk_colour.{c}"),
        key="at_qk_colour",
    )
    url.sync("at_qk_colour", url.default("at_qk_colour"))
    bar = st.progress(0.0, text=t("at.qk_tracing", done=0, total=len(texts)))
    traces = []
    for n, text in enumerate(texts, 1):
        traces.append(model_trace(model, request(model, text)).part(part))
        bar.progress(n / len(texts), text=t("at.qk_tracing", done=n, total=len(texts)))
    bar.empty()
    points = roles.qk_map(traces, layer, head)
    kinds = []
    for ti, pos, tok in zip(points.text, points.position, points.token, strict=True):
        trace = traces[ti]
        special = {p for label in ("[CLS]", "[SEP]") for p in trace.special.get(label, ())}
        kinds.append(_token_kind(tok, pos, special))
    points["token_kind"] = kinds
    labels = {k: t(f"at.qk.{k}") for k in ("query", "key", "word", "punctuation", "special")}
    fig = figures.qk_scatter(
        points, colour or "position", labels, t("at.qk_plot", layer=layer, head=head)
    )
    _clickable(fig, "at_qk_chart", f"qk_L{layer}_H{head}", _pick_point, t("at.qk_caption"))
    picked = st.session_state.get("_at_qk_point")
    if not picked or picked[0] >= len(traces):
        return
    ti, pos = picked[0], picked[1]
    trace = traces[ti]
    w = trace.layers[layer].head("weights", head)  # [n_q, n_k]
    curve = picked[2] if isinstance(picked[2], int) and picked[2] < len(fig.data) else None
    is_key = curve is not None and fig.data[curve].name.startswith(labels["key"])
    if is_key and pos < w.shape[1]:
        mark = (int(w[:, pos].argmax()), pos)
    elif pos < w.shape[0]:
        mark = (pos, int(w[pos].argmax()))
    else:
        return
    who = labels["key"] if is_key else labels["query"]
    st.markdown(
        t(
            "at.qk_picked",
            who=who,
            pos=pos,
            token=markup.escape(trace.tokens[mark[0]] if not is_key else trace.key_tokens[pos]),
            text=ti,
        )
    )
    detail_link(model, texts[ti], part, layer, head, mark, "at_open_point")
