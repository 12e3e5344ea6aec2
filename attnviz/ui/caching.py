"""Trace caches for the whole server, bounded by bytes (attnviz.budget: cache_bytes), compact
(attnviz.trace.compact), and released when the sessions that read them end."""

from __future__ import annotations

import functools
import gc
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz.budget import budget
from attnviz.bytecache import ByteCache
from attnviz.trace import Trace, compact

SWEEP_S = 5.0  # how often traces of ended sessions are released
COLLECT_S = 1.0  # how often the collector looks for garbage cycles (instead of after every run)
SOON_S = 0.25  # the least time between two collections


def _sweep(cache: ByteCache) -> None:
    # Streamlit's full collection after every script run (runner.postScriptGC) cost ~8 ms of each
    # rerun with the GIL held, a quarter of a rerun (py-spy, 32 tokens), and every session of a
    # class waited for every other's. The app turns it off (.streamlit/config.toml) and collects
    # here: soon after a new trace (which leaves the most garbage), at most every SOON_S, else
    # every COLLECT_S. RSS over 100 distinct 512-token sentences stays flat (bench/load.py).
    last_release = time.monotonic()
    while True:
        _made.wait(COLLECT_S)
        _made.clear()
        gc.collect()
        if time.monotonic() - last_release >= SWEEP_S and Runtime.exists():
            last_release = time.monotonic()
            cache.release(Runtime.instance().is_active_session)
        time.sleep(SOON_S)


_made = threading.Event()  # set when a trace was computed


@st.cache_resource(show_spinner=False)
def trace_cache() -> ByteCache:
    """One cache of traces for every session of the process."""
    cache = ByteCache(budget().cache_bytes, lambda trace: trace.nbytes())
    threading.Thread(target=_sweep, args=(cache,), name="attnviz-cache-sweep", daemon=True).start()
    return cache


@st.cache_resource(show_spinner=False)
def _workers() -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(budget().trace_workers)


def cached_trace(key: Hashable, make: Callable[[], Trace]) -> Trace:
    """The trace for `key`, made (at most budget().trace_workers at a time, so a class typing at
    once does not hold thirty full traces) and compacted on a miss. Shared: treat as read-only."""
    ctx = get_script_run_ctx()

    def made() -> Trace:
        with _workers():
            trace = compact(make())
        _made.set()
        return trace

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
    more (server.disconnectedSessionTTL): a class of 30 at 512 tokens kept one ~90 MiB trace per
    session that way, outside the byte-bounded cache (bench/load.py: 9 GB peak). A TraceRef holds
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


_per_trace: dict[int, tuple[weakref.ref, dict]] = {}
_per_trace_lock = threading.Lock()


def per_trace(trace: Trace, key: Hashable, make: Callable[[], Any]) -> Any:
    """`make()` once per (trace, key) while the trace lives, e.g. the overview figure, which a
    head change would otherwise rebuild (pool, colour, PNG) for the same picture."""
    tid = id(trace)
    with _per_trace_lock:
        ref, memo = _per_trace.get(tid, (None, None))
        if ref is None or ref() is not trace:
            memo = {}
            _per_trace[tid] = (
                weakref.ref(trace, lambda _r, tid=tid: _per_trace.pop(tid, None)),
                memo,
            )
        if key in memo:
            return memo[key]
    value = make()
    with _per_trace_lock:
        memo[key] = value
    return value
