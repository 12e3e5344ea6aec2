"""What the heads write, in the explorer: each head's push on one token's logit (direct logit
attribution) and the logit lens.

Both need the loaded model, which the other views never do. A view gets only its trace, and the
trace names its model already: its TraceRequest holds the model's key, and the server keeps every
loaded model by that key (attnviz.serve.tracing.model_for, weakly: the model cache decides how
long it lives). So the view asks the trace, not the page: no second argument threaded through
every drawer, no way to pair a trace with another model, and a rerun of the view alone finds the
model as a fresh run does. The whole run (its parts, its pieces: the final state reads them all)
is the request's trace in the cache.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnviz.engine.config import StackConfig
from attnviz.engine.trace import Trace
from attnviz.measures.lens import spellings
from attnviz.serve import tracing
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, url
from attnviz.ui.caching import cached_trace
from attnviz.ui.explorer.pickers import open_head, selection
from attnviz.ui.language import localized, t
from attnviz.ui.widgets import chart, table, token_legend
from attnviz.views import writes
from attnviz.views.tokens import shown

TOP = 10  # next tokens offered by the token picker


def model_and_run(trace: Trace, head: bool = True):
    """(the loaded model, the whole traced run) for a view that reads the model (`head`: its
    next-token head), or None after saying why there is none (the toy stack, a model no longer
    loaded, an encoder when the head is needed)."""
    request = trace.request
    if request is None or isinstance(request.model, StackConfig):
        st.info(t("wr.no_model" if head else "why.no_model"))
        return None
    try:
        model = tracing.model_for(request)
    except LookupError:
        st.info(t("wr.model_gone"))
        return None
    if head and model.kind == "encoder":
        st.info(t("wr.encoder", name=markup.code(model.name)))
        return None
    return model, cached_trace(request, model)


def _top_tokens(model, full: Trace) -> list[tuple[str, float]]:
    """The model's TOP most likely next tokens after the input, as (text, p)."""
    import torch

    dec = full.part("decoder") if full.parts else full
    if dec.next_logits is None:
        return []
    probs = torch.softmax(dec.next_logits.float(), -1)
    top = probs.topk(min(TOP, probs.numel()))
    return [
        (model.tokenizer.decode([int(i)]), float(p))
        for p, i in zip(top.values, top.indices, strict=True)
    ]


_SPELLED = "_dla_spelled"  # (what was typed, the one-token spelling the box picked for it)


def _one_token(model, typed: str, options: list[str]) -> str | None:
    """Before the box is drawn: a typed token (or a link's) that is several tokens for this model
    becomes the same word with (or without) its leading space where that is one token ("hungry"
    -> " hungry"); every one-token spelling joins the options. None, after saying what to do,
    when neither is one token."""
    found = spellings(model, typed)
    one = [text for text, pieces in found.items() if len(pieces) == 1]
    options += [text for text in one if text not in options]
    if typed in one:
        return typed
    if one:
        st.session_state["dla_token"] = one[0]
        st.session_state[_SPELLED] = (typed, one[0], found[typed])
        return one[0]
    if typed not in options:
        options.append(typed)  # shown as typed, with the message below the box
    return None


def _spelled_note(token: str) -> None:
    typed, chosen, pieces = st.session_state.get(_SPELLED) or ("", None, [])
    if chosen != token:
        st.session_state.pop(_SPELLED, None)
        return
    how = t("wr.space_added" if chosen.startswith(" ") else "wr.space_dropped")
    st.caption(t("wr.token_respelled", typed=markup.code(shown(typed)), n=len(pieces),
                 pieces=_pieces(pieces), token=markup.code(shown(chosen)), how=how))  # fmt: skip


def _pieces(pieces: list[str]) -> str:
    return " ".join(markup.code(shown(piece)) for piece in pieces)


def _refusal(model, typed: str) -> str:
    """What to tell a user whose token is several tokens either way, with what to do."""
    found = spellings(model, typed)
    pieces = found[typed]
    facts = dict(typed=markup.code(shown(typed)), n=len(pieces), pieces=_pieces(pieces),
                 first=markup.code(shown(pieces[0])) if pieces else "")  # fmt: skip
    other = next((text for text in found if text != typed), None)
    if other is None:
        return t("wr.token_pieces", **facts)
    more = found[other]
    return t("wr.token_pieces_both", other=markup.code(shown(other)), m=len(more),
             other_pieces=_pieces(more), **facts)  # fmt: skip


