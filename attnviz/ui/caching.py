"""Trace caches for the whole server, bounded by bytes (attnviz.budget: cache_bytes), compact
(attnviz.trace.compact), and released when the sessions that read them end."""

from __future__ import annotations

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


def _sweep(cache: ByteCache) -> None:
    while True:
        time.sleep(SWEEP_S)
        if Runtime.exists():
            cache.release(Runtime.instance().is_active_session)


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
            return compact(make())

    return trace_cache().get(key, made, owner=ctx.session_id if ctx else None)


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
