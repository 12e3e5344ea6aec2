"""Where the server's traces are made: worker threads that batch a class's sentences, the thread
count of their forwards, the collector that follows the bytes made, and per-trace memos.

One owner for batching: `batch_job` decides which traces may share a forward (a short sentence of
an encoder that pads on the right, with no knob that changes its inputs) and how big each is, the
Batcher groups the waiting ones up to BATCH_MAX and BATCH_BYTES, and the engine's trace_each runs
a group as padded forwards inside the same byte bound. No streamlit here: attnviz.ui.caching ties
these to sessions.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch

from attnviz.engine import bandpool
from attnviz.engine.bands import THUMB, specials_of
from attnviz.engine.budget import budget, model_trace_bytes
from attnviz.engine.trace import Trace, compact
from attnviz.serve.batcher import Batcher
from attnviz.serve.bytecache import ByteCache

BATCH_MAX = 8  # sentences in one forward at most (bench/hooked.py: eight 32-token ones, ~60 ms)
BATCH_BYTES = 64 * 2**20  # trace bytes of one batched forward at most: a 512-token one goes alone
BATCH_CHARS = 4000  # a longer sentence is neither counted nor batched: its trace is big anyway
SWEEP_S = 5.0  # how often traces of ended sessions are released and garbage cycles collected
SOON_S = 0.25  # the least time between two collections
COLLECT_BYTES = 64 * 2**20  # trace bytes made that call for a collection soon
SCRIPT_THREAD = "ScriptRunner.scriptThread"  # the name Streamlit gives the thread of every run
ALONE_S = 2.0  # a forward gets every core again after this long with nothing else running


@functools.cache
def pool() -> Batcher:
    """The trace workers, one set per process (budget: trace_workers). Threads that stay: a
    forward in a new thread pays for a new OpenMP team (bench/hooked.py); one worker by default,
    so that a class's sentences wait together and share forwards (bench/load.py)."""
    return Batcher(budget().trace_workers, BATCH_MAX, "attnviz-trace", BATCH_BYTES)


def script_runs() -> int:
    """Script runs in flight in this process (one thread each)."""
    return sum(thread.name == SCRIPT_THREAD for thread in threading.enumerate())


class _Cores:
    """How many threads the trace workers' forwards use: all of them alone, one while other runs
    are in flight (the second thread's share then costs more CPU than it saves; bench/load.py).
    Changing the count rebuilds OpenMP's team, so it goes back to all only after ALONE_S."""

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
        n = self.pick(callers, pool().waiting(), script_runs(), time.monotonic())
        if n != self.now:
            torch.set_num_threads(n)
            self._mine.n = n


_cores = _Cores(torch.get_num_threads())


def compacted(full: Trace) -> tuple[Trace, int]:
    """The trace as a cache keeps it, and the bytes of the full one (what the collector counts)."""
    return compact(full), full.nbytes()


def make_each(makes: list[Callable[[], Trace]]) -> list[tuple[Trace, int]]:
    _cores.use(len(makes))
    return [compacted(make()) for make in makes]


def make_batch(run: Callable[[list], list[Trace]], items: list) -> list[tuple[Trace, int]]:
    _cores.use(len(items))
    return [compacted(full) for full in run(items)]


Batch = tuple[Hashable, Any, Callable[[list], list[Trace]], int]


def made_in_pool(make: Callable[[], Trace], batch: Batch | None = None) -> Trace:
    """The trace `make()` gives, compacted, made in the workers; `batch`: (group, item, run,
    n_bytes) when it may be made with other jobs of its group that wait at the same moment,
    run([item, ...]) giving one trace per item, each what make() would give."""
    if batch is None:
        job = pool().submit(None, make, make_each)
    else:
        group, item, run, n_bytes = batch
        job = pool().submit(group, item, functools.partial(make_batch, run), n_bytes)
    trace, n_bytes = job.result()
    count_made(n_bytes)
    if any(layer.lean for layer in trace.layers):
        # the overview's and the statistics' pass over bands starts now, in the background: a
        # user who opens the overview of a long document a moment later finds it (partly) done
        bandpool.warm(trace.layers, (THUMB, THUMB), specials_of(trace))
    return trace


def batch_bytes(model, text: str) -> int:
    """Bytes of the full trace of `text` alone, from its token count; 0 when it is not batched:
    a long text, or a model that trace_each runs one text at a time (it would only make the
    first sentence wait for the others)."""
    from attnviz.engine.hooked import batches_texts

    if not isinstance(text, str) or len(text) > BATCH_CHARS or not text.strip():
        return 0
    if not batches_texts(model):
        return 0
    try:
        with model.call_lock:
            tokens = model.call_tokenizer(text, truncation=True, max_length=model.max_length)
    except Exception:  # noqa: BLE001  (trace_model says what is wrong with the text)
        return 0
    return model_trace_bytes(
        model.n_layers, model.n_heads, model.d_head, 1, len(tokens["input_ids"])
    )


def _trace_each(model, knobs: dict, texts: list[str]) -> list[Trace]:
    from attnviz.engine.hooked import trace_each

    return trace_each(model, texts, batch_bytes=BATCH_BYTES, **knobs)


def batch_job(
    model, model_key: Hashable, text: str, pair: str | None, mask_tokens: tuple, knobs: dict
) -> Batch | None:
    """The batch a model trace may join, or None when it goes alone: hidden tokens or a second
    sentence change its inputs, and a trace over half of BATCH_BYTES gains nothing from company."""
    n_bytes = 0 if mask_tokens or (pair and pair.strip()) else batch_bytes(model, text)
    if not n_bytes or 2 * n_bytes > BATCH_BYTES:
        return None
    group = ("model", model_key, *sorted(knobs.items()))  # same model and knobs
    return group, text, functools.partial(_trace_each, model, knobs), n_bytes


# The collector: Streamlit's full collection after every script run held the GIL for ~8 ms of
# each rerun (the app turns it off in .streamlit/config.toml); here a thread collects soon after
# COLLECT_BYTES of traces were made, at most every SOON_S, else every SWEEP_S (bench/load.py).
_made = threading.Event()  # set when COLLECT_BYTES of traces were made since the last collection
_made_bytes = [0]
_made_lock = threading.Lock()


def count_made(n_bytes: int) -> None:
    with _made_lock:
        _made_bytes[0] += n_bytes
        if _made_bytes[0] >= COLLECT_BYTES:
            _made.set()


def sweep(cache: ByteCache, alive: Callable[[], Callable[[str], bool] | None]) -> None:
    """Forever: collect garbage when traces were made, and every SWEEP_S release the cache's
    entries whose sessions all ended. `alive()` gives the test for a session id (None: no server,
    nothing to release)."""
    last_release = time.monotonic()
    while True:
        _made.wait(max(0.0, last_release + SWEEP_S - time.monotonic()))
        _made.clear()
        with _made_lock:
            _made_bytes[0] = 0
        if time.monotonic() - last_release >= SWEEP_S:
            last_release = time.monotonic()
            test = alive()
            if test is not None:
                cache.release(test)
        gc.collect()
        time.sleep(SOON_S)


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