def pick_token(model, full: Trace) -> tuple[str, str | None]:
    """The token whose logit the heads push: the model's top next one (""), one of the next ten,
    or any token typed in; by its text in the URL. With it, what to tell the user when the
    typed token is several tokens for this model (None: nothing)."""
    tops = _top_tokens(model, full)
    p = dict(tops)
    options = ["", *(tok for tok, _ in tops if tok)]
    kept = st.session_state.get("dla_token", url.read("dla_token"))
    refused = None
    typed = isinstance(kept, str) and kept and kept not in options  # typed, or a link's
    if typed and _one_token(model, kept, options) is None:
        refused = _refusal(model, kept)
    url.seed("dla_token", options, url.default("dla_token"))
    first = tops[0][0] if tops else ""

    def label(tok: str) -> str:
        if not tok:
            return t("wr.top_token", token=shown(first), p=p.get(first, 0.0))
        return f"{shown(tok)}  {p[tok]:.3f}" if tok in p else shown(tok)

    token = st.selectbox(
        t("wr.token"), options, format_func=label, key="dla_token", accept_new_options=True,
        help=t("wr.token_help"),
    )  # fmt: skip
    url.sync("dla_token", url.default("dla_token"))
    _spelled_note(token or "")
    return token or "", refused


def _clicked(key: str) -> None:
    # a click on a head of the grid opens it in Head detail (before the rerun that draws it)
    found = writes.picked(st.session_state.get(key))
    if found is not None:
        open_head(*found, view="detail")
        if key.endswith("_cross"):
            st.session_state["part"] = "cross"


def logits_view(trace: Trace) -> None:
    """Direct logit attribution: each head's push on a token's logit, the rest beside it."""
    got = model_and_run(trace)
    if got is None:
        return
    model, full = got
    token, refused = pick_token(model, full)
    if refused:
        st.warning(refused)
        return
    sel = selection(token=token or None)
    try:
        found = per_trace(
            full, ("head logits", token), lambda: writes.head_logits_table(model, full, sel), keep=4
        )
    except (ValueError, TypeError) as err:  # a token the model cannot name in one piece
        st.warning(markup.escape(err))
        return
    figs = writes.logits_from_table(found, sel, writes.silenced_heads(full))
    parts = writes.head_parts(found)
    for fig, part in zip(figs, parts, strict=False):
        key = "dla_grid" + ("_cross" if part == "cross" else "")
        chart(fig, key=key, name=f"head_logits_{part or 'decoder'}",
              on_select=lambda k=key: _clicked(k), selection_mode="points")  # fmt: skip
    st.caption(t("wr.dla_help"))
    drawn = writes.shown_table(found)  # ␣tired, ⏎⏎: as the charts draw them, never a blank cell
    heads = drawn[drawn["kind"] == "head"]
    heads = heads.reindex(heads["logit"].abs().sort_values(ascending=False).index).head(TOP)
    tokens = [c for c in found if c[:3] in ("pro", "sup")]
    cols = ["part", "layer", "head", "logit", *tokens]
    st.markdown(t("wr.top_heads"))
    raw = heads[cols].drop(columns=["part"] if len(parts) < 2 else [])
    cells = localized(raw)
    logit = cells.columns[list(raw.columns).index("logit")]  # its label in this language
    four = {logit: st.column_config.NumberColumn(format="%.4f")}  # projector mode: 0.8254 too
    table(cells, hide_index=True, column_config=four, key="dla_heads")
    token_legend(found[writes.token_columns(found)].to_numpy().ravel())
    chart(figs[-1], key="dla_rest", name="head_logits_rest")
    st.caption(t("wr.rest_help"))
    _csv(found, "head_logits.csv", "csv_head_logits")


def lens_view(trace: Trace) -> None:
    """The logit lens: the last token's residual stream read out after every layer."""
    got = model_and_run(trace)
    if got is None:
        return
    model, full = got
    try:
        found = per_trace(full, ("logit lens",), lambda: writes.lens_table(model, full))
    except (ValueError, TypeError) as err:
        st.warning(markup.escape(err))
        return
    grid, line = writes.lens_from_table(found, selection())
    chart(grid, key="lens_grid", name="logit_lens")
    st.caption(t("wr.lens_help"))
    chart(line, key="lens_final", name="logit_lens_final")
    token_legend(found[writes.token_columns(found)].to_numpy().ravel())
    _csv(found, "logit_lens.csv", "csv_logit_lens")


def _csv(found: pd.DataFrame, name: str, key: str) -> None:
    st.download_button(
        t("ex.csv_stats"), lambda: writes.shown_table(found).to_csv(index=False), file_name=name,
        mime="text/csv", on_click="ignore", key=key,
    )  # fmt: skip
