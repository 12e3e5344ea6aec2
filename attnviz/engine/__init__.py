"""The engine: text in, every per-head tensor out, for the toy stack and for pretrained models.

config (StackConfig), tokenize, attention (the one masked softmax), stack (the toy stack), trace
(Trace, LayerTrace), stats (per-head statistics), validate (every argument check), budget (every
limit), rollout, links, whatif, next_token, grouping, hooked/ (pretrained models through
transformers' AttentionInterface).

May import: torch, transformers, attnviz.i18n. Never lessons, views, serve, ui or streamlit.
"""
