"""The engine: text in, every per-head tensor out, for the toy stack and for pretrained models.

config (StackConfig), tokenize, attention (the one masked softmax), stack (the toy stack), trace
(Trace, LayerTrace), lean (long inputs), request (TraceRequest), validate (every argument check),
budget (every limit), generate, hooked/ (pretrained models through transformers'
AttentionInterface). Reading traces is attnviz.measures' job; training is attnviz.training's.

May import: torch, transformers, attnviz.i18n. Never measures, training, lessons, views, serve, ui
or streamlit.
"""
