"""Where the server's traces are made, from a TraceRequest (attnviz.engine.request) to a compact
trace: the request is tokenized and weighed once (engine prepare), waits in the trace workers
with the other requests of its group that wait at the same moment (the Batcher: a class typing at
once gets one forward for many sentences), is made in a worker thread that stays, compacted,
counted for the collector and, for a long input, its overview pass started (serve.bandpool).

One owner for batching: `make` decides which requests may share a forward (engine may_share: a
short sentence of an encoder that pads on the right, no knob that changes its inputs) and what
each weighs; the Batcher groups the waiting ones by `request.group` up to BATCH_MAX and
BATCH_BYTES; the engine's trace_batch runs a group as it comes. No streamlit here.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from collections.abc import Hashable

import torch

from attnviz.engine.config import StackConfig
from attnviz.engine.request import TraceRequest
from attnviz.engine.stack import trace_text
from attnviz.engine.trace import Trace, compact
from attnviz.serve import bandpool
from attnviz.serve.batcher import Batcher
from attnviz.serve.collector import count_made
from attnviz.serve.cores import Cores, script_runs
from attnviz.serve.settings import serving

BATCH_MAX = 8  # sentences in one forward at most (bench/hooked.py: eight 32-token ones, ~60 ms)
# Trace bytes of one batched forward at most: a 512-token one goes alone. SmolLM2's 32-token traces
# (14 MB each) go four a forward: at 128 MB (eight) a class of 30's p95 was 3.2 s against 2.9 s
# for the same CPU a sentence (bench/load.py, runs in turns): a forward twice as long to wait for.
BATCH_BYTES = 64 * 2**20

# The loaded models a request may name, by their key (LoadedModel.key): a request alone is enough
# to make its trace again (a fragment whose trace was evicted). Weak: the app's model cache
# decides how long a model lives. Every copy with a key is kept (the warm-up's and the model
# cache's may both be loaded): one that dies leaves the others, which once read "no longer
# loaded" while the warm-up's copy served the page.
_models: dict[Hashable, list[weakref.ref]] = {}
_models_lock = threading.Lock()


def register(model) -> None:
    """Let requests name this loaded model by its key."""
    with _models_lock:
        alive = [ref for ref in _models.get(model.key, []) if ref() is not None]
        if not any(ref() is model for ref in alive):
            alive.append(weakref.ref(model))
        _models[model.key] = alive


def model_for(request: TraceRequest):
    """A loaded model the request names; LookupError when none is loaded (any more)."""
    with _models_lock:
        refs = list(_models.get(request.model, []))
    for ref in reversed(refs):  # the newest copy first
        model = ref()
        if model is not None:
            return model
    raise LookupError(f"model {request.model!r} is not loaded in this server")


# How long a sentence waits at most for others to share its forward, while other pages run: two
# pinned SmolLM2 replicas with a class of 30 then ran 2.1 sentences a forward, at 105-111 ms of
# CPU a sentence against 114-121 and p95 1.24-1.40 s against 1.26-1.52 s (bench/load.py; a scratch
# run alternating 0.1 s with none: 1.01-1.11 s against 1.51-1.53 s). Never longer than the last
# forward took: a small model's sentences wait less.
LINGER_MAX_S = 0.1
_last_forward_s = [0.0]  # wall seconds of the last forward of the trace workers


def linger(waiting: int) -> float:
    """How long the first of `waiting` queued sentences may wait for others to share its
    forward: not at all when no other page is running in this process (no one else to wait
    for: a researcher alone never waits), else as long as the last forward took, at most
    LINGER_MAX_S."""
    if script_runs() <= waiting:
        return 0.0
    return min(LINGER_MAX_S, _last_forward_s[0])


@functools.cache
def pool() -> Batcher:
    """The trace workers, one set per process (serving: trace_workers, two by default). Threads
    that stay: a forward in a new thread pays for a new OpenMP team (bench/hooked.py). A class's
    sentences that wait for a worker share forwards (bench/load.py), and wait a moment for each
    other (`linger`)."""
    return Batcher(serving().trace_workers, BATCH_MAX, "attnviz-trace", BATCH_BYTES, linger)


_cores = Cores(torch.get_num_threads())


def compacted(full: Trace) -> tuple[Trace, int]:
    """The trace as a cache keeps it, and the bytes of the full one (what the collector counts)."""
    return compact(full), full.nbytes()


def run_stack(requests: list[TraceRequest]) -> list[tuple[Trace, int]]:
    """The toy stack's traces (one request at a time: the stack does not batch)."""
    _cores.use(len(requests), pool().waiting())
    return [compacted(trace_text(r.text, r.model, text_pair=r.pair)) for r in requests]


def run_model(model, items: list) -> list[tuple[Trace, int]]:
    """Prepared requests of one group through the model in one forward (engine trace_batch)."""
    from attnviz.engine.hooked import trace_batch

    _cores.use(len(items), pool().waiting())
    start = time.perf_counter()
    traces = trace_batch(model, items)
    _last_forward_s[0] = time.perf_counter() - start
    return [compacted(full) for full in traces]


def make(request: TraceRequest, model=None) -> Trace:
    """The trace `request` asks for, made in the trace workers and compacted. `model`: the loaded
    model it names (default: the registered one)."""
    if not isinstance(request, TraceRequest):
        raise TypeError(f"request must be a TraceRequest, not {type(request).__name__}")
    if isinstance(request.model, StackConfig):
        job = pool().submit(None, request, run_stack)
    else:
        from attnviz.engine.hooked import may_share, prepare

        model = model_for(request) if model is None else model
        if request.model != model.key:
            raise ValueError(f"the request names {request.model!r}, not this model {model.key!r}")
        item = prepare(model, request)  # tokenized and weighed once, here
        alone = not may_share(model, item) or 2 * item.n_bytes > BATCH_BYTES
        group = None if alone else request.group
        job = pool().submit(group, item, functools.partial(run_model, model), item.n_bytes)
    trace, n_bytes = job.result()
    count_made(n_bytes)
    if any(layer.in_bands for layer in trace.layers):
        # the overview's and the statistics' pass over bands starts now, in the background: a
        # user who opens the overview of a long document a moment later finds it (partly) done
        bandpool.warm_trace(trace)
    return trace
