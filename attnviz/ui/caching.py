"""Trace caches for the whole server, bounded by bytes (attnviz.engine.budget: cache_bytes), compact
(attnviz.engine.trace.compact), and released when the sessions that read them end."""

from __future__ import annotations

import functools
import gc
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import streamlit as st
import torch
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from attnviz.engine.budget import budget
from attnviz.engine.trace import Trace, compact
from attnviz.serve.batcher import Batcher
from attnviz.serve.bytecache import ByteCache

SWEEP_S = 5.0  # how often traces of ended sessions are released and garbage cycles collected
SOON_S = 0.25  # the least time between two collections
COLLECT_BYTES = 64 * 2**20  # trace bytes made that call for a collection soon


def _sweep(cache: ByteCache) -> None:
    # Streamlit's full collection after every script run (runner.postScriptGC) cost ~8 ms of each
    # rerun with the GIL held, a quarter of a rerun (py-spy, 32 tokens), and every session of a
    # class waited for every other's. The app turns it off (.streamlit/config.toml) and collects
    # here, by the bytes of traces made (the garbage worth collecting is their intermediates):
    # soon after COLLECT_BYTES of them, at most every SOON_S, else every SWEEP_S. At 512 tokens
    # that is after every trace, and RSS over 100 distinct sentences stays flat (bench/load.py);
    # at 32 tokens (~2 MB a trace) a class typing at once no longer pays a collection every
    # quarter second (~15% of the server's GIL time in a 30-session run).
    last_release = time.monotonic()
    while True:
        _made.wait(max(0.0, last_release + SWEEP_S - time.monotonic()))
        _made.clear()
        with _made_lock:
            _made_bytes[0] = 0
        if time.monotonic() - last_release >= SWEEP_S:
            last_release = time.monotonic()
            if Runtime.exists():
                cache.release(Runtime.instance().is_active_session)
        gc.collect()
        time.sleep(SOON_S)


_made = threading.Event()  # set when COLLECT_BYTES of traces were made since the last collection
_made_bytes = [0]
_made_lock = threading.Lock()


def _count_made(n_bytes: int) -> None:
    with _made_lock:
        _made_bytes[0] += n_bytes
        if _made_bytes[0] >= COLLECT_BYTES:
            _made.set()


@st.cache_resource(show_spinner=False)
def trace_cache() -> ByteCache:
    """One cache of traces for every session of the process."""
    cache = ByteCache(budget().cache_bytes, lambda trace: trace.nbytes())
    threading.Thread(target=_sweep, args=(cache,), name="attnviz-cache-sweep", daemon=True).start()
    return cache


BATCH_MAX = 8  # sentences in one forward at most: eight 32-token ones take ~60 ms on two cores
BATCH_BYTES = 64 * 2**20  # trace bytes of one batched forward at most: a 512-token one goes alone


@st.cache_resource(show_spinner=False)
def _workers() -> Batcher:
    # Threads that live as long as the server: Streamlit runs every rerun in a new thread, and a
    # forward there paid for a new OpenMP team each time (a 32-token BERT trace: 19-24 ms against
    # 13-16 ms in a thread that stays). Sentences that wait for a thread go through the model
    # together (hooked.trace_each): a class typing at once costs a few forwards, not thirty.
    # One thread by default: with two, most of a class's sentences found one free and went
    # alone (73 of 88 forwards in a 30-session run held one sentence), at 17.5 ms of CPU each
    # against 10.8 ms in a batch of eight (one core, 32 tokens).
    return Batcher(budget().trace_workers, BATCH_MAX, "attnviz-trace", BATCH_BYTES)


SCRIPT_THREAD = "ScriptRunner.scriptThread"  # the name Streamlit gives the thread of every run
ALONE_S = 2.0  # a forward gets every core again after this long with nothing else running


def script_runs() -> int:
    """Script runs in flight in this process (one thread each)."""
    return sum(thread.name == SCRIPT_THREAD for thread in threading.enumerate())


class _Cores:
    """How many threads the trace workers' forwards use. Alone, all of them: one student's trace
    of 32 tokens takes 13 ms on two cores instead of 18 ms on one. While other runs are in flight
    (a class), one: the second thread's share costs more than it saves (26 ms of CPU for that
    trace against 18 ms), and the other runs need the core. Changing the count costs a forward
    several ms (OpenMP rebuilds its team), so it goes back to all only after ALONE_S of quiet."""

    def __init__(self, n_all: int) -> None:
        self.n_all, self.busy_at = n_all, float("-inf")
        # OpenMP keeps the count per thread (torch's setting reaches threads that start later).
        self._mine = threading.local()

    @property
    def now(self) -> int:
        """The count this thread's forwards use."""
        return getattr(self._mine, "n", self.n_all)

    def pick(self, callers: int, waiting: int, runs: int, now: float) -> int:
        """`callers`: the runs waiting for this forward; `waiting`: jobs queued behind it;
        `runs`: script runs in flight. Returns the thread count for the forward."""
        if waiting or runs > callers:
            self.busy_at = now
        return 1 if now - self.busy_at < ALONE_S else self.n_all

    def use(self, callers: int) -> None:
        n = self.pick(callers, _workers().waiting(), script_runs(), time.monotonic())
        if n != self.now:
            torch.set_num_threads(n)
            self._mine.n = n


_cores = _Cores(torch.get_num_threads())


def _compacted(full: Trace) -> tuple[Trace, int]:
    return compact(full), full.nbytes()


def _make_each(makes: list[Callable[[], Trace]]) -> list[tuple[Trace, int]]:
    _cores.use(len(makes))
    return [_compacted(make()) for make in makes]


def _make_batch(run: Callable[[list], list[Trace]], items: list) -> list[tuple[Trace, int]]:
    _cores.use(len(items))
    return [_compacted(full) for full in run(items)]


def cached_trace(
    key: Hashable,
    make: Callable[[], Trace],
    batch: tuple[Hashable, Any, Callable[[list], list[Trace]], int] | None = None,
) -> Trace:
    """The trace for `key`, made in the trace workers (at most budget().trace_workers forwards at
    a time, each at most BATCH_MAX sentences and BATCH_BYTES of trace, so a class typing at once
    does not hold thirty full traces) and compacted on a miss.
    `batch`: (group, item, run, n_bytes) when the trace may be made together with others of its
    group that wait at the same moment, run([item, ...]) giving one trace per item, each the same
    as make() would; n_bytes: its full trace's size, at most BATCH_BYTES of them together.
    Shared: treat as read-only."""
    ctx = get_script_run_ctx()

    def made() -> Trace:
        if batch is None:
            job = _workers().submit(None, make, _make_each)
        else:
            group, item, run, n_bytes = batch
            job = _workers().submit(group, item, functools.partial(_make_batch, run), n_bytes)
        trace, n_bytes = job.result()
        _count_made(n_bytes)
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


def per_trace(trace: Trace, key: tuple, make: Callable[[], Any], keep: int | None = None) -> Any:
    """`make()` once per (trace, key) while the trace lives, e.g. the overview figure, which a
    head change would otherwise rebuild (pool, colour, PNG) for the same picture. `keep`: at most
    this many values of the same kind (key[0]) per trace, the least recently used going first."""
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
            memo[key] = memo.pop(key)  # most recently used last
            return memo[key]
    value = make()
    with _per_trace_lock:
        memo[key] = value
        if keep is not None:
            same = [k for k in memo if k[0] == key[0]]
            for old in same[: max(0, len(same) - keep)]:
                del memo[old]
    return value
