"""The Playground inside the server's budget: options that fit, and a message for a link that
asks for more. The engine refuses over-budget work anyway; this keeps the app from offering it."""

from __future__ import annotations

import streamlit as st

from attnviz.engine.budget import budget, check_stack_run
from attnviz.engine.config import StackConfig
from attnviz.engine.tokenize import tokenize


def tokens_of(text: str | None) -> int:
    """How many tokens the toy stack will run for `text` (cut at the limit); 1 if it has none."""
    try:
        n = len(tokenize(text or ""))
    except (ValueError, TypeError):
        return 1
    return max(1, min(n, budget().max_tokens, StackConfig.max_tokens))


def refusal(n_q: int, n_k: int, **settings) -> str | None:
    """The engine's message if a toy-stack trace with these StackConfig settings is refused."""
    try:
        check_stack_run(StackConfig(**settings), n_q, n_k)
    except (ValueError, TypeError) as err:
        return str(err)
    return None


def fits(n_q: int, n_k: int, **settings) -> bool:
    return refusal(n_q, n_k, **settings) is None


def _flag(raw: str | None, default: bool) -> bool:
    return default if raw is None else raw.strip().lower() == "true"


def link_refusal(n_q: int, n_k: int) -> str | None:
    """What the engine says about the Playground settings the URL asks for (?d_model=...&heads=...),
    read before any widget clamps them; None when they fit or the link sets none of them."""
    qp = st.query_params
    keys = ("d_model", "dk_auto", "d_head", "heads", "kv", "layers", "ffn")
    if not any(k in qp for k in keys):
        return None
    try:
        d_model = int(qp.get("d_model", "64"))
        d_head = None if _flag(qp.get("dk_auto"), True) else int(qp.get("d_head", "16"))
        heads = int(qp.get("heads", "4"))
        kv = int(qp.get("kv", str(heads)))
        layers = int(qp.get("layers", "1"))
    except ValueError:
        return None  # not numbers: the widgets ignore such values
    return refusal(
        n_q,
        n_k,
        d_model=d_model,
        n_heads=heads,
        d_head=d_head,
        n_kv_heads=kv,
        n_layers=layers,
        ffn=_flag(qp.get("ffn"), False),
    )
