"""One head's queries and keys over several texts in one plane: the head atlas's Q/K map
(AttentionViz's joint embedding)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from attnviz.engine.trace import Trace


def qk_map(traces: Sequence[Trace], layer: int, head: int, dims: int = 2) -> pd.DataFrame:
    """One head's queries and keys over several texts in one 2-D projection, as AttentionViz
    draws them: keys translated so that their mean is the queries' mean (q·k moves by the same
    amount for every key of a query, so the weights do not change), then q scaled by c and k by
    1/c with c² = mean |k| / mean |q| (q·k unchanged, both clouds the same size), so that a short
    distance means a large q·k; then PCA (torch). The q and k are the ones the model's softmax
    saw: after RoPE, and for grouped-query attention the keys of the head's K/V group. One row a
    point: x, y, kind ("query" / "key"), text, position, token; with dims > 2, the further
    principal components as pc2, pc3, ... (all of them keep every distance)."""
    qs, ks, rows = [], [], []
    for t, trace in enumerate(traces):
        block = trace.layers[layer]
        q = block.head("q", head)  # [n_q, d_head]
        k = block.head("k", block.kv_head(head))  # [n_k, d_head] the head's K/V group
        qs.append(q)
        ks.append(k)
        rows += [("query", t, i, tok) for i, tok in enumerate(trace.tokens)]
    keys = [
        ("key", t, j, tok) for t, tr in enumerate(traces) for j, tok in enumerate(tr.key_tokens)
    ]
    q, k = torch.cat(qs).double(), torch.cat(ks).double()  # [N_q, d], [N_k, d]
    k = k - k.mean(0) + q.mean(0)
    c = (k.norm(dim=-1).mean() / q.norm(dim=-1).mean().clamp_min(1e-12)).sqrt()
    points = torch.cat([q * c, k / c])  # [N_q + N_k, d]
    points = points - points.mean(0)
    _, _, v = torch.linalg.svd(points, full_matrices=False)  # principal axes in v's rows
    xy = (points @ v[: max(2, dims)].T).float()  # [N, dims]
    if xy.shape[1] < 2:  # d_head 1
        xy = torch.cat([xy, torch.zeros(len(xy), 1)], 1)
    frame = pd.DataFrame(rows + keys, columns=["kind", "text", "position", "token"])
    frame["x"], frame["y"] = xy[:, 0].tolist(), xy[:, 1].tolist()
    for d in range(2, xy.shape[1]):
        frame[f"pc{d}"] = xy[:, d].tolist()
    return frame
