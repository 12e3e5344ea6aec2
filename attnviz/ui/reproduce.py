"""The Reproduce page's parts: the saved report (or records measured live in this session), the
table of verdicts, one card per claim with its badges, figure, link and command, and measuring
again here with a progress bar and a Stop button."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import streamlit as st

from attnviz.claims import report
from attnviz.claims.record import Record
from attnviz.claims.run import CLAIMS, MODELS
from attnviz.measures.roles import THRESHOLDS
from attnviz.ui import markup, url
from attnviz.ui.language import t
from attnviz.ui.widgets import chart, table
from attnviz.views import claims as figures

REPORT = Path(__file__).resolve().parent.parent / "assets" / "reproduce" / "report.json"
REPORT_ENV = "ATTNVIZ_REPRODUCE_REPORT"
BADGE = {"pass": ("green", ":material/check:"), "fail": ("red", ":material/close:"),
         "not comparable": ("gray", ":material/remove:")}  # fmt: skip
LIVE = "rp_live"  # records measured in this session: (claim, model) -> Record


def report_path() -> Path:
    return Path(os.environ.get(REPORT_ENV) or REPORT)


def saved() -> tuple[dict | None, list[Record]]:
    """The saved report's facts and records, with this session's live records in their place."""
    path = report_path()
    facts, records = None, []
    if path.is_file():
        try:
            facts, records = report.read(path)
        except ValueError as err:
            st.error(t("rp.bad_report", why=markup.escape(err)))
    else:
        st.info(t("rp.no_report", path=markup.escape(path)))
    live = st.session_state.get(LIVE, {})
    if live:
        kept = [r for r in records if (r.claim, r.model) not in live]
        records = kept + list(live.values())
        st.caption(t("rp.live_note", n=len(live)))
    order = {c: i for i, c in enumerate(CLAIMS)}
    return facts, sorted(records, key=lambda r: order.get(r.claim, len(order)))


def verdict_label(v: str) -> str:
    return t("rp." + v.replace(" ", "_"))


def _numbers(r: Record) -> str:
    shown = [f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r.numbers.items()]
    return ", ".join(shown)


def summary(facts: dict | None, records: list[Record]) -> None:
    """The table of verdicts, its CSV and the report's JSON to download."""
    if facts is not None:
        st.caption(t("rp.saved", date=facts["date"], seconds=facts["seconds"],
                     threads=facts["threads"]))  # fmt: skip
    if not records:
        return
    st.subheader(t("rp.summary"))
    frame = pd.DataFrame({
        t("rp.col.claim"): [t(f"rp.claim.{r.claim}") for r in records],
        t("rp.col.model"): [r.model for r in records],
        t("rp.col.verdict"): [verdict_label(r.verdict) for r in records],
        t("rp.col.numbers"): [_numbers(r) for r in records],
    })  # fmt: skip
    table(frame, hide_index=True, wrap=True)
    c1, c2 = st.columns(2)
    c1.download_button(t("rp.download_csv"), frame.to_csv(index=False).encode("utf-8"),
                       "reproduce.csv", "text/csv", icon=":material/download:")  # fmt: skip
    data = {**(facts or {}), "records": [r.as_json() for r in records]}
    c2.download_button(t("rp.download_json"), json.dumps(data, ensure_ascii=False, indent=1),
                       "report.json", "application/json", icon=":material/download:")  # fmt: skip


def badges(records: list[Record]) -> None:
    cols = st.columns(max(len(records), 1))
    for col, r in zip(cols, records, strict=False):
        colour, icon = BADGE[r.verdict]
        with col:
            st.badge(f"{r.model}: {verdict_label(r.verdict)}", color=colour, icon=icon)


