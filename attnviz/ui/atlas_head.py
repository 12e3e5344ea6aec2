"""The Atlas page's one head: the roles it passes, its example (bars over the keys when the model
is here to trace it), a link into Head detail, the texts where it is strongest, and its Q/K map."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pandas as pd
import streamlit as st

from attnviz.engine.bundled import REGISTRY, TRAINED
from attnviz.engine.hooked.families import DEFAULT_NAME
from attnviz.measures import roles
from attnviz.measures.qkmap import qk_map as qk_points
from attnviz.serve.public import allowed_models, public
from attnviz.ui import markup, url
from attnviz.ui.atlas import Atlas, clickable, role_label, score_label
from attnviz.ui.language import t
from attnviz.ui.models import model_trace, request
from attnviz.ui.widgets import chart, table, trace_legend
from attnviz.views import atlas as figures
from attnviz.views.spec import escape
from attnviz.views.tokens import shown


def _example_score(row: pd.Series) -> str:
    """The score whose example the card shows: a role the head passes, picked (kept in the URL)
    where it passes several; a mixed head's strongest."""
    passed = [r for r in row.roles.split(",") if r != "mixed"]
    if len(passed) < 2:
        return row.example_score
    url.seed("at_role", passed, passed[0])
    if st.session_state.get("at_role") not in passed:  # another head passed other roles
        st.session_state["at_role"] = passed[0]
    role = st.segmented_control(t("at.example_role"), passed, format_func=role_label,
                                key="at_role")  # fmt: skip
    url.sync("at_role", passed[0])
    return roles.ROLE_SCORE[role or passed[0]]


def head_card(model, atlas: Atlas, row: pd.Series, part: str) -> None:
    """One head: every role it passes, its scores, the example where it shows a role most (as
    bars over its keys when the model is here to trace it), with a link that opens it in the
    Pretrained model page's Head detail, the cell outlined; then the texts where it is
    strongest."""
    layer, head = int(row["layer"]), int(row["head"])
    passed = " · ".join(role_label(r) for r in row.roles.split(","))
    st.subheader(t("at.head_title", layer=layer, head=head, role=passed))
    cols = st.columns(5)
    for col, score in zip(
        cols, ("previous_token", "first_token", "self", "induction", "entropy"), strict=True
    ):
        col.metric(score_label(score), f"{row[score]:.2f}")
    shown = _example_score(row)
    best = roles.best_rows(atlas.sums, part, layer, head)
    if shown in best.index:
        example = best.loc[shown]
        text, whole, source = atlas.text(int(example.text))
        i, k = int(example.row), int(example.key)
        if model is not None and whole:
            trace = model_trace(model, request(model, text)).part(part)
            weights = trace.layers[layer].head("weights", head)[i].tolist()  # [n_k]
            title = t(
                "at.example_title",
                score=score_label(shown),
                query=f"{i}: {escape([trace.tokens[i]])[0]}",
                to=f"{k}: {escape([trace.key_tokens[k]])[0]}",
                w=weights[k],
            )
            chart(figures.example_bars(weights, trace.key_tokens, i, k, title), key="at_example")
            trace_legend(trace)
        else:
            st.markdown(t(
                "at.saved_example", score=score_label(shown), text=int(example.text),
                source=markup.escape(source), row=i, to=k,
                value=example_value(shown, float(example.value)),
            ))  # fmt: skip
        if whole and (model is not None or _openable(atlas.model)):
            detail_link(atlas.model, text, part, layer, head, (i, k), "at_open_example")
            if part != "cross":
                detail_link(atlas.model, text, part, layer, head, (i, k), "at_open_why", why=True)
    why_shares(row)
    strongest_texts(atlas, part, layer, head, shown)


