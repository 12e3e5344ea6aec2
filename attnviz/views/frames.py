"""Tensors -> tidy pandas DataFrames, for tables and CSV export (harvardnlp's mtx2df idea)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnviz.engine.attention import masked_softmax
from attnviz.engine.trace import Trace
from attnviz.measures.stats import head_stats
from attnviz.views.tokens import shown


def to_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """float32 numpy (Plotly sends float32 as compact typed arrays; float16 falls back to lists)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float32).numpy()
    return np.asarray(x, dtype=np.float32)


def matrix_frame(
    matrix: torch.Tensor | np.ndarray, rows: list[str], cols: list[str], value: str = "value"
) -> pd.DataFrame:
    """A [rows, cols] matrix as a wide table: token labels numbered so repeats stay apart."""
    m = to_numpy(matrix)
    return pd.DataFrame(m, index=numbered(rows), columns=numbered(cols)).rename_axis(
        index="query", columns=value
    )


def head_weights(
    trace: Trace, layer: int, head: int, window: tuple[int, int], field: str = "weights"
) -> tuple[torch.Tensor, list[str], list[str]]:
    """One head's weights (or `field` "moved") for a download, with their query and key tokens:
    the whole map, or for a lean trace (which never holds one whole, nor do its words) the
    window's block. A copy: a download kept with a session holds one head, not the trace."""
    lt = trace.layers[layer]
    rows, cols = list(trace.tokens), list(trace.key_tokens)
    whole = slice(None)
    if not lt.holds_maps:
        lo, hi = window
        whole, rows, cols = slice(lo, hi), rows[lo:hi], cols[lo:hi]
    w = lt.block(field, head, whole, whole).clone()  # [q, k]
    # a cell the mask hides is empty in the CSV, not a weight of 0
    return w.masked_fill(~lt.block("mask", head, whole, whole), math.nan), rows, cols


def numbered(tokens: list[str]) -> list[str]:
    """CSV headers and row names: "3:␣cat", each token as every view draws it."""
    return [f"{i}:{shown(t)}" for i, t in enumerate(tokens)]


def head_stats_frame(trace: Trace, field: str = "weights") -> pd.DataFrame:
    """One row per (layer, head) with every statistic of attnviz.measures.stats.head_stats (of the
    weights, or of moved's rows scaled to sum to 1), then the Kobayashi comparison's shares of
    weights and of moved on special tokens and punctuation (engine.stats.special_share) where
    the trace has the per-key norms. A trace without special tokens (a model that adds none) has
    no column on them (all 0) nor "both" (punctuation again)."""
    from attnviz.measures.stats import special_share

    stats = head_stats(trace, field)
    if not any(trace.special.values()):
        del stats["special"]  # always 0 without [CLS] / [SEP] / [PAD]
    # Share of weight on each kind of special token ([CLS], [SEP]...), averaged over queries.
    # Only those key columns of each head (a lean trace recomputes just them).
    for name, positions in sorted(trace.special.items()):
        if name != "[PAD]" and positions and field == "weights":
            stats[f"on {name}"] = torch.tensor([
                [float(lt.block("weights", h, None, positions).sum(-1).mean())
                 for h in range(lt.n_heads)] for lt in trace.layers
            ])  # [layer, head]  # fmt: skip
    n_layers, n_heads = stats["entropy"].shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            row: dict[str, Any] = {"layer": layer, "head": head}
            row.update({name: float(value[layer, head]) for name, value in stats.items()})
            rows.append(row)
    table = pd.DataFrame(rows)
    if trace.has("moved"):
        shares = special_share(trace).drop(columns=["layer", "head"])
        if not any(trace.special.values()):
            shares = shares.drop(columns=[c for c in shares if c.endswith(("_special", "_both"))])
        table = pd.concat([table, shares.reset_index(drop=True)], axis=1)
    return table


def query_frame(trace: Trace, layer: int, head: int, query: int) -> pd.DataFrame:
    """One query against every key, step by step: q·k, × scale, exp (shifted), softmax weight;
    a key the mask hides has −∞ after the scale and no exp or weight at all (NaN, shown as
    empty), never a weight of 0."""
    lt = trace.layers[layer]
    scores = lt.head("scores", head)[query].double()  # [k]
    allowed = torch.ones_like(scores, dtype=torch.bool) if lt.mask is None else lt.mask[query]
    logits = (scores * lt.scale).masked_fill(~allowed, -math.inf)  # [k]
    top = logits[allowed].max() if bool(allowed.any()) else torch.tensor(0.0, dtype=torch.float64)
    # exp(logit - max): the stable form softmax really computes; the max cancels in the ratio.
    exps = torch.exp(logits - top)  # [k]
    probs = masked_softmax(scores * lt.scale, allowed)  # [k] = exps / exps.sum()
    return pd.DataFrame(
        {
            "key": numbered(trace.key_tokens or trace.tokens),
            "q·k": scores.numpy(),
            "× scale": logits.numpy(),
            "exp(· − max)": exps.masked_fill(~allowed, math.nan).numpy(),
            "softmax": probs.masked_fill(~allowed, math.nan).numpy(),
            "weight (trace)": lt.head("weights", head)[query].double().numpy(),
            "allowed": allowed.numpy(),
        }
    )


def trace_to_dict(trace: Trace) -> dict[str, Any]:
    """The whole trace as plain lists, for JSON export."""
    layers = []
    for lt in trace.layers:
        layers.append(
            {
                "scale": lt.scale,
                "mask": None if lt.mask is None else lt.mask.tolist(),
                **{
                    name: to_numpy(getattr(lt, name)).round(6).tolist()
                    for name in ("q", "k", "v", "scores", "weights", "z", "output")
                },
            }
        )
    return {
        "source": trace.source,
        "tokens": trace.tokens,
        "key_tokens": trace.key_tokens,
        "truncated": trace.truncated,
        "n_input_tokens": trace.n_input_tokens,
        "token_types": trace.token_types,
        "special": trace.special,
        "layers": layers,
    }
