"""Pretrained models (BERT-family encoders, decoders, encoder-decoders) with every attention
tensor recorded.

The model runs its own code through transformers' extension point: `intercept.attnviz_attention` is
registered in AttentionInterface as "attnviz" and fills one LayerRecord per block; `loading`
finds and loads a model offline-first; `tracing` takes requests and runs each forward in two
steps, `forward` (the model run with per-call knobs and a recorder) and `assembly` (the records
made into Traces); `families` holds what differs between model families. No model code is copied
and nothing is patched.

Names load on first use: `families` (plain data) is importable without transformers, which takes
seconds to import.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "families": (
        "BERT_FAMILY", "BLOCK_PATHS", "DEFAULT_NAME", "DEFAULT_PACKAGE", "KINDS", "POST_LN",
        "PRE_LN", "ROBERTA_POSITIONS", "SPECIAL_ROLES",
    ),
    "finding": ("resolve",),
    "intercept": ("IMPL", "Call", "LayerRecord", "Recording", "attnviz_attention"),
    "loading": ("Block", "LoadedModel", "load_model", "model_bytes"),
    "preparing": ("Prepared", "batches_texts", "may_share", "prepare"),
    "tracing": ("embedding_cosine", "trace_batch", "trace_each", "trace_model"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = sorted([*_MODULE_OF, "Knobs", "TraceRequest"])


def __getattr__(name: str):
    if name in ("Knobs", "TraceRequest"):  # what a trace is asked with (no transformers needed)
        from attnviz.engine import request

        return getattr(request, name)
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'attnviz.engine.hooked' has no attribute {name!r}")
    return getattr(importlib.import_module(f"attnviz.engine.hooked.{module}"), name)


def __dir__() -> list[str]:
    return __all__
