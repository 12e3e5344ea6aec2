"""Olsson et al. 2022: induction heads form in a phase change, seen as a bump in the training
loss. Measured on the Training lab's own run (attnviz.training.lab: a 2-layer attention-only
model trained on random token sequences said twice, [x, x]), from fixed seeds.

Per measured step the lab records the loss on the repeated half of 64 held-out sequences, the
loss on their first half (unpredictable: about ln(vocab)) and each last-layer head's induction
score (the weight from a repeated token to the token after its first occurrence). Two steps:

- the induction step: the first measured step where the best head's score passes 0.5 (the lab's
  INDUCTION_THRESHOLD, LabResult.crossed);
- the loss-bump step: where the in-context gap g = loss(repeated half) - loss(first half), the
  in-context loss, falls fastest: the middle of the interval between two measurements with the
  most negative slope (g_i - g_{i-1}) / (step_i - step_{i-1}).

The claim passes on a seed when the two steps are at most `phase_window` steps apart; the record
passes when it does on every seed. How sudden the change is, is recorded beside it: the share of
the run's whole fall of the in-context loss that happens within `phase_window` of the bump.
On this task the repeated half is predictable only by induction, so the loss and the score are
two readings of one mechanism: what the run shows is that both change at once, and suddenly."""

from __future__ import annotations

import time
from collections.abc import Sequence

from attnviz.claims.record import Record
from attnviz.claims.setting import Setting, command, link
from attnviz.training.lab import INDUCTION_THRESHOLD, LAB_SECONDS, LabConfig, LabResult, train

SOURCE = (
    "Olsson et al. 2022, In-context Learning and Induction Heads, Argument 1: induction heads "
    "form in a phase change, visible as a bump in the training loss"
)
LAB = "attnviz-training-lab"  # the record's model: the lab's 2-layer attention-only run


def first_crossing(steps: Sequence[int], best: Sequence[float], threshold: float) -> int | None:
    """The first step whose best induction score reaches `threshold`, or None."""
    return next((s for s, b in zip(steps, best, strict=True) if b >= threshold), None)


def bump(steps: Sequence[int], gap: Sequence[float]) -> tuple[float | None, float]:
    """(the middle of the interval where `gap` falls fastest, that slope per step); (None, 0.0)
    for fewer than two points."""
    if len(steps) < 2:
        return None, 0.0
    slopes = [(gap[i] - gap[i - 1]) / (steps[i] - steps[i - 1]) for i in range(1, len(steps))]
    i = min(range(len(slopes)), key=slopes.__getitem__)
    return (steps[i] + steps[i + 1]) / 2, slopes[i]


def series(result: LabResult) -> dict:
    """A run's curves by measured step: loss on each half, the gap, the best induction score."""
    pts = result.points
    return {
        "step": [p.step for p in pts],
        "loss": [p.loss for p in pts],
        "loss_first": [p.loss_first for p in pts],
        "gap": [p.loss - p.loss_first for p in pts],
        "induction": [max(p.induction) for p in pts],
    }


def abrupt(steps: Sequence[int], gap: Sequence[float], at: float | None, window: int) -> float:
    """The share of the run's whole fall of `gap` that happens between the measurements within
    `window` steps of `at`: how sudden the change is (0 where the gap does not fall)."""
    inside = [i for i, s in enumerate(steps) if at is not None and abs(s - at) <= window]
    whole = gap[0] - gap[-1]
    if len(inside) < 2 or whole <= 0:
        return 0.0
    return (gap[inside[0]] - gap[inside[-1]]) / whole


def judge_seed(curve: dict, window: int) -> dict:
    """One seed's two steps, their distance, whether they are within `window`, and the share of
    the in-context loss's fall within `window` of the bump."""
    crossed = first_crossing(curve["step"], curve["induction"], INDUCTION_THRESHOLD)
    at, slope = bump(curve["step"], curve["gap"])
    apart = None if crossed is None or at is None else abs(crossed - at)
    return {"induction_step": crossed, "bump_step": at, "bump_slope": slope, "apart": apart,
            "within": apart is not None and apart <= window,
            "fall_in_window": abrupt(curve["step"], curve["gap"], at, window)}  # fmt: skip


def config(s: Setting, seed: int) -> LabConfig:
    """The lab's induction run as its page starts it (its URL keys' defaults), from `seed`."""
    return LabConfig(steps=s.lab_steps, seed=seed, seconds=LAB_SECONDS)


def _reason(seeds: list[dict], window: int, ok: bool) -> str:
    said = "; ".join(
        f"seed {i}: induction passes {INDUCTION_THRESHOLD} at step {d['induction_step']}, the "
        f"in-context loss falls fastest at step {d['bump_step']}"
        for i, d in enumerate(seeds)
    )
    rule = f"criterion: at most {window} steps apart on every seed"
    if ok:
        return f"{said}; {rule}"
    missing = [i for i, d in enumerate(seeds) if d["induction_step"] is None]
    if missing:
        return f"{said}; no head passed {INDUCTION_THRESHOLD} on seed(s) {missing}; {rule}"
    return f"{said}; {rule}"


def phase_change(model: object, name: str, s: Setting, shared: dict | None = None) -> Record:
    """Train the lab's run on seeds 0 .. lab_seeds - 1 and compare the two steps (`model` is
    unused: the lab trains its own)."""
    start = time.perf_counter()
    progress = (shared or {}).get("progress")
    curves, seeds, stopped = [], [], []
    for seed in range(s.lab_seeds):
        result = train(config(s, seed))
        stopped.append(result.stopped)
        curves.append(series(result))
        seeds.append(judge_seed(curves[-1], s.phase_window))
        if progress is not None:
            progress((seed + 1) / s.lab_seeds)
    ok = all(d["within"] for d in seeds)
    first = seeds[0]
    cut = [i for i, how in enumerate(stopped) if how != "done"]
    reason = _reason(seeds, s.phase_window, ok)
    reason += (
        f"; seed 0: {first['fall_in_window']:.0%} of the run's fall of the in-context loss "
        f"comes within ±{s.phase_window} steps of its bump (of {s.lab_steps} steps)"
    )
    if cut:
        reason += f"; seed(s) {cut} stopped at the lab's time limit ({LAB_SECONDS:.0f} s)"
    return Record(
        claim="phase_change",
        statement="Induction heads form in a phase change: the step where the best head's "
        f"induction score passes {INDUCTION_THRESHOLD} is where the in-context loss drops fastest.",
        source=SOURCE,
        model=name,
        numbers={
            "induction_step": first["induction_step"],
            "bump_step": first["bump_step"],
            "apart": first["apart"],
            "window": s.phase_window,
            "fall_in_window": first["fall_in_window"],
            "seeds_within": sum(d["within"] for d in seeds),
            "seeds": s.lab_seeds,
            "steps": s.lab_steps,
        },
        verdict="pass" if ok else "fail",
        reason=reason,
        command=command("phase_change", name),
        paper={"phase_change": "induction heads and the loss bump in the same window of steps"},
        figure={
            **curves[0],
            "induction_step": first["induction_step"],
            "bump_step": first["bump_step"],
            "seeds": seeds,
        },  # fmt: skip
        link=link(
            "lab",
            lab_steps=s.lab_steps,
            lab_seed=0,
            lab_lr=config(s, 0).lr,
            lab_heads=config(s, 0).n_heads,
        ),  # fmt: skip
        seconds=time.perf_counter() - start,
    )
