"""attnviz: every per-head tensor of multi-head attention, for a toy stack or a pretrained model.

Public API: trace_text (the toy stack), load_model and trace_model (a pretrained model), show (any
view in a notebook; "explore" for the interactive widget), rollout, next_tokens, Trace and
LayerTrace (the tensors), StackConfig; what heads write: head_logits and logit_lens (a decoder's
next-token logits read head by head and layer by layer), flow_graph (the information-flow
routes to a prediction), qk_attribution and qk_keys (why a head looks where it looks: a logit
split into what query and key carry), grouped (words instead of pieces),
compare (two traces head by head), special_share (value-weighted attention on special tokens);
head_roles (the head atlas) and atlas_corpus (the same over a corpus, on Ray); does a head matter:
patch (exact activation patching), patch_pairs (the same over prompt pairs, on Ray) and
attribution_patching (its one-backward estimate, AtP*);
reproduce (published claims about attention measured on the shipped models, with verdicts).
The engine never imports streamlit. The pretrained-model half (transformers) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnviz.engine.collector import paused as _collector_paused

with _collector_paused():  # torch: ~10^6 objects, 0.2 s of collections (engine/collector.py)
    from attnviz.engine.bundled import bundled_models
    from attnviz.engine.config import StackConfig
    from attnviz.engine.stack import trace_text
    from attnviz.engine.trace import LayerTrace, Trace
    from attnviz.measures.compare import compare
    from attnviz.measures.next_token import next_tokens
    from attnviz.measures.rollout import rollout
    from attnviz.measures.stats import special_share
    from attnviz.measures.words import grouped

if TYPE_CHECKING:
    from attnviz.claims import reproduce
    from attnviz.engine.generate import generate
    from attnviz.engine.hooked import load_model, trace_model
    from attnviz.measures.attribution import attribution_patching
    from attnviz.measures.flow import flow_graph
    from attnviz.measures.lens import head_logits, logit_lens
    from attnviz.measures.patching import patch
    from attnviz.measures.qk import qk_attribution
    from attnviz.measures.qk_sources import qk_keys
    from attnviz.measures.roles import head_roles
    from attnviz.serve.corpus_ray import atlas_corpus
    from attnviz.serve.patch_pairs import patch_pairs
    from attnviz.views.notebook import show

__all__ = [
    "StackConfig",
    "trace_text",
    "load_model",
    "trace_model",
    "Trace",
    "LayerTrace",
    "rollout",
    "next_tokens",
    "show",
    "generate",
    "head_roles",
    "atlas_corpus",
    "bundled_models",
    "head_logits",
    "logit_lens",
    "flow_graph",
    "grouped",
    "compare",
    "special_share",
    "qk_attribution",
    "qk_keys",
    "patch",
    "attribution_patching",
    "patch_pairs",
    "reproduce",
]


def __getattr__(name: str):
    # transformers takes seconds to import; only the BERT half needs it.
    if name in ("load_model", "trace_model"):
        from attnviz.engine import hooked

        return getattr(hooked, name)
    if name in ("head_logits", "logit_lens"):  # a decoder's logits, read through its modules
        from attnviz.measures import lens

        return getattr(lens, name)
    if name == "qk_attribution":  # why a head looks where it looks: a logit split q x k
        from attnviz.measures.qk import qk_attribution

        return qk_attribution
    if name == "qk_keys":
        from attnviz.measures.qk_sources import qk_keys

        return qk_keys
    if name == "flow_graph":  # information-flow routes (Ferrando & Voita 2024), a decoder's
        from attnviz.measures.flow import flow_graph

        return flow_graph
    if name == "patch":  # exact activation patching of a decoder (needs transformers)
        from attnviz.measures.patching import patch

        return patch
    if name == "attribution_patching":  # AtP and AtP*'s query/key parts
        from attnviz.measures.attribution import attribution_patching

        return attribution_patching
    if name == "generate":  # attention while a decoder generates (needs transformers)
        from attnviz.engine.generate import generate

        return generate
    if name == "show":  # plotly loads only for notebooks and scripts that draw
        from attnviz.views.notebook import show

        return show
    if name == "head_roles":
        # The head atlas: a DataFrame of every head's scores and role over many texts (pandas).
        from attnviz.measures.roles import head_roles

        return head_roles
    if name == "atlas_corpus":
        # The head atlas over a corpus on Ray workers (ray loads only here).
        from attnviz.serve.corpus_ray import atlas_corpus

        return atlas_corpus
    if name == "patch_pairs":  # activation patching over prompt pairs on Ray (ray loads here)
        from attnviz.serve.patch_pairs import patch_pairs

        return patch_pairs
    if name == "reproduce":  # published claims measured on the shipped models (transformers)
        from attnviz.claims import reproduce

        return reproduce
    raise AttributeError(f"module 'attnviz' has no attribute {name!r}")
