"""The server's traces tied to sessions: one cache for every session, bounded by bytes
(attnviz.engine.budget: cache_bytes), filled by the trace workers (attnviz.serve.workers) and
released when the sessions that read a trace end; fragments that keep a trace weakly."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Hashable

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz.engine.budget import budget
from attnviz.engine.trace import Trace
from attnviz.serve import workers
from attnviz.serve.bytecache import ByteCache


def _alive() -> Callable[[str], bool] | None:
    return Runtime.instance().is_active_session if Runtime.exists() else None


@st.cache_resource(show_spinner=False)
def trace_cache() -> ByteCache:
    """One cache of traces for every session of the process, and the thread that sweeps it."""
    cache = ByteCache(budget().cache_bytes, lambda trace: trace.nbytes())
    threading.Thread(
        target=workers.sweep, args=(cache, _alive), name="attnviz-cache-sweep", daemon=True
    ).start()
    return cache


def cached_trace(
    key: Hashable, make: Callable[[], Trace], batch: workers.Batch | None = None
) -> Trace:
    """The trace for `key`: from the cache, else made in the trace workers (workers.made_in_pool:
    `batch` lets it share a forward with others of its group) and compacted. Shared: treat as
    read-only."""
    ctx = get_script_run_ctx()
    made = functools.partial(workers.made_in_pool, make, batch)
    trace = trace_cache().get(key, made, owner=ctx.session_id if ctx else None)
    with _origin_lock:
        if id(trace) not in _origins:
            _origins[id(trace)] = (key, make)
            weakref.finalize(trace, _origins.pop, id(trace), None)
    return trace


# id(trace) -> (cache key, how to make it), for every trace cached_trace handed out and still alive.
_origins: dict[int, tuple[Hashable, Callable[[], Trace]]] = {}


_origin_lock = threading.Lock()


class TraceRef:
    """What a fragment keeps between runs instead of its trace. Streamlit stores a fragment with
    its arguments until the session's next full run, and a disconnected session for two minutes
    more (server.disconnectedSessionTTL): a class at 512 tokens kept one trace per session that
    way, outside the byte-bounded cache (bench/load.py --tokens 512). A TraceRef holds
    the trace weakly plus its cache key and maker: while the cache or a running script holds the
    trace it is that object; once evicted, it is made again (through the cache) on the next
    fragment run. A trace that did not come from cached_trace is held as it is."""

    def __init__(self, trace: Trace) -> None:
        self._ref = weakref.ref(trace)
        with _origin_lock:
            self._origin = _origins.get(id(trace))
        self._held = trace if self._origin is None else None

    def get(self) -> Trace:
        trace = self._ref()
        if trace is not None:
            return trace
        key, make = self._origin
        return cached_trace(key, make)


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
