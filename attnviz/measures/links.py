"""Where "Link two tokens" opens: a real word pair, not [CLS] → [CLS]. No streamlit here."""

from __future__ import annotations

import torch

from attnviz.engine.trace import Trace

# Words whose antecedent is the classic question (note 004: "it" → "animal").
PRONOUNS = frozenset(
    [
        "it",
        "its",
        "he",
        "him",
        "his",
        "she",
        "her",
        "they",
        "them",
        "their",
        "this",
        "that",
        "which",
        "who",
        "它",
        "他",
        "她",
        "它们",
        "他们",
        "她们",
    ]
)


def _special(trace: Trace) -> set[int]:
    return {p for positions in trace.special.values() for p in positions}


def is_causal(trace: Trace) -> bool:
    """Whether a query may not see the keys after it (a decoder, a causal toy stack): its first
    layer's mask says so (the first query sees one key only)."""
    if trace.is_cross or not trace.layers:
        return False
    return int(trace.layers[0].allowed([0])[0]) < trace.layers[0].n_k


def default_query(trace: Trace) -> int:
    """The query a view of one query opens on: the last ordinary token of a causal trace (the
    one whose row sees every key: a decoder's [BOS] row sees only itself), else position 0."""
    if not is_causal(trace):
        return 0
    special = _special(trace)
    words = [i for i in range(len(trace.tokens)) if i not in special] or [len(trace.tokens) - 1]
    return words[-1]


def default_link(trace: Trace, query: int | None = None) -> tuple[int, int]:
    """(query, key) to open the link view on: always a pair the mask allows in every layer.

    The query (unless given) is the first pronoun, else the last ordinary token (not
    [CLS]/[SEP]/[PAD]); the key is the ordinary token the query may see, not the query itself
    nor its neighbours when others exist (and before a pronoun, where its antecedent is), that
    the strongest head links the query to.
    """
    special = _special(trace)
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    words = [i for i in range(n_q) if i not in special] or list(range(n_q))
    pronoun = next((i for i in words if trace.tokens[i].lower() in PRONOUNS), None)
    if query is None:
        query = words[-1] if pronoun is None else pronoun
    elif not (0 <= query < n_q and trace.tokens[query].lower() in PRONOUNS):
        pronoun = None
    seen = torch.ones(n_k, dtype=torch.bool)  # [k] keys the query may see in every layer
    for lt in trace.layers:
        seen &= lt.block("mask", 0, [query])[0]
    allowed = [j for j in range(n_k) if seen[j]] or list(range(n_k))
    keys = [j for j in allowed if j not in special] or allowed
    if not trace.is_cross:
        far = [j for j in keys if abs(j - query) > 1]
        if pronoun is not None:  # a pronoun's antecedent comes before it
            far = [j for j in far if j < query] or far
        keys = far or [j for j in keys if j != query] or keys
    rows = [lt.block("weights", h, [query])[0] for lt in trace.layers for h in range(lt.n_heads)]
    strongest = torch.stack(rows).amax(0)  # [k] best head per key (one row: a lean trace too)
    key = max(keys, key=lambda j: float(strongest[j]))
    return query, key