def got(r: Record) -> str:
    """The record's numbers in one translated sentence."""
    n = r.numbers
    if r.verdict == "not comparable" and not n:
        return markup.escape(r.reason)
    fmt = {
        "sink": lambda: dict(share=n["sink_metric"], heads=n["heads"], first=n["first_token"]),
        "sink_norms": lambda: dict(h=n["h_ratio_median"], k=n["k_ratio_median"],
                                   v=n["v_ratio_median"]),
        "kobayashi": lambda: dict(raw=n["weights_share_mean"], moved=n["moved_share_mean"],
                                  n=n["layers_shrunk"], layers=n["layers"]),
        "bos": lambda: dict(plain=n["plain_leading_bos"], chat=n["chat_leading_bos"],
                            first=n["chat_first_tokens"]),
        "in_context": lambda: dict(late=n["loss_late"], early=n["loss_early"], score=n["score"]),
        "prefix_matching": lambda: dict(head=n["top_head"], score=n["top_score"],
                                        over=n["heads_over_threshold"]),
        "knockout": lambda: dict(share=n["share_top6"] or 0.0, benefit=n["benefit"],
                                 beats=_beats(r.figure)),
        "phase_change": lambda: dict(induction=_step(n["induction_step"]),
                                     bump=_step(n["bump_step"]), window=n["window"],
                                     fall=n["fall_in_window"],
                                     within=n["seeds_within"], seeds=n["seeds"]),
        "heads_needed": lambda: dict(k=n["heads_needed"], total=n["heads"],
                                     share=n["share_of_heads"] or 0.0, carried=n["carried"] or 0.0,
                                     benefit=n["benefit"], kind=n["attention"], q=n["query_heads"],
                                     kv=n["kv_heads"], most=len(r.figure.get("joint", []))),
    }[r.claim]()  # fmt: skip
    key = f"rp.got.{r.claim}"
    if r.claim == "heads_needed" and n["heads_needed"] is None:  # no set of heads to count
        key += "_none" if n["benefit"] <= 0 else "_over"
    # the template is ours; a value that is text (a token, a head's name) is shown as code
    return t(key, **{k: markup.code(v) if isinstance(v, str) else v
                     for k, v in fmt.items()})  # fmt: skip


def _step(x: float | None) -> str:
    return "—" if x is None else f"{x:g}"


def _beats(figure: dict) -> str:
    ks = [k for k, top, sets in zip(figure["k"], figure["top"], figure["random"], strict=True)
          if top > max(sets)]  # fmt: skip
    return ", ".join(map(str, ks)) or "—"


def record_block(r: Record) -> None:
    """One model's record inside a claim's card: the numbers, the figure, link and command."""
    colour, icon = BADGE[r.verdict]
    st.badge(verdict_label(r.verdict), color=colour, icon=icon)
    st.markdown(got(r))
    fig = model_figure(r)
    if fig is not None:
        chart(fig, key=f"rp_{r.claim}_{r.model}", name=f"{r.claim}_{r.model}")
    if r.paper:
        paper = ", ".join(f"{k} {v}" for k, v in r.paper.items())
        st.caption(t("rp.paper", numbers=markup.code(paper)))
    if r.link:
        href = f"{r.link['page']}?{r.link['query']}"
        st.link_button(t("rp.open"), href, icon=":material/open_in_new:")
    st.caption(t("rp.command"))
    st.code(r.command, language="bash")
    with st.expander(t("rp.reason")):
        st.text(r.reason)
        st.caption(t("rp.seconds", seconds=r.seconds))


def model_figure(r: Record):
    f = r.figure
    if not f:
        return None
    if r.claim == "sink_norms":
        names = {"h": "‖h‖", "k": "‖k‖", "v": "‖v‖", "first": t("rp.name.first"),
                 "others": t("rp.name.others")}  # fmt: skip
        return figures.norms(f, names, t("rp.fig.sink_norms", model=r.model), t("rp.axis.layer"))
    if r.claim == "kobayashi":
        return figures.raw_vs_moved(f, (t("rp.name.weights"), t("rp.name.moved")),
                                    t("rp.fig.kobayashi"), t("rp.axis.layer"),
                                    t("rp.axis.share"))  # fmt: skip
    if r.claim == "prefix_matching":
        return figures.prefix_bars(f, (t("rp.name.atlas"), t("rp.name.fresh")),
                                   t("rp.fig.prefix", model=r.model), t("rp.axis.score"),
                                   THRESHOLDS["induction"])  # fmt: skip
    if r.claim == "knockout":
        names = {k: t(f"rp.name.{k}") for k in ("top", "random", "random_mean", "base")}
        names |= {"first": t("rp.name.first_copy"), "k": t("rp.axis.k"),
                  "loss": t("rp.axis.loss")}  # fmt: skip
        return figures.knockout(f, names, t("rp.fig.knockout", model=r.model))
    if r.claim == "phase_change":
        keys = ("loss", "loss_first", "induction", "induction_step", "bump_step")
        names = {k: t(f"rp.name.{k}") for k in keys}
        names |= {"step": t("rp.axis.step"), "loss_axis": t("rp.axis.loss"),
                  "score_axis": t("rp.axis.induction")}  # fmt: skip
        return figures.phase(f, names, t("rp.fig.phase_change"))
    return None


