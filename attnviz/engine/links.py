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


def default_link(trace: Trace) -> tuple[int, int]:
    """(query, key) to open the link view on.

    The query is the first pronoun, else the last ordinary token (not [CLS]/[SEP]/[PAD]); the key
    is the ordinary token, not the query itself nor its neighbours when others exist (and before
    a pronoun, where its antecedent is), that the strongest head links the query to.
    """
    special = {p for positions in trace.special.values() for p in positions}
    n_q, n_k = len(trace.tokens), len(trace.key_tokens)
    words = [i for i in range(n_q) if i not in special] or list(range(n_q))
    pronoun = next((i for i in words if trace.tokens[i].lower() in PRONOUNS), None)
    query = words[-1] if pronoun is None else pronoun
    keys = [j for j in range(n_k) if j not in special] or list(range(n_k))
    if not trace.is_cross:
        far = [j for j in keys if abs(j - query) > 1]
        if pronoun is not None:  # a pronoun's antecedent comes before it
            far = [j for j in far if j < query] or far
        keys = far or [j for j in keys if j != query] or keys
    rows = [lt.block("weights", h, [query])[0] for lt in trace.layers for h in range(lt.n_heads)]
    strongest = torch.stack(rows).amax(0)  # [k] best head per key (one row: a lean trace too)
    key = max(keys, key=lambda j: float(strongest[j]))
    return query, key
