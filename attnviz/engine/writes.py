"""What a head writes, not only where it looks: value-weighted attention (Kobayashi et al. 2020).

Head h at query i adds z_i W_O^h = Σ_j alpha_ij · f_h(x_j) to the residual stream, with
f_h(x_j) = W_O^h v_j^h: what key j sends through head h (W_O^h is the head's d_head rows of the
output projection, v_j^h the value vector of its K/V group under GQA/MQA). A large weight on a key
that sends almost nothing moves almost nothing, so

    moved[h, i, j] = alpha_ij · ||W_O^h v_j^h||_2

weighs each attention weight by the size of what it carries. The per-key norms are computed once,
when the trace is made (a [head, n_k] tensor, LayerTrace.f_norm); `moved` is recomputed from the
weights on access, so a long (lean) trace stores nothing n x n for it either. The output bias is
left out, as in the paper: it is added whatever the weights are.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    import pandas as pd

    from attnviz.engine.trace import LayerTrace, Trace


def key_norms(
    v: torch.Tensor, w_o: torch.Tensor, n_heads: int, silenced: Iterable[int] = ()
) -> torch.Tensor:
    """||W_O^h v_j^h||_2 for every query head h and key j, float32 where v lives.

    v: [..., n_kv_heads, n_k, d_head] (not expanded; query head h uses K/V head
    h // (n_heads // n_kv_heads)); w_o: [n_heads * d_head, d_model], rows in the order of the
    concatenated heads (x @ w_o, as GPT-2's Conv1D stores it; an nn.Linear's weight transposed).
    A silenced head sends nothing: its norms are 0. Returns [..., n_heads, n_k]."""
    n_kv, d_head = v.shape[-3], v.shape[-1]
    if n_heads % n_kv or w_o.shape[0] != n_heads * d_head:
        raise ValueError(
            f"W_O has {w_o.shape[0]} input rows and v {n_kv} K/V heads of {d_head}: expected "
            f"{n_heads} x {d_head} rows and a K/V head count that divides {n_heads}"
        )
    group = n_heads // n_kv  # query heads per K/V head
    off = set(silenced)
    norms = []
    for h in range(n_heads):
        w_h = w_o[h * d_head : (h + 1) * d_head].to(v.device, torch.float32)  # [d_head, d_model]
        sent = v[..., h // group, :, :].float() @ w_h  # [..., n_k, d_model]: f_h(x_j)
        norm = sent.norm(dim=-1)  # [..., n_k]
        norms.append(norm.zero_() if h in off else norm)
    return torch.stack(norms, dim=-2)  # [..., head, n_k]


def _f_norm(layer: LayerTrace) -> torch.Tensor:
    if layer.__dict__.get("_stored_f_norm") is None:
        raise ValueError(
            "this trace has no per-key norms ||W_O^h v_j|| (LayerTrace.f_norm), so `moved` is "
            "unknown: trace the text again with this version of attnviz (trace_text or "
            "trace_model); a trace made from attention weights alone has no values"
        )
    return layer.f_norm  # [head, n_k] CPU float32


def moved_of(layer: LayerTrace, head: int | None = None) -> torch.Tensor:
    """A LayerTrace's `moved` field, recomputed on access: weights · ||W_O^h v_j^h|| for every
    head [head, q, k], or for one [q, k]."""
    f = _f_norm(layer)  # [head, k]
    if head is None:
        return layer.weights * f.unsqueeze(1)  # [head, q, k]
    return layer.head("weights", head) * f[head].unsqueeze(0)  # [q, k]


def moved_block(
    layer: LayerTrace,
    head: int,
    rows: slice | torch.Tensor | None = None,
    cols: slice | torch.Tensor | None = None,
) -> torch.Tensor:
    """Head `head`'s moved on rows x cols: the weights' block (a lean layer recomputes only it)
    times the norms of those keys. [rows, cols] CPU float32"""
    f = _f_norm(layer)[head]  # [k]
    if cols is not None:
        f = f[cols] if isinstance(cols, slice) else f[torch.as_tensor(cols, dtype=torch.long)]
    return layer.block("weights", head, rows, cols) * f.reshape(1, -1)  # [rows, cols]


def is_punctuation(token: str) -> bool:
    """A token made of punctuation alone, once the tokenizers' space marks are set aside
    ("." "," "Ġ." "▁," "，" "。"); the Kobayashi comparison counts these with the special tokens."""
    text = token.replace("Ġ", "").replace("▁", "").replace("##", "").strip()
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def _positions(trace: Trace) -> dict[str, list[int]]:
    """The key positions of each group the comparison reports: special tokens ([CLS], [SEP], a
    decoder's start token; never padding), punctuation, and both."""
    n_k = trace.layers[0].n_k
    keys = trace.key_tokens or trace.tokens
    special = sorted(
        {p for name, ps in trace.special.items() if name != "[PAD]" for p in ps if p < n_k}
    )
    punct = [j for j, tok in enumerate(keys[:n_k]) if is_punctuation(tok) and j not in special]
    return {"special": special, "punct": punct, "both": sorted(special + punct)}


def _shares(layer: LayerTrace, cols: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """Per head, the sums over every query row of weights and moved: in total, and on each
    group's keys. A band of rows at a time (a lean layer: never n x n for all heads)."""
    from attnviz.engine.lean import BLOCK_CELLS

    f = _f_norm(layer)  # [head, k]
    n_heads, n_q, n_k = layer.n_heads, layer.n_q, layer.n_k
    sums = {
        f"{field}_{name}": torch.zeros(n_heads, dtype=torch.float64)
        for field in ("weights", "moved")
        for name in ("total", *cols)
    }
    step = max(1, BLOCK_CELLS // max(1, n_k))
    for h in range(n_heads):
        for r0 in range(0, n_q, step):
            w = layer.block("weights", h, slice(r0, min(n_q, r0 + step)))  # [r, k]
            col_sums = w.sum(0, dtype=torch.float64)  # [k] Σ_i w[i, j] over the band
            moved = col_sums * f[h].double()  # [k] Σ_i moved[i, j] over the band
            sums["weights_total"][h] += col_sums.sum()
            sums["moved_total"][h] += moved.sum()
            for name, keys in cols.items():
                sums[f"weights_{name}"][h] += col_sums[keys].sum()
                sums[f"moved_{name}"][h] += moved[keys].sum()
    return sums


def special_share(trace: Trace) -> pd.DataFrame:
    """The Kobayashi comparison: for each head, the share of its attention and the share of what
    it moves that go to special tokens and punctuation.

    share of x on keys S = Σ_i Σ_{j∈S} x[i, j] / Σ_i Σ_j x[i, j], over every query row, with x the
    weights (each row sums to 1, so this is the mean weight on S) or `moved`. Columns: layer,
    head, weights_special, moved_special ([CLS], [SEP], a decoder's start token; padding never),
    weights_punct, moved_punct (tokens of punctuation alone: "." "," "。"), weights_both,
    moved_both (the two together). A head that moves nothing (silenced) has NaN moved shares."""
    import pandas as pd

    cols = _positions(trace)
    rows = []
    for i, layer in enumerate(trace.layers):
        sums = _shares(layer, cols)
        for h in range(layer.n_heads):
            row = {"layer": i, "head": h}
            for name in cols:
                for field in ("weights", "moved"):
                    total = float(sums[f"{field}_total"][h])
                    part = float(sums[f"{field}_{name}"][h])
                    row[f"{field}_{name}"] = part / total if total > 0 else float("nan")
            rows.append(row)
    columns = ["layer", "head"] + [f"{f}_{n}" for n in cols for f in ("weights", "moved")]
    return pd.DataFrame(rows, columns=columns)
