"""Head roles: what every head of a model does, measured over many texts (the head atlas).

Each score is a mean over every eligible (text, query row i) pair of all texts, from the weights w
of one head on one text (texts are traced one at a time):

| score           | rows                                  | value                             |
|-----------------|---------------------------------------|-----------------------------------|
| previous_token  | i >= 1                                | w[i, i-1]                         |
| first_token     | i >= 1                                | w[i, 0]                           |
| self            | every row                             | w[i, i]                           |
| duplicate_token | token i occurred before, latest at j, | w[i, j]                           |
| induction       | ... and j + 1 < i                     | w[i, j + 1]                       |
| entropy         | rows that may see >= 2 keys           | H(w[i]) / ln(keys row i may see)  |
| special         | every row                             | weight on special tokens past 0   |
| punctuation     | every row                             | weight on punctuation tokens      |
| distance        | every row                             | sum_j w[i, j] |i - j|             |

A head's `role` is the score that clears its threshold (THRESHOLDS) by the largest factor, else
"mixed"; "broad" is the role of a high entropy. Tokens are compared by their string (one string per
id in a model's vocabulary). Cross-attention has no positions in common with its queries: only
first_token, entropy, special and punctuation are measured there (the rest are NaN).
"""

from __future__ import annotations

import math
import tomllib
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from attnviz.engine.trace import LayerTrace, Trace

SCORES = (
    "previous_token",
    "first_token",
    "self",
    "duplicate_token",
    "induction",
    "entropy",
    "special",
    "punctuation",
)
EXTRA = ("distance",)
# A role is given when its score reaches this; the role is the score furthest past its threshold.
THRESHOLDS = {
    "previous_token": 0.4,
    "first_token": 0.5,
    "self": 0.4,
    "duplicate_token": 0.3,
    "induction": 0.3,
    "special": 0.5,
    "punctuation": 0.5,
    "broad": 0.9,  # entropy
}
ROLES = (*THRESHOLDS, "mixed")
ROLE_SCORE = {role: ("entropy" if role == "broad" else role) for role in THRESHOLDS}
POSITIONAL = ("previous_token", "self", "duplicate_token", "induction", "distance")
PROBES = Path(__file__).resolve().parent.parent / "assets" / "probes"
MAX_TEXTS = 64  # texts one atlas measures (the probe set holds ~12 per language)
_SPECIAL_LABELS = ("[CLS]", "[SEP]")  # trace.special labels counted (padding is masked anyway)
_PREFIXES = ("##", "Ġ", "▁")  # word-piece markers stripped before the punctuation test


def probe_texts(lang: str = "en") -> dict[str, list[str]]:
    """The built-in probe set of a language ("en", "zh" or "both"): {"natural": sentences,
    "repeated": random words repeated (for induction), "passage": one longer text}."""
    if lang == "both":
        en, zh = probe_texts("en"), probe_texts("zh")
        return {kind: en[kind] + zh[kind] for kind in en}
    if lang not in ("en", "zh"):
        raise ValueError(f"lang={lang!r}: the probe set speaks 'en', 'zh' or 'both'")
    with open(PROBES / f"{lang}.toml", "rb") as f:
        raw = tomllib.load(f)
    return {kind: list(raw[kind]) for kind in ("natural", "repeated", "passage")}


def probe_list(lang: str = "en") -> list[str]:
    """The probe set as one list of texts, in the order natural, repeated, passage."""
    return [text for texts in probe_texts(lang).values() for text in texts]


