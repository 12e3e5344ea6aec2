"""Why here: one head's logit at a (query, key) cell split into what the query and the key carry
(attnviz.measures.qk), drawn as a map of the largest query-side parts x the largest key-side
parts ("everything else" a last row and column, so the map adds up to the logit), the ranked
pairs with their share, every key of the row split by its key-side parts, and one sentence that
says it in words, from the measured figures."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.engine.trace import Trace
from attnviz.views.colour import BLUE, GREY, HIGHLIGHT
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map
from attnviz.views.selection import Selection
from attnviz.views.spec import apply_layout
from attnviz.views.tokens import shown

if TYPE_CHECKING:
    import pandas as pd

TOP = 8  # parts a side the map names; the rest are "everything else"
PAIRS = 12  # pairs the ranked bars show
KEYS = 16  # keys the per-key bars show (the row's largest logits)
KEY_PARTS = 6  # key-side parts named in the per-key bars
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")


def part_name(kind: str, layer: int | None, head: int | None, side: str, tr) -> str:
    """A part as the view names it: L16H0 (a head's write), MLP 5, token embedding, ..."""
    if kind == "head":
        return f"L{layer}H{head}"
    if kind == "mlp":
        return f"MLP {layer}"
    name = tr(f"why.kind.{kind}", side=tr(f"why.side.{side}"))
    return name if layer is None else f"{name} L{layer}"


def _names(table: pd.DataFrame, prefix: str, side: str, tr) -> list[str]:
    kinds = table[f"{prefix}_kind"].tolist()
    layers = table[f"{prefix}_layer"].astype("Float64").fillna(-1).astype(int).tolist()
    heads = table[f"{prefix}_head"].astype("Float64").fillna(-1).astype(int).tolist()
    return [part_name(k, la if la >= 0 else None, h if h >= 0 else None, side, tr)
            for k, la, h in zip(kinds, layers, heads, strict=True)]  # fmt: skip


def named(table: pd.DataFrame, sel: Selection) -> pd.DataFrame:
    """The split with each part's name (q_part, k_part) and its share of the logit."""
    out = table.copy()
    out["q_part"] = _names(table, "q", "query", sel.tr)
    out["k_part"] = _names(table, "k", "key", sel.tr)
    logit = table.attrs["logit"]
    out["share"] = out["score"] / logit if logit else np.nan
    out.attrs = dict(table.attrs)
    return out


def pair_matrix(table: pd.DataFrame, top: int = TOP) -> tuple[np.ndarray, list[str], list[str]]:
    """The top query-side parts (by |their row's sum|) x the top key-side parts, "everything
    else" the last row and column where there is more: [rows, cols], adding up to the logit."""
    grid = table.pivot_table(index="q_part", columns="k_part", values="score", aggfunc="sum",
                             fill_value=0.0)  # fmt: skip
    rows = grid.sum(1).abs().sort_values(ascending=False).index.tolist()
    cols = grid.sum(0).abs().sort_values(ascending=False).index.tolist()
    keep_r, keep_c = rows[:top], cols[:top]
    m = grid.loc[keep_r, keep_c].to_numpy()
    if len(cols) > top:
        m = np.column_stack([m, grid.loc[keep_r, cols[top:]].to_numpy().sum(1)])
    if len(rows) > top:
        rest = grid.loc[rows[top:]]
        last = [rest[keep_c].to_numpy().sum(0)]
        if len(cols) > top:
            last[0] = np.append(last[0], rest[cols[top:]].to_numpy().sum())
        m = np.vstack([m, last[0]])
    other = "…"
    return (
        m,
        keep_r + ([other] if len(rows) > top else []),
        keep_c + ([other] if len(cols) > top else []),
    )


def map_figure(table: pd.DataFrame, sel: Selection) -> go.Figure:
    tr = sel.tr
    m, rows, cols = pair_matrix(table)
    rows = [tr("why.else") if r == "…" else r for r in rows]
    cols = [tr("why.else") if c == "…" else c for c in cols]
    title = tr("why.map_title", logit=table.attrs["logit"], total=float(m.sum()))
    return draw_map(
        torch.tensor(m, dtype=torch.float32),
        Axis(cols, tr("why.key_side"), named=True, ticks=None),
        Axis(rows, tr("why.query_side"), named=True, ticks=None),
        Colour.diverging(tr("why.score")),
        Marks(numbers=True),
        Frame(title, max(360, 46 * len(rows) + 150)),
    )


def pairs_figure(table: pd.DataFrame, sel: Selection) -> go.Figure:
    """The pairs with the largest |score|, with their share of the logit."""
    tr = sel.tr
    top = table.reindex(table["score"].abs().sort_values(ascending=False).index).head(PAIRS)
    top = top.iloc[::-1]  # the largest at the top
    labels = [html.escape(f"{q} × {k}") for q, k in zip(top["q_part"], top["k_part"], strict=True)]
    shares = top["share"].to_numpy(dtype=float)
    fig = go.Figure(go.Bar(
        x=top["score"], y=labels, orientation="h",
        marker_color=[BLUE if s >= 0 else HIGHLIGHT for s in top["score"]],
        text=[f"{s:+.0%}" for s in shares], textposition="outside", cliponaxis=False,
        hovertemplate="%{y}: %{x:.3f}<extra></extra>",
    ))  # fmt: skip
    fig.update_yaxes(type="category", automargin=True)
    lo, hi = min(0.0, float(top["score"].min())), max(0.0, float(top["score"].max()))
    pad = 0.3 * (hi - lo or 1.0)  # room for the shares printed beside the bars
    fig.update_xaxes(title=html.escape(tr("why.score")), gridcolor="#eee", zerolinecolor="#888",
                     range=[lo - (pad if lo < 0 else 0), hi + pad])  # fmt: skip
    return apply_layout(fig, tr("why.pairs_title"), max(320, 30 * len(top) + 120))


def keys_figure(keys: pd.DataFrame, sel: Selection, chosen: int) -> go.Figure:
    """Every key of the row (its KEYS largest logits), each split by its key-side parts: which
    part makes each key win. Each bar's customdata is its key position (a click picks it)."""
    tr = sel.tr
    logits = dict(zip(sorted(set(keys["key"])), keys.attrs["logits"], strict=True))
    shown_keys = sorted(logits)
    sub = keys[keys["key"].isin(shown_keys)].copy()
    sub["name"] = [
        part_name(k, None if pd_na(la) else int(la), None if pd_na(h) else int(h), "key", tr)
        for k, la, h in zip(sub["kind"], sub["layer"], sub["head"], strict=True)
    ]
    by = sub.groupby("name")["score"].apply(lambda s: s.abs().sum()).sort_values(ascending=False)
    named_parts = by.index[:KEY_PARTS].tolist()
    tokens = dict(zip(sorted(set(keys["key"])), keys.attrs["tokens"], strict=True))
    x = [f"{j}: {html.escape(shown(tokens[j]))}" for j in shown_keys]
    fig = go.Figure()
    for c, name in enumerate([*named_parts, None]):
        part = sub[~sub["name"].isin(named_parts)] if name is None else sub[sub["name"] == name]
        y = part.groupby("key")["score"].sum().reindex(shown_keys, fill_value=0.0)
        fig.add_trace(go.Bar(
            x=x, y=y.to_numpy(), name=html.escape(tr("why.else") if name is None else name),
            marker_color=GREY if name is None else PALETTE[c % len(PALETTE)],
            customdata=[[j] for j in shown_keys],
            hovertemplate="%{x} · %{fullData.name}: %{y:.3f}<extra></extra>",
        ))  # fmt: skip
    fig.add_trace(go.Scatter(
        x=x, y=[logits[j] for j in shown_keys], mode="markers", name=html.escape(tr("why.logit")),
        marker=dict(color="black", symbol="diamond", size=9),
        customdata=[[j] for j in shown_keys], hovertemplate="%{x}: %{y:.3f}<extra></extra>",
    ))  # fmt: skip
    fig.update_layout(barmode="relative", legend=dict(orientation="h", y=-0.35))
    fig.update_xaxes(type="category", tickangle=-35 if len(x) > 6 else 0)
    fig.update_yaxes(title=html.escape(tr("why.logit")), gridcolor="#eee", zerolinecolor="#888")
    if chosen in shown_keys:
        at = shown_keys.index(chosen)
        fig.add_vrect(x0=at - 0.5, x1=at + 0.5, fillcolor=HIGHLIGHT, opacity=0.12, line_width=0)
    return apply_layout(fig, tr("why.keys_title"), 460)


def pd_na(value) -> bool:
    try:
        return value is None or bool(np.isnan(float(value)))
    except (TypeError, ValueError):
        return True


def sentence(table: pd.DataFrame, sel: Selection) -> str:
    """The split in one sentence, from the figures: the pair with the largest score, its share,
    and the key-side part that carries the most of the logit over all query-side parts."""
    tr = sel.tr
    top = table.loc[table["score"].abs().idxmax()]
    a = table.attrs
    key_side = table.groupby("k_part")["score"].sum()
    q_side = table.groupby("q_part")["score"].sum()
    k_best = key_side.abs().idxmax()
    q_best = q_side.abs().idxmax()
    logit = a["logit"]

    def share(v: float) -> float:
        return v / logit if logit else float("nan")

    return tr(
        "why.sentence",
        head=f"L{a['layer']}H{a['head']}",
        qtok=shown(a["query_token"]), qpos=a["query"], ktok=shown(a["key_token"]), kpos=a["key"],
        kpart=top["k_part"], qpart=top["q_part"], share=share(top["score"]), logit=logit,
        kbest=k_best, kshare=share(key_side[k_best]), qbest=q_best, qshare=share(q_side[q_best]),
    )  # fmt: skip


def why_table(model, trace: Trace, sel: Selection, key: int | None = None) -> pd.DataFrame:
    """The named split of the selection's cell (`key` None: the head's strongest key)."""
    from attnviz.measures.qk import qk_attribution

    return named(qk_attribution(model, trace, sel.layer, sel.head, sel.query, key), sel)


def keys_table(model, trace: Trace, sel: Selection) -> pd.DataFrame:
    from attnviz.measures.qk_sources import qk_keys

    row = trace.layers[sel.layer].block("logits", sel.head, [sel.query])[0]  # [n_k]
    finite = torch.isfinite(row)
    order = torch.argsort(
        torch.where(finite, row, torch.full_like(row, -torch.inf)), descending=True
    )
    keys = sorted(int(j) for j in order[: min(KEYS, int(finite.sum()))])
    if 0 <= sel.key < len(row) and bool(finite[sel.key]) and sel.key not in keys:
        keys = sorted([*keys, sel.key])
    return qk_keys(model, trace, sel.layer, sel.head, sel.query, side="key", keys=keys)


def why_figures(trace: Trace, sel: Selection, model) -> list[go.Figure]:
    """The "why" view for `attnviz.show`: the map, the ranked pairs and the per-key bars of the
    cell (sel.query, sel.key) of head (sel.layer, sel.head)."""
    table = why_table(model, trace, sel, sel.key)
    return [
        map_figure(table, sel),
        pairs_figure(table, sel),
        keys_figure(keys_table(model, trace, sel), sel, table.attrs["key"]),
    ]