def claim_figure(claim: str, records: list[Record]):
    """The figure a claim draws over all its models at once, or None."""
    drawn = [r for r in records if r.figure]
    if claim == "sink" and drawn:
        series = {r.model: r.figure["layer_share"] for r in drawn}
        return figures.by_layer(series, t("rp.fig.sink"), t("rp.axis.layer"), t("rp.axis.share"))
    if claim == "in_context" and drawn:
        series = {r.model: r.figure for r in drawn}
        return figures.loss_curve(series, t("rp.fig.in_context"), t("rp.axis.position"),
                                  t("rp.axis.loss"))  # fmt: skip
    if claim == "heads_needed" and drawn:
        numbers = {r.model: r.numbers for r in drawn}
        return figures.heads_bars(numbers, t("rp.fig.heads_needed"), t("rp.axis.heads_share"))
    return None


def card(claim: str, records: list[Record]) -> None:
    """One claim: its title and sentence, its source, a badge per model, its figures."""
    with st.container(border=True, key=f"rp_card_{claim}"):
        st.subheader(t(f"rp.claim.{claim}"))
        st.markdown(t(f"rp.says.{claim}"))
        st.caption(t("rp.source", source=t(f"rp.src.{claim}")))
        badges(records)
        fig = claim_figure(claim, records)
        if fig is not None:
            chart(fig, key=f"rp_{claim}_all", name=claim)
        tabs = st.tabs([r.model for r in records])
        for tab, r in zip(tabs, records, strict=True):
            with tab:
                record_block(r)


def live() -> None:
    """Measure picked claims on picked models in this session, with progress and Stop."""
    with st.expander(t("rp.live")):
        st.caption(t("rp.live_help"))
        name = lambda c: t(f"rp.claim.{c}")  # noqa: E731
        url.seed_list("rp_claims", list(CLAIMS), default=url.default("rp_claims"))
        url.seed_list("rp_models", list(MODELS), default=url.default("rp_models"))
        claims = st.multiselect(t("rp.live_claims"), list(CLAIMS), format_func=name,
                                key="rp_claims")  # fmt: skip
        models = st.multiselect(t("rp.live_models"), list(MODELS), key="rp_models")
        url.sync_list("rp_claims", empty_marker=True)  # none picked is kept as none
        url.sync_list("rp_models", empty_marker=True)
        if st.session_state.get("rp_stop"):  # the Stop button's rerun ended the run
            st.info(t("rp.stopped"))
        if not st.button(t("rp.measure"), key="rp_measure", type="primary",
                         disabled=not claims or not models):  # fmt: skip
            return
        bar = st.progress(0.0, text=t("rp.measuring", what="…", done=0.0))
        stop = st.empty()
        stop.button(t("rp.stop"), key="rp_stop", icon=":material/stop:")
        store = st.session_state.setdefault(LIVE, {})

        def progress(done: float, what: str) -> None:
            bar.progress(min(done, 1.0), text=t("rp.measuring", what=what, done=done))

        from attnviz.claims import reproduce

        plan = [(c, m) for m in models for c in claims if m in CLAIMS[c].models]
        for i, (claim, model) in enumerate(plan):  # each kept as it ends: Stop keeps them

            def step(done: float, what: str, i=i) -> None:
                progress((i + done) / len(plan), what)

            try:
                for r in reproduce([claim], [model], progress=step):
                    store[(r.claim, r.model)] = r
            except (ValueError, RuntimeError) as err:
                st.error(t("rp.failed", why=markup.escape(err)))
        bar.empty()
        stop.empty()
        st.rerun()