def is_punctuation(token: str) -> bool:
    """A token made only of punctuation (after its word-piece marker): "," "。" "##." "Ġ!"."""
    for prefix in _PREFIXES:
        if token.startswith(prefix) and len(token) > len(prefix):
            token = token[len(prefix) :]
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def repeats(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """(i, j) for every row i whose token occurred before, j its latest earlier position, with
    j + 1 < i (so that w[i, j + 1], the induction target, is not the previous token)."""
    last: dict[str, int] = {}
    found = []
    for i, token in enumerate(tokens):
        j = last.get(token)
        if j is not None and j + 1 < i:
            found.append((i, j))
        last[token] = i
    return found


@dataclass
class _Pool:
    """Running sums of one block's scores: sum and count per score, [head] each, and the row
    where each head shows each score most (its value, text, row, key)."""

    n_heads: int
    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    best: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = field(
        default_factory=dict
    )
    n_repeats: int = 0

    def add(
        self, name: str, values: torch.Tensor, rows: torch.Tensor, keys: torch.Tensor, text: int
    ) -> None:
        """values [head, r] of r eligible rows (their positions `rows` [r], the key each shows
        `keys` [head, r] or [r]) of text number `text`."""
        r = values.shape[-1]
        values = values.double().cpu()
        zero = torch.zeros(self.n_heads, dtype=torch.float64)
        self.sums[name] = self.sums.get(name, zero) + values.sum(-1)
        self.counts[name] = self.counts.get(name, 0) + r
        if r == 0:
            return
        top, at = values.max(-1)  # [head]
        keys = keys.cpu().expand(self.n_heads, r)  # [head, r]
        new = (top, torch.full_like(at, text), rows.cpu()[at], keys.gather(1, at[:, None])[:, 0])
        if name not in self.best:
            self.best[name] = new
            return
        better = top > self.best[name][0]  # [head]
        self.best[name] = tuple(
            torch.where(better, n, o) for n, o in zip(new, self.best[name], strict=True)
        )

    def means(self) -> dict[str, torch.Tensor]:
        nan = torch.full((self.n_heads,), float("nan"), dtype=torch.float64)
        return {
            name: self.sums[name] / self.counts[name] if self.counts.get(name) else nan
            for name in (*SCORES, *EXTRA)
        }


def _layer_scores(
    pool: _Pool, layer: LayerTrace, text: int, cross: bool, pairs: list, keysets: dict
) -> None:
    """Add one block's rows of one text to its pool."""
    w = layer.stored("weights").float()  # [head, q, k] where the trace lives
    n_q, n_k = w.shape[-2:]
    dev = w.device
    mask = layer.mask  # [q, k] or None
    seen = torch.full((n_q,), n_k) if mask is None else mask.sum(-1)  # [q] keys each row may see
    every = torch.arange(n_q)  # [q]
    later = every[1:]  # rows i >= 1
    if not cross and n_q > 1:
        prev = torch.diagonal(w, offset=-1, dim1=1, dim2=2)  # [head, q-1]: w[i, i-1]
        pool.add("previous_token", prev, later, later - 1, text)
    pool.add("first_token", w[:, 1:, 0], later, torch.zeros_like(later), text)
    if not cross:
        pool.add("self", torch.diagonal(w, dim1=1, dim2=2), every, every, text)
        dist = (every[:, None] - every[None, :]).abs().to(dev, w.dtype)  # [q, k]
        pool.add("distance", (w * dist).sum(-1), every, w.argmax(-1), text)
        pool.n_repeats += len(pairs)
        i = torch.tensor([p[0] for p in pairs], dtype=torch.long)  # [r]
        j = torch.tensor([p[1] for p in pairs], dtype=torch.long)  # [r]
        pool.add("duplicate_token", w[:, i.to(dev), j.to(dev)], i, j, text)
        pool.add("induction", w[:, i.to(dev), (j + 1).to(dev)], i, j + 1, text)
    wide = (seen >= 2).nonzero()[:, 0]  # [r] rows that may see two keys or more
    entropy = torch.special.entr(w[:, wide.to(dev)]).sum(-1)  # [head, r] nats
    entropy = entropy / seen[wide].to(dev, w.dtype).log()
    pool.add("entropy", entropy, wide, w[:, wide.to(dev)].argmax(-1), text)
    for name, positions in keysets.items():
        on = torch.tensor(positions, dtype=torch.long, device=dev)  # [p]
        part = w[..., on]  # [head, q, p]
        keys = on[part.argmax(-1)] if len(positions) else torch.zeros(w.shape[:2], dtype=torch.long)
        pool.add(name, part.sum(-1), every, keys, text)


def _specials(trace: Trace, n_k: int) -> list[int]:
    """Key positions of special tokens other than the first ([SEP], an end token)."""
    found = {p for label in _SPECIAL_LABELS for p in trace.special.get(label, ())}
    return sorted(p for p in found if 0 < p < n_k)


def _puncts(trace: Trace) -> list[int]:
    return [j for j, token in enumerate(trace.key_tokens) if is_punctuation(token)]


def _part_name(trace: Trace) -> str:
    part = trace.meta.get("part")
    if part:
        return part
    config = trace.meta.get("config")
    return "decoder" if getattr(config, "causal", False) else "encoder"


def _parts(trace: Trace) -> list[Trace]:
    return [trace, *trace.parts.values()]


def roles_from_traces(
    traces: Iterable[Trace],
    progress: Callable[[int, int], object] | None = None,
    total: int | None = None,
) -> pd.DataFrame:
    """head_roles from traces (one per text; an encoder-decoder's with its parts), folded in one
    at a time as they come, so a generator holds one trace at a time. `progress(done, total)` is
    called after each trace (total: `total`, or len(traces) when it has one)."""
    if total is None and isinstance(traces, Sequence):
        total = len(traces)
    pools: dict[tuple[str, int], _Pool] = {}
    for t, trace in enumerate(traces):
        for sub in _parts(trace):
            part, cross = _part_name(sub), sub.is_cross
            pairs = [] if cross else repeats(sub.tokens)
            n_k = len(sub.key_tokens)
            keysets = {"special": _specials(sub, n_k), "punctuation": _puncts(sub)}
            for li, layer in enumerate(sub.layers):
                pool = pools.setdefault((part, li), _Pool(layer.n_heads))
                _layer_scores(pool, layer, t, cross, pairs, keysets)
        if progress is not None:
            progress(t + 1, total if total is not None else t + 1)
    return _frame(pools)


def _frame(pools: dict[tuple[str, int], _Pool]) -> pd.DataFrame:
    rows = []
    for (part, layer), pool in pools.items():
        means = pool.means()
        for h in range(pool.n_heads):
            row = {"part": part, "layer": layer, "head": h}
            row |= {name: float(means[name][h]) for name in (*SCORES, *EXTRA)}
            row["role"] = role_of(row)
            row["n_repeats"] = pool.n_repeats
            shown = _shown_score(row)
            best = pool.best.get(shown)
            row["example_score"] = shown
            if best is None:
                row |= {"example_text": -1, "example_row": -1, "example_key": -1}
            else:
                row["example_text"], row["example_row"], row["example_key"] = (
                    int(best[1][h]),
                    int(best[2][h]),
                    int(best[3][h]),
                )
            rows.append(row)
    columns = ["part", "layer", "head", *SCORES, *EXTRA, "role", "n_repeats"]
    columns += ["example_score", "example_text", "example_row", "example_key"]
    return pd.DataFrame(rows, columns=columns)


def role_of(scores: dict[str, float]) -> str:
    """The role whose score clears its threshold by the largest factor, else "mixed"."""
    best, margin = "mixed", 1.0
    for role, threshold in THRESHOLDS.items():
        value = scores.get(ROLE_SCORE[role], float("nan"))
        if not math.isnan(value) and value / threshold >= margin:
            best, margin = role, value / threshold
    return best


def _shown_score(row: dict) -> str:
    """The score a head's example illustrates: its role's, or for a mixed head its strongest."""
    if row["role"] != "mixed":
        return ROLE_SCORE[row["role"]]
    ratios = {
        ROLE_SCORE[r]: row[ROLE_SCORE[r]] / th
        for r, th in THRESHOLDS.items()
        if not math.isnan(row[ROLE_SCORE[r]])
    }
    return max(ratios, key=ratios.get) if ratios else "entropy"


def _tracer(model: object) -> Callable[[Sequence[str]], Iterable[Trace]]:
    """texts -> traces, lazily, one text at a time, for a loaded model, a StackConfig or a
    function text -> Trace."""
    from attnviz.engine.config import StackConfig

    if isinstance(model, StackConfig):
        from attnviz.engine.stack import trace_text

        return lambda texts: (trace_text(text, model) for text in texts)
    if type(model).__name__ == "LoadedModel":
        from attnviz.engine.hooked import trace_model

        # One forward a text: batching the probe set (trace_each) padded the short sentences to
        # the passage's length and was no faster (bench/atlas.py).
        return lambda texts: (trace_model(model, text) for text in texts)
    if callable(model):
        return lambda texts: (_checked_trace(model(text)) for text in texts)
    raise TypeError(
        f"model must come from load_model(), be a StackConfig or a function text -> Trace, "
        f"not {type(model).__name__}"
    )


def _checked_trace(trace: object) -> Trace:
    if not isinstance(trace, Trace):
        raise TypeError(f"the model function must return a Trace, not {type(trace).__name__}")
    return trace


def checked_texts(texts: object) -> list[str]:
    """The texts of an atlas: a list of 1..MAX_TEXTS non-blank strings."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be a list of texts, not {type(texts).__name__}")
    texts = list(texts)
    if not texts or len(texts) > MAX_TEXTS:
        raise ValueError(f"texts holds {len(texts)} texts: give 1 to {MAX_TEXTS}")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts[{i}] must be a non-blank string")
    return texts


def head_roles(
    model: object,
    texts: Iterable[str] | None = None,
    progress: Callable[[int, int], object] | None = None,
) -> pd.DataFrame:
    """What every head does: one row per (part, layer, head) with the scores of this module's
    table pooled over all `texts` (default: the English probe set, `probe_list("en")`), its
    `role`, and where it shows that role most (`example_text`, `example_row`, `example_key`: the
    text's index, the query row and the key). `model`: load_model()'s model (encoder, decoder or
    encoder-decoder: each part's blocks get rows), a StackConfig (the toy stack) or a function
    text -> Trace. Each text is traced alone, through the same checks and limits as trace_model;
    `progress(done, total)` is called after each text."""
    texts = checked_texts(probe_list("en") if texts is None else texts)
    return roles_from_traces(_tracer(model)(texts), progress, len(texts))


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
        group = block.n_heads // block.n_kv_heads  # query heads per K/V head
        q = block.head("q", head)  # [n_q, d_head]
        k = block.head("k", head // group)  # [n_k, d_head]
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
