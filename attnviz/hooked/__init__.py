"""Pretrained models (BERT-family encoders, decoders, encoder-decoders) with every attention
tensor recorded.

The model runs its own code through transformers' extension point: `intercept.attnviz_attention` is
registered in AttentionInterface as "attnviz"; `loading` finds and loads a model offline-first;
`tracing` runs it with per-call knobs and a recorder and builds the Trace; `families` holds what
differs between model families. No model code is copied and nothing is patched.
"""

from __future__ import annotations

from attnviz.hooked.families import (
    BERT_FAMILY,
    BLOCK_PATHS,
    KINDS,
    POST_LN,
    PRE_LN,
    ROBERTA_POSITIONS,
    SPECIAL_ROLES,
)
from attnviz.hooked.intercept import IMPL, Knobs, Recording, attnviz_attention
from attnviz.hooked.loading import (
    DEFAULT_NAME,
    DEFAULT_PACKAGE,
    Block,
    LoadedModel,
    _offline,
    _resolve,
    load_model,
    model_bytes,
)
from attnviz.hooked.tracing import (
    batches_texts,
    embedding_cosine,
    trace_batch,
    trace_each,
    trace_model,
)

__all__ = [
    "BERT_FAMILY",
    "BLOCK_PATHS",
    "KINDS",
    "DEFAULT_NAME",
    "DEFAULT_PACKAGE",
    "IMPL",
    "POST_LN",
    "PRE_LN",
    "ROBERTA_POSITIONS",
    "SPECIAL_ROLES",
    "Block",
    "Knobs",
    "LoadedModel",
    "Recording",
    "_offline",
    "_resolve",
    "attnviz_attention",
    "batches_texts",
    "embedding_cosine",
    "load_model",
    "model_bytes",
    "trace_batch",
    "trace_each",
    "trace_model",
]