def why_shares(row: pd.Series) -> None:
    """Why this head looks where it looks, pooled over the texts: its top-weight logits split by
    what the query and key carry (head_roles' qk_* columns), where the atlas measured them."""
    values = [row.get(c) for c in roles.QK_COLUMNS]
    if any(v is None or pd.isna(v) for v in values):
        return
    parts = " · ".join(f"{t(f'col.{c}')} {v:+.0%}" for c, v in zip(roles.QK_COLUMNS, values,
                                                                       strict=True))  # fmt: skip
    st.markdown(t("at.why_shares", parts=parts))
    st.caption(t("at.why_help"))


def example_value(score: str, value: float) -> str:
    """A saved example's value named as what it is (roles' table): a weight at one key, the
    row's relative entropy, the weight summed over special or punctuation keys, or the row's mean
    distance."""
    kind = {"entropy": "entropy", "distance": "distance", "special": "sum", "punctuation": "sum"}
    return t(f"at.value.{kind.get(score, 'weight')}", v=value)


def _openable(name: str) -> bool:
    """Whether a saved atlas's model may be opened on the Pretrained page from here (public
    mode: only the allowlist's)."""
    return not public() or name in allowed_models()


def strongest_texts(atlas: Atlas, part: str, layer: int, head: int, score: str) -> None:
    """The texts that make this head's `score` strongest: each text's own mean, top 10."""
    top = roles.text_scores(atlas.sums, part, layer, head, score).head(10)
    if top.empty:
        return
    st.markdown(f"**{t('at.strongest', score=score_label(score), n=len(top))}**")
    shown = pd.DataFrame({
        t("at.strong.text"): [atlas.text(int(i))[2] or f"#{i}" for i in top.text],
        t("at.strong.score"): top.score.to_numpy(),
        t("at.strong.rows"): top.rows.to_numpy(),
        t("at.strong.snippet"): [_snippet(atlas.text(int(i))[0]) for i in top.text],
    })  # fmt: skip
    fmt = {t("at.strong.score"): st.column_config.NumberColumn(format="%.3f")}
    table(shown, hide_index=True, column_config=fmt)


def _snippet(text: str, most: int = 120) -> str:
    """The beginning of a text on one line, cut at a space where it has spaces."""
    text = " ".join(text.split())
    if len(text) <= most:
        return text
    cut = text[: most - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "…"


def detail_link(
    model_name: str,
    text: str,
    part: str,
    layer: int,
    head: int,
    mark: tuple[int, int],
    key: str,
    why: bool = False,
) -> None:
    """A link that opens the Pretrained model page on `text`, Head detail of this head, with the
    (query, key) cell outlined, in a new tab: a fresh session takes the sentence from the link,
    where in this session the sidebar's sentence would overrule ?text= (and st.switch_page
    cannot carry it: the key is bound to a widget)."""
    params = {"text": text, "view": "why" if why else "detail", "layer": layer, "head": head}
    if why:  # Why here on the same cell
        params |= {"query": mark[0], "why_key": mark[1]}
    else:
        params["mark"] = f"{mark[0]},{mark[1]},atlas"  # Head detail says the outline came here
    if model_name in REGISTRY or model_name in TRAINED:
        params["pick"] = model_name  # the Pretrained page's picker, as the Atlas had it
    elif model_name != DEFAULT_NAME:
        params["model"] = model_name
    if part != "encoder":
        params["part"] = part
    # Relative to this page (<base>/atlas), so it works behind a reverse proxy's path too.
    href = "pretrained?" + urlencode(params, quote_via=quote)
    label = t("at.open_why" if why else "at.open_detail")
    st.link_button(label, href, icon=":material/open_in_new:", key=key)


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


def qk_map(model, texts: list[str], part: str, layer: int, head: int) -> None:
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
    points = qk_points(traces, layer, head)
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
    clickable(fig, "at_qk_chart", f"qk_L{layer}_H{head}", _pick_point, t("at.qk_caption"))
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
            token=markup.escape(
                shown(trace.tokens[mark[0]] if not is_key else trace.key_tokens[pos])
            ),
            text=ti,
        )
    )
    detail_link(model.name, texts[ti], part, layer, head, mark, "at_open_point")
