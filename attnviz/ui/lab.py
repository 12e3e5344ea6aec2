"""The Training lab's streamlit layer: settings bound to the URL, a background job per section
(attnviz.serve.lab) with a progress bar and a stop button, and its curves redrawn as it trains."""

from __future__ import annotations

import statistics

import streamlit as st

from attnviz.serve import lab as jobs
from attnviz.training.lab import INDUCTION_THRESHOLD, LAB_SECONDS, LabConfig, most_steps
from attnviz.ui import markup, url
from attnviz.ui.language import t
from attnviz.ui.widgets import chart
from attnviz.views import training

POLL_S = 1.0  # how often a training section redraws while its job runs


def induction_config() -> LabConfig | None:
    c1, c2, c3, c4 = st.columns(4)
    heads = _picked("lab_heads")  # drawn in the third column; it decides the steps' range
    steps = _steps_slider(c1, "lab_steps", 50, 2000, 50, n_heads=int(heads))
    lr = c2.select_slider(t("lab.lr"), url.key("lab_lr").options, url.default("lab_lr"),
                          **url.bound("lab_lr"))  # fmt: skip
    heads = c3.select_slider(t("lab.heads"), _fits("lab_heads", "n_heads"),
                             url.default("lab_heads"), **url.bound("lab_heads"))  # fmt: skip
    seed = c4.number_input(t("lab.seed"), 0, 9999, url.default("lab_seed"), 1,
                           **url.bound("lab_seed"))  # fmt: skip
    found = _configs(dict(steps=int(steps), lr=float(lr), n_heads=int(heads), seed=int(seed)))
    return None if found is None else found[0]


def scaling_configs() -> tuple[LabConfig, LabConfig] | None:
    c1, c2, _ = st.columns([1, 1, 2])
    d_k = c1.select_slider(t("lab.dk"), _fits("sc_dk", "d_k", eval_every=5),
                           url.default("sc_dk"), **url.bound("sc_dk"))  # fmt: skip
    steps = _steps_slider(c2, "sc_steps", 20, 1000, 10, d_k=int(d_k), eval_every=5)
    seed = int(st.session_state.get("lab_seed", url.default("lab_seed")))
    same = dict(d_k=int(d_k), steps=int(steps), seed=seed, eval_every=5)
    return _configs({**same, "use_scale": True}, {**same, "use_scale": False})


def _picked(key: str):
    """A select slider's value before it is drawn: this run's, else the link's, else the
    default."""
    value = st.session_state.get(key, url.read(key))
    return value if value in url.key(key).options else url.default(key)


def _fits(key: str, field: str, **settings) -> list:
    """The key's options that leave room for the steps slider's smallest run on this server."""
    lowest = {"lab_heads": 50, "sc_dk": 20}[key]
    options = url.key(key).options
    fitting = [o for o in options if most_steps(**{field: o}, **settings) >= lowest]
    return fitting or list(options[:1])


