"""The server's policy, without streamlit: how much it holds, how work is queued, who may load what.

bytecache (a cache bounded by bytes), batcher (worker threads that batch waiting jobs), workers
(the trace workers' thread policy), warmup (the bundled model loaded at start), public (public
mode's allowlist of models).

May import: attnviz.engine, attnviz.views, attnviz.lessons, attnviz.i18n. Never ui or streamlit.
"""
