"""Exact activation patching: does a component matter for one prediction?

Two prompts of the same length, clean ("… The cat was tired. … The cat was") and corrupt (the
same with one word changed), and the metric m = logit(answer) − logit(foil) after the last
token. For each component, its value on one run (the source) replaces its value on the other
(the base) and the model runs on; the row's `metric` is m of that patched run, and

    effect = (metric − m_corrupt) / (m_clean − m_corrupt)

Denoising (the default) patches the clean value into the corrupt run: effect 1 = that component
alone restores the clean answer. Noising patches the corrupt value into the clean run: effect 0
= that component alone destroys it. Components (`over`):

- "heads": each head's z before W_O at every position (where the what-if silencing zeroes it);
- "residual": each (layer, position) of the residual stream entering the layer;
- "positions": each head at each position of one `layer`.

One forward per component, several components per forward as batch rows, inside the budget
(engine/budget.py: a sweep's total work is checked before it starts). No streamlit here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from attnviz.engine.budget import budget, model_work, work
from attnviz.engine.hooked.loading import LoadedModel
from attnviz.i18n import Message
from attnviz.measures.patch_runs import (
    Caught,
    PatchSetup,
    check_decoder,
    decoder_blocks,
    effect,
    hooked,
    metric_of,
    rows_input,
    setup,
)

if TYPE_CHECKING:
    import pandas as pd

OVER = ("heads", "residual", "positions")
DIRECTIONS = ("denoising", "noising")
MOST_ROWS = 32  # components patched in one forward (batch rows)


def components(model: LoadedModel, n: int, over: str, layer: int | None) -> list[tuple]:
    """The components of a sweep, in order: (layer, head), (layer, position) or (layer, head,
    position)."""
    blocks = decoder_blocks(model)
    if over == "heads":
        return [(b.layer, h) for b in blocks for h in range(b.n_heads)]
    if over == "residual":
        return [(b.layer, t) for b in blocks for t in range(n)]
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(blocks):
        raise ValueError(
            f"over='positions' needs layer= one of 0..{len(blocks) - 1}, not {layer!r}"
        )
    return [(layer, h, t) for h in range(blocks[layer].n_heads) for t in range(n)]


def check_options(over: str, direction: str) -> None:
    if over not in OVER:
        raise ValueError(f"over={over!r} must be one of {', '.join(OVER)}")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {', '.join(DIRECTIONS)}")


def rows_per_forward(model: LoadedModel, n: int) -> int:
    """Components per forward: as many as one forward's work budget allows, at most MOST_ROWS."""
    one = max(1, model_work(model, 1, n))
    return max(1, min(MOST_ROWS, budget().max_model_work // one))


def check_sweep(model: LoadedModel, n: int, count: int) -> None:
    """Refuse a sweep of `count` patched forwards of n tokens whose work is over the budget."""
    need, most = model_work(model, count + 2, n), budget().max_sweep_work
    if need > most:
        fits = max(0, most // max(1, model_work(model, 1, n)) - 2)
        raise ValueError(Message(
            "patch.sweep_work", count=f"{count:,}", n=n, work=work(need), most=work(most),
            fits=f"{fits:,}",
        ))  # fmt: skip


def _writer(rows: list[tuple], over: str, src: Caught, d_head: int) -> dict:
    """The hooks' replacements for one forward: batch row r patches component rows[r]."""
    by_point: dict[tuple, list[tuple[int, tuple]]] = {}
    for r, comp in enumerate(rows):
        by_point.setdefault(("resid" if over == "residual" else "z", comp[0]), []).append((r, comp))

    def make(kind: str, layer: int, items: list[tuple[int, tuple]]):
        def write(x: torch.Tensor) -> torch.Tensor:  # [rows, n, width]
            x = x.clone()
            value = (src.resid if kind == "resid" else src.z)[layer].to(x.dtype)  # [n, width]
            for r, comp in items:
                if kind == "resid":
                    x[r, comp[1]] = value[comp[1]]
                    continue
                cols = slice(comp[1] * d_head, (comp[1] + 1) * d_head)
                at = slice(None) if len(comp) == 2 else comp[2]
                x[r, at, cols] = value[at, cols]
            return x

        return write

    return {point: make(*point, items) for point, items in by_point.items()}


def sweep(
    s: PatchSetup,
    runs: tuple[Caught, Caught],
    over: str = "heads",
    direction: str = "denoising",
    layer: int | None = None,
    step: Callable[[int, int], bool] | None = None,
) -> pd.DataFrame:
    """The patched metric of every component (see the module's docstring). `runs`: the clean and
    corrupt runs `setup` read. `step(done, total)` is called after each forward; when it returns
    False the sweep stops and the frame holds the rows done (attrs["stopped"] = True)."""
    import pandas as pd

    check_options(over, direction)
    model = s.model
    comps = components(model, s.n, over, layer)
    check_sweep(model, s.n, len(comps))
    src, base_ids = (runs[0], s.corrupt_ids) if direction == "denoising" else (runs[1], s.clean_ids)
    d_head = model.d_head
    size, metrics, stopped = rows_per_forward(model, s.n), [], False
    for start in range(0, len(comps), size):
        rows = comps[start : start + size]
        with torch.inference_mode(), hooked(model, write=_writer(rows, over, src, d_head)):
            out = model.model(**rows_input(base_ids, len(rows), model))
        metrics += metric_of(out.logits[:, -1], s.answer, s.foil).cpu().tolist()
        if step is not None and step(start + len(rows), len(comps)) is False:
            stopped = True
            break
    names = {"heads": ("layer", "head"), "residual": ("layer", "position"),
             "positions": ("layer", "head", "position")}[over]  # fmt: skip
    frame = pd.DataFrame(comps[: len(metrics)], columns=list(names))
    frame["metric"] = metrics
    frame["effect"] = effect(frame["metric"], s)
    frame.attrs.update(s.attrs(), over=over, direction=direction, stopped=stopped)
    return frame


def patch(
    model: LoadedModel,
    clean: str,
    corrupt: str,
    answer: int | str | None = None,
    foil: int | str | None = None,
    over: str = "heads",
    direction: str = "denoising",
    layer: int | None = None,
) -> pd.DataFrame:
    """Exact activation patching of a decoder on a clean and a corrupt text of as many tokens.

    The metric is logit(answer) − logit(foil) after the last token; answer and foil are token
    ids or one token's text ("tired" or " tired"), by default the clean run's top token and the
    corrupt run's top token (its second when that is the answer). `over`: "heads" (each head's
    z before W_O), "residual" (each layer's input at each position) or "positions" (each head at
    each position of `layer`). `direction`: "denoising" patches each clean value into the
    corrupt run, "noising" each corrupt value into the clean run.

    One row per component: layer, head and/or position, `metric` (the patched run's) and
    `effect` = (metric − corrupt) / (clean − corrupt). `attrs`: answer, foil (their text and
    ids), clean and corrupt (the metric of each run), clean_tokens, corrupt_tokens, differ (the
    positions where they differ), over, direction."""
    check_options(over, direction)
    check_decoder(model)
    components(model, 1, over, layer)  # a bad layer is refused before any forward
    s, run_clean, run_corrupt = setup(model, clean, corrupt, answer, foil)
    return sweep(s, (run_clean, run_corrupt), over, direction, layer)