def _steps_slider(column, key: str, lo: int, hi: int, step: int, **settings) -> int:
    """A steps slider that offers only what this server's budget allows for these settings
    (most_steps), rounded down to its step; a value over it (another d_k, a link) comes down."""
    most = max(lo, min(hi, most_steps(**settings) // step * step))
    asked = st.session_state.get(key, url.read(key))  # this run's value, else the link's
    if isinstance(asked, int) and asked > most:
        st.session_state[key] = most
    default = min(url.default(key), most)
    return column.slider(t("lab.steps"), lo, most, default, step,
                         help=t("lab.steps_help", most=most), **url.bound(key))  # fmt: skip


def _configs(*settings: dict) -> tuple[LabConfig, ...] | None:
    """The runs of a section, or None after one message (not one per run) saying why not."""
    try:
        return tuple(LabConfig(**s) for s in settings)
    except (ValueError, TypeError) as err:
        st.error(t("lab.bad_settings", msg=markup.escape(err)))
        return None


def controls(name: str, configs: tuple[LabConfig, ...] | None) -> None:
    """Train / Stop buttons of one section; the job lives in the session (one per section)."""
    job = st.session_state.get(f"lab_job_{name}")
    running = job is not None and not job.done
    c1, c2, _ = st.columns([1, 1, 3])
    if c1.button(t("lab.train"), key=f"lab_train_{name}", type="primary",
                 disabled=running or configs is None, icon=":material/play_arrow:"):  # fmt: skip
        try:
            st.session_state[f"lab_job_{name}"] = jobs.start(configs)
        except jobs.Busy:
            st.warning(t("lab.busy", n=jobs.LAB_RUNS))
        else:
            st.rerun()
    c2.button(t("lab.stop"), key=f"lab_stop_{name}", disabled=not running,
              icon=":material/stop:", on_click=_stop, args=(job,))  # fmt: skip


STOP_WAIT_S = 1.0  # a step takes well under this: the run has ended when the page is drawn


def _stop(job: jobs.Job | None) -> None:
    """Stop's callback, before the rerun draws the page: ask the run to stop and wait for it
    (it stops after the step it is in), so this one rerun draws it stopped, Train enabled,
    instead of the section's next poll and another rerun of the page (Stop took 2.9 s that way)."""
    if job is None:
        return
    job.stop()
    if job.wait(STOP_WAIT_S):
        job.shown_done = True  # drawn ended by this rerun: no second one (_again)


def _progress(job: jobs.Job) -> None:
    done = job.progress()
    steps = sum(r.steps_done for r in job.results)
    total = sum(c.steps for c in job.configs)
    spent = max(r.seconds for r in job.results)
    if job.done:
        how = {r.stopped for r in job.results}
        key = (
            "lab.ended_stopped"
            if "stopped" in how
            else "lab.ended_time"
            if "time" in how
            else ("lab.ended_done")
        )
        st.progress(1.0, text=t(key, steps=steps, total=total, s=spent))
    else:
        st.progress(
            done, text=t("lab.running", steps=steps, total=total, s=spent, most=LAB_SECONDS)
        )
    if job.error:
        st.error(t("lab.failed", msg=markup.escape(job.error)))


def _induction() -> None:
    job = st.session_state.get("lab_job_induction")
    if job is None:
        st.info(t("lab.press_train"))
        return
    _progress(job)
    r = job.results[0]
    pts = list(r.points)
    if pts:
        xs = [p.step for p in pts]
        crossed = r.crossed()
        marks = {t("lab.appears", step=crossed): crossed} if crossed is not None else {}
        left, right = st.columns(2)
        with left:
            fig = training.curves(
                {t("lab.loss_repeat"): (xs, [p.loss for p in pts]),
                 t("lab.loss_first"): (xs, [p.loss_first for p in pts])},
                title=t("lab.loss_title"), x_title=t("lab.step"), y_title=t("lab.loss"),
                guides=training.Guides(marks=marks),
            )  # fmt: skip
            chart(fig, key="lab_loss")
        with right:
            n_heads = len(pts[0].induction)
            series = {
                t("lab.head", h=h): (xs, [p.induction[h] for p in pts]) for h in range(n_heads)
            }
            fig = training.curves(
                series, title=t("lab.ind_title"), x_title=t("lab.step"),
                y_title=t("lab.ind_score"), guides=training.Guides(
                    INDUCTION_THRESHOLD, t("lab.threshold", x=INDUCTION_THRESHOLD), marks
                ),
            )  # fmt: skip
            chart(fig, key="lab_induction")
        last = pts[-1]
        if crossed is not None:
            st.success(t("lab.crossed", step=crossed, x=INDUCTION_THRESHOLD,
                         score=max(last.induction), loss=last.loss))  # fmt: skip
        elif job.done:
            st.warning(t("lab.not_crossed", x=INDUCTION_THRESHOLD, score=max(last.induction)))
    _again(job)


def _scaling() -> None:
    job = st.session_state.get("lab_job_scaling")
    if job is None:
        st.info(t("lab.press_train"))
        return
    _progress(job)
    on, off = job.results
    d_k = on.config.d_k
    names = (t("lab.scaled", d=d_k), t("lab.unscaled", d=d_k))
    if on.points and off.points:
        panels = (
            ("loss", t("lab.loss_title_short"), t("lab.loss"), False),
            ("max_weight", t("lab.maxw_title"), t("lab.maxw"), False),
            ("entropy", t("lab.ent_title"), t("lab.ent"), False),
            ("grad_logits", t("lab.grad_title"), t("lab.grad"), True),
        )
        cols = st.columns(2)
        for i, (field, title, y_title, log_y) in enumerate(panels):
            series = {
                name: ([p.step for p in r.points], [getattr(p, field) for p in r.points])
                for name, r in zip(names, (on, off), strict=True)
            }
            with cols[i % 2]:
                fig = training.curves(series, title=title, x_title=t("lab.step"),
                                      y_title=y_title, log_y=log_y, height=300)  # fmt: skip
                chart(fig, key=f"lab_sc_{field}")
        g_on = statistics.mean(p.grad_logits for p in on.points)
        g_off = statistics.mean(p.grad_logits for p in off.points)
        qk_on = statistics.mean(p.grad_qk for p in on.points)
        qk_off = statistics.mean(p.grad_qk for p in off.points)
        st.markdown(
            t("lab.sc_measured", d=d_k, g_on=g_on, g_off=g_off, ratio=g_off / g_on,
              m_on=on.points[0].max_weight, m_off=off.points[0].max_weight,
              l_on=on.points[-1].loss, l_off=off.points[-1].loss,
              s_on=on.points[-1].step, s_off=off.points[-1].step)
        )  # fmt: skip
        st.caption(t("lab.sc_qk", qk_on=qk_on, qk_off=qk_off))
    _again(job)


def _again(job: jobs.Job) -> None:
    """Once the job has ended, rerun the whole page once (its Train button comes back)."""
    if job.done and not getattr(job, "shown_done", False):
        job.shown_done = True
        st.rerun()


_BODIES = {"induction": _induction, "scaling": _scaling}
# While a job trains its section redraws every POLL_S (only that fragment, not the page).
_LIVE = {name: st.fragment(run_every=POLL_S)(body) for name, body in _BODIES.items()}
_STILL = {name: st.fragment(body) for name, body in _BODIES.items()}


def section(name: str) -> None:
    """The section's progress and curves: redrawn as it trains, drawn once when not."""
    job = st.session_state.get(f"lab_job_{name}")
    (_LIVE if job is not None and not job.done else _STILL)[name]()
