"""The server's traces tied to sessions: one cache for every session keyed by the TraceRequest,
bounded by bytes (attnviz.serve.settings: cache_bytes), filled by the trace workers
(attnviz.serve.tracing) and released when the sessions that read a trace end; fragments that
keep a trace weakly."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz.engine.request import TraceRequest
from attnviz.engine.trace import Trace
from attnviz.serve import collector, memos, tracing
from attnviz.serve.bytecache import ByteCache
from attnviz.serve.settings import serving


def _alive() -> Callable[[str], bool] | None:
    return Runtime.instance().is_active_session if Runtime.exists() else None


@st.cache_resource(show_spinner=False)
def trace_cache() -> ByteCache:
    """One cache of traces for every session of the process, and the thread that sweeps it."""
    cache = ByteCache(serving().cache_bytes, lambda trace: trace.nbytes())
    threading.Thread(
        target=collector.sweep, args=(cache, _alive), name="attnviz-cache-sweep", daemon=True
    ).start()
    return cache


def cached_trace(request: TraceRequest, model=None) -> Trace:
    """The trace `request` asks for: from the cache (keyed by the request), else made in the trace
    workers (attnviz.serve.tracing.make: batched with others of its group) and compacted.
    `model`: the loaded model a model request names (default: the one registered under its key).
    Shared: treat as read-only."""
    ctx = get_script_run_ctx()
    made = functools.partial(tracing.make, request, model)
    return trace_cache().get(request, made, owner=ctx.session_id if ctx else None)


class TraceRef:
    """What a fragment keeps between runs instead of its trace. Streamlit stores a fragment with
    its arguments until the session's next full run, and a disconnected session for two minutes
    more (server.disconnectedSessionTTL): a class at 512 tokens kept one trace per session that
    way, outside the byte-bounded cache (bench/load.py --tokens 512). A TraceRef holds the trace
    weakly plus the request it answers (`Trace.request`): while the cache or a running script
    holds the trace it is that object; once evicted, it is made again (through the cache) on the
    next fragment run. A trace made without a request is held as it is."""

    def __init__(self, trace: Trace) -> None:
        self._ref = weakref.ref(trace)
        self._request = trace.request
        self._part = trace.meta.get("part", "encoder")
        self._unit = trace.unit  # a trace of words: grouped again from pieces
        self._held = trace if self._request is None else None

    def get(self) -> Trace:
        trace = self._ref()
        if trace is not None:
            return trace
        return memos.grouped(cached_trace(self._request).part(self._part), self._unit)


def trace_fragment(view: Callable[..., None]) -> Callable[..., None]:
    """`st.fragment` for a view whose first argument is a trace: the fragment keeps a TraceRef,
    not the trace, between runs. Call it with the trace as usual."""

    @st.fragment
    @functools.wraps(view)
    def fragment(ref: TraceRef, *args, **kwargs) -> None:
        view(ref.get(), *args, **kwargs)

    @functools.wraps(view)
    def call(trace: Trace, *args, **kwargs) -> None:
        fragment(TraceRef(trace), *args, **kwargs)

    return call
