"""Patch: does a head matter? The sidebar's sentence is the clean text and a second text (the
one Compare reads, "cmp" in the URL) the corrupted one; every head's z is patched from the clean
run into the corrupted one (attnviz.patch, with a progress bar and a Stop button) beside the
attribution-patching estimate (attnviz.attribution_patching; misses outlined), then the residual
stream's cells with the causal cone of a clicked cell shaded. A click on a head opens it in Head
detail.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnviz.engine.hooked.labels import piece_text
from attnviz.engine.trace import Trace
from attnviz.measures import attribution, patching
from attnviz.measures.patch_runs import setup, with_tokens
from attnviz.serve.memos import per_trace
from attnviz.ui import markup, projector, url
from attnviz.ui.explorer.pickers import open_head, selection
from attnviz.ui.explorer.writes import model_and_run
from attnviz.ui.language import input_problem, localized, t
from attnviz.ui.widgets import chart, table, token_legend
from attnviz.views import patching as figures
from attnviz.views import writes
from attnviz.views.tokens import shown

TOP = 10  # tokens each picker offers; heads in the table
STOP = "pt_stop"


def _clicked(key: str) -> None:
    found = writes.picked(st.session_state.get(key))
    if found is not None:
        open_head(*found, view="detail")


def _cell_clicked() -> None:
    points = (st.session_state.get("pt_resid") or {}).get("selection", {}).get("points", [])
    for point in points:
        data = point.get("customdata")
        if isinstance(data, list) and len(data) >= 2:
            st.session_state["pt_cell"] = f"{int(data[0])},{int(data[1])}"


def _cell() -> tuple[int, int] | None:
    """The residual cell whose causal cone is shaded ("layer,position" in the URL), or None."""
    if "pt_cell" not in st.session_state:
        st.session_state["pt_cell"] = url.read("pt_cell") or ""
    url.sync("pt_cell", "")
    raw = st.session_state["pt_cell"]
    try:
        la, p = (int(v) for v in str(raw).split(","))
    except ValueError:
        return None
    return la, p


def _pick_token(key: str, label: str, logits, default_label: str, model) -> str:
    """A token picker: the run's top tokens ("" = the default), or one typed in."""
    import torch

    probs = torch.softmax(logits.float(), -1)
    top = probs.topk(min(TOP, probs.numel()))
    p = {piece_text(model.tokenizer, int(i)): float(v) for v, i in zip(*top, strict=True)}
    options = ["", *p]
    kept = st.session_state.get(key, url.read(key))
    if isinstance(kept, str) and kept and kept not in options:
        options.append(kept)
    url.seed(key, options, url.default(key))

    def name(tok: str) -> str:
        if not tok:
            return default_label
        return f"{shown(tok)}  {p[tok]:.3f}" if tok in p else shown(tok)

    chosen = st.selectbox(label, options, format_func=name, key=key, accept_new_options=True)
    url.sync(key, url.default(key))
    return chosen or ""


def _swept(full: Trace, key: tuple, run) -> pd.DataFrame | None:
    """A sweep from the trace's memo, else run here with a progress bar and a Stop button (None
    when stopped: the Stop click's rerun ends the script inside `run`). key[-1] names the sweep
    ("heads", "residual"): each has its own button."""
    memo = full.memo
    if key in memo:
        return memo[key]
    stop_key, stopped = f"{STOP}_{key[-1]}", f"pt_stopped_{key[-1]}"
    if st.session_state.get(stop_key):
        st.session_state[stopped] = key
    if st.session_state.get(stopped) == key:
        st.info(t("pt.stopped"))
        if not st.button(t("pt.run"), key=f"pt_restart_{key[-1]}", type="primary"):
            return None
        st.session_state.pop(stopped, None)
    bar = st.progress(0.0, text=t("pt.measuring", done=0, total="…"))
    stop = st.empty()
    stop.button(t("pt.stop"), key=stop_key, icon=":material/stop:")

    def step(done: int, total: int) -> bool:
        bar.progress(done / total, text=t("pt.measuring", done=done, total=total))
        return True

    try:
        found = per_trace(full, key, lambda: run(step), keep=4)
    finally:
        bar.empty()
        stop.empty()
    return found


def _runs(full: Trace, model, clean: str, corrupt: str):
    """The two runs (per trace and corrupted text), before any answer is picked."""
    return per_trace(full, ("patch runs", corrupt), lambda: setup(model, clean, corrupt), keep=2)


