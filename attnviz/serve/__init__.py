"""The server's policy, without streamlit: how much it holds, how work is queued, who may load what.

tracing (a TraceRequest made into a compact trace in the trace workers), batcher (worker threads
that batch waiting jobs), cores (the workers' thread count), bandpool (a long trace's pass over
bands, a layer per core), memos (values derived from a trace, kept on it), bytecache (a cache
bounded by bytes), collector (garbage collection and releasing ended sessions' traces), settings
(the serving knobs), warmup (the bundled model loaded at start), lab (training runs in the
background), public (public mode's allowlist of models).

May import: attnviz.engine, attnviz.measures, attnviz.training, attnviz.views, attnviz.lessons,
attnviz.i18n. Never ui or streamlit.
"""