def patch_view(trace: Trace) -> None:
    """The corrupted text, answer and foil, the exact and AtP head maps, the residual map."""
    got = model_and_run(trace)
    if got is None:
        return
    model, full = got
    corrupt = st.text_area(t("pt.corrupt"), help=t("pt.corrupt_help"), height=68,
                           **url.bound("cmp"))  # fmt: skip
    if model.kind != "decoder":
        st.info(t("pt.decoder_only", name=markup.code(model.name)))
        return
    if not corrupt.strip():
        st.info(t("pt.empty"))
        return
    try:
        base, run_a, run_b = _runs(full, model, full.request.text, corrupt)
        c1, c2 = st.columns(2)
        with c1:
            top = piece_text(model.tokenizer, base.answer)
            answer = _pick_token("pt_answer", t("pt.answer"), run_a.logits,
                           t("pt.default_answer", token=shown(top)), model)  # fmt: skip
        with c2:
            foil = _pick_token("pt_foil", t("pt.foil"), run_b.logits,
                         t("pt.default_foil", token=shown(piece_text(model.tokenizer, base.foil))),
                         model)  # fmt: skip
        s = with_tokens(base, (run_a, run_b), answer or None, foil or None)
    except (ValueError, TypeError) as err:
        st.info(input_problem(err))
        return
    _metric_line(s)
    try:
        _heads(full, s, (run_a, run_b), corrupt)
        _residual(full, s, (run_a, run_b), corrupt)
    except (ValueError, TypeError) as err:  # the sweep over the budget
        st.warning(input_problem(err))


def _metric_line(s) -> None:
    where = ", ".join(f"{i} {shown(s.clean_tokens[i])}→{shown(s.corrupt_tokens[i])}"
                      for i in s.differ) or "—"  # fmt: skip
    a = s.attrs()
    st.caption(t("pt.metric", answer=markup.code(shown(a["answer"])),
                 foil=markup.code(shown(a["foil"])), clean=s.clean, corrupt=s.corrupt,
                 where=markup.escape(where)))  # fmt: skip
    if abs(s.gap) < 1e-6:
        st.warning(t("pt.no_gap"))
    token_legend([*s.clean_tokens, *s.corrupt_tokens, a["answer"], a["foil"]])


def _heads(full: Trace, s, runs, corrupt: str) -> None:
    key = ("patch", corrupt, s.answer, s.foil, "heads")
    exact = _swept(full, key, lambda step: patching.sweep(s, runs, "heads", step=step))
    if exact is None:
        return
    estimate = lambda: attribution.attribute(s, runs, "heads", exact=exact)  # noqa: E731
    atp = per_trace(full, ("atp", corrupt, s.answer, s.foil, "heads"), estimate, keep=4)
    sel = selection()
    bound = figures._bound(exact, atp)
    names = dict(answer=shown(s.attrs()["answer"]), foil=shown(s.attrs()["foil"]))
    misses = figures.misses_of(atp)
    # side by side; in projector mode one above the other (two 8-head maps of big numbers
    # overlap in half a 1280-wide page)
    left, right = (st.container(), st.container()) if projector.on() else st.columns(2)
    with left:
        fig = figures.heads_figure(exact, sel, t("pt.exact_title", **names), bound=bound)
        chart(fig, key="pt_exact", name="patch_exact", on_select=lambda: _clicked("pt_exact"),
              selection_mode="points")  # fmt: skip
    with right:
        fig = figures.heads_figure(atp, sel, t("pt.atp_title", **names), misses, bound)
        chart(fig, key="pt_atp", name="patch_atp", on_select=lambda: _clicked("pt_atp"),
              selection_mode="points")  # fmt: skip
    st.caption(t("pt.heads_help", n=len(misses), total=len(atp)))
    shown_rows = atp.assign(exact=exact["effect"].to_numpy())
    cols = ["layer", "head", "exact", "effect", "effect_star", "query", "key", "value", "miss"]
    top = shown_rows.reindex(shown_rows["exact"].abs().sort_values(ascending=False).index)
    named = top[cols].head(TOP).rename(columns={"effect": "atp", "effect_star": "atp_star"})
    table(localized(named), hide_index=True, key="pt_table")
    st.caption(t("pt.table_help"))
    st.download_button(
        t("ex.csv_stats"), lambda: shown_rows.to_csv(index=False), file_name="patch_heads.csv",
        mime="text/csv", on_click="ignore", key="csv_patch",
    )  # fmt: skip


def _residual(full: Trace, s, runs, corrupt: str) -> None:
    st.markdown(t("pt.resid_heading"))
    count = s.n * len(patching.decoder_blocks(s.model))
    exact_on = st.toggle(t("pt.resid_exact", count=count), **url.bound("pt_exact_resid"))
    base = (corrupt, s.answer, s.foil, "residual")
    if exact_on:
        found = _swept(full, ("patch", *base),
                       lambda step: patching.sweep(s, runs, "residual", step=step))  # fmt: skip
        title = "pt.resid_title"
    else:
        found = per_trace(full, ("atp", *base), lambda: attribution.attribute(s, runs, "residual"),
                          keep=4)  # fmt: skip
        title = "pt.resid_atp_title"
    if found is None:
        return
    a = s.attrs()
    names = dict(answer=shown(a["answer"]), foil=shown(a["foil"]))
    fig = figures.residual_figure(
        found, s.corrupt_tokens, selection(), t(title, **names), _cell(), s.clean_tokens
    )
    chart(fig, key="pt_resid", name="patch_residual", on_select=_cell_clicked,
          selection_mode="points")  # fmt: skip
    st.caption(t("pt.resid_help"))
    st.download_button(
        t("ex.csv_stats"), lambda: found.to_csv(index=False), file_name="patch_residual.csv",
        mime="text/csv", on_click="ignore", key="csv_patch_resid",
    )  # fmt: skip
