"""Lean layers summarized in parallel (attnviz.engine.bands), one layer per thread, each thread
running its tensor operations on one core. The server's: the engine makes a summary in the
thread that asks for it, and finds the ones made here memoized on their layers.

Why threads of one core each: a band's operations are a few milliseconds each, too short for
OpenMP's two-thread teams to pay off (4,096 tokens, 4 layers: 1.5 s on one core, 1.25 s with two),
and on a machine that is busy with anything else a team of two waits for its slower half (each
operation took 2-10x longer with a second process running). Layers are independent, so two
threads of one core each take half the time on a quiet machine and degrade gently on a busy one.

`summaries` is what the views call; `warm` queues a trace's layers behind any view's request, so
that a server can start the pass as soon as a long trace is made and the overview finds it done.
Bounded: a few threads per process, and at most WARM_JOBS queued warm-ups (the oldest dropped).
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Sequence

import torch

from attnviz.engine.bands import MOVED, THUMB, LayerSummary, specials_of, summarize

MAX_THREADS = 4  # more layers at once hold more bands in memory (8 MiB each) for little gain
WARM_JOBS = 16  # warm-ups queued at most (a layer each); older ones are dropped
WARM_THREADS = 1  # warm-ups made at once


class _Job:
    __slots__ = ("ref", "key", "done", "warm")

    def __init__(self, layer, side, specials, warm: bool) -> None:
        self.ref = weakref.ref(layer)
        self.key = (side, specials)
        self.warm = warm
        self.done = threading.Event()

    def is_for(self, layer, key: tuple) -> bool:
        return self.key == key and self.ref() is layer


class _Pool:
    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.queue: collections.deque[_Job] = collections.deque()
        self.running: list[_Job] = []
        self.threads: list[threading.Thread] = []
        self.warm_running = 0  # warm-ups being made now

    @property
    def jobs(self) -> list[_Job]:
        """Jobs queued or running."""
        with self.cv:
            return [*self.queue, *self.running]

    def _ensure_threads(self) -> None:
        while len(self.threads) < max(1, min(MAX_THREADS, cores())):
            thread = threading.Thread(
                target=self._work, daemon=True, name=f"attnviz-bands-{len(self.threads)}"
            )
            thread.start()
            self.threads.append(thread)

    def submit(self, layer, side, specials, warm: bool) -> _Job:
        key = (side, specials)
        with self.cv:
            self._ensure_threads()
            for job in (*self.queue, *self.running):  # a few dozen at most (WARM_JOBS)
                if not job.is_for(layer, key):
                    continue
                if not warm and job.warm and job in self.queue:  # a view waits: move it ahead
                    self.queue.remove(job)
                    self.queue.appendleft(job)
                    job.warm = False
                    self.cv.notify_all()
                return job
            job = _Job(layer, side, specials, warm)
            if warm:
                self.queue.append(job)
                self._drop_old_warm_ups()
            else:
                self.queue.appendleft(job)
            self.cv.notify_all()
            return job

    def _drop_old_warm_ups(self) -> None:
        warm = [job for job in self.queue if job.warm]
        for job in warm[: max(0, len(warm) - WARM_JOBS)]:
            self.queue.remove(job)
            job.done.set()

    def _work(self) -> None:
        _one_core_here()
        while True:
            with self.cv:
                while (job := self._next()) is None:
                    self.cv.wait()
                self.queue.remove(job)
                self.running.append(job)
                was_warm = job.warm
                self.warm_running += was_warm
            try:
                layer = job.ref()
                if layer is not None:  # a trace nobody holds any more is not worth a pass
                    layer.make_pass(*job.key)
            except Exception:  # noqa: BLE001  (the caller recomputes and sees the error itself)
                pass
            finally:
                with self.cv:
                    self.warm_running -= was_warm
                    self.running.remove(job)
                    job.done.set()
                    self.cv.notify_all()

    def _next(self) -> _Job | None:
        """The first queued job a view waits for, else a warm-up if none runs yet: warm-ups use
        one thread, leaving the other cores to the page being drawn meanwhile."""
        for job in self.queue:
            if not job.warm or self.warm_running < WARM_THREADS:
                return job
        return None


def cores() -> int:
    """The cores this process may use: OMP_NUM_THREADS if set, else the CPUs it may run on."""
    try:
        return int(os.environ.get("OMP_NUM_THREADS", "")) or len(os.sched_getaffinity(0))
    except (ValueError, AttributeError):
        return os.cpu_count() or 1


def _in_a_new_thread(fn, *args):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)))
    thread.start()
    thread.join()
    return out[0] if out else None


def _one_core_here() -> None:
    """This thread's tensor operations on one core, without changing what other threads get:
    torch.set_num_threads sets the calling thread's OpenMP count and the default of threads that
    start later, so a short-lived thread reads the default first and another one puts it back."""
    default = _in_a_new_thread(torch.get_num_threads)
    torch.get_num_threads()  # this thread's OpenMP set-up happens now, not after the change
    torch.set_num_threads(1)
    _in_a_new_thread(torch.set_num_threads, default)


_pool = _Pool()


def _made(layer, side, specials) -> bool:
    return not layer.pass_due(side, specials, maps=True)


def _on_cpu(layer) -> bool:
    return layer.device.type == "cpu"


def summaries(
    layers: Sequence, side: tuple[int, int] | None, specials: tuple[int, ...]
) -> list[LayerSummary]:
    """bands.summarize of every layer, the missing ones made in the pool's threads (one core
    each, in parallel); a GPU trace's layers are made here, one after another (its kernels are
    parallel already)."""
    _wait(layers, side, specials)
    # made above (or by a warm-up); else here: a GPU trace, or a pass that failed (its error)
    return [summarize(la, side, specials) for la in layers]


def _wait(layers: Sequence, side, specials) -> None:
    """The missing passes of these layers made in the pool's threads, one layer per core."""
    missing = [la for la in layers if not _made(la, side, specials)]
    if missing and all(_on_cpu(la) for la in missing):
        jobs = [_pool.submit(la, side, specials, warm=False) for la in missing]
        for job in jobs:
            job.done.wait()


def warm(layers: Sequence, side: tuple[int, int] | None, specials: tuple[int, ...]) -> None:
    """Start summarizing these layers in the background, behind any view's request."""
    for layer in layers:
        if layer.pass_due(side, specials) and _on_cpu(layer):
            _pool.submit(layer, side, specials, warm=True)


def overview_key(trace) -> tuple[tuple[int, int], tuple[int, ...]]:
    """The (side, specials) of the pass the overview and the head statistics read."""
    return (THUMB, THUMB), specials_of(trace)


def pending(trace, field: str = "weights", maps: bool = False) -> bool:
    """Whether a view of every head of this trace would wait for a pass (a layer in bands whose
    overview summary, or with field "moved" its statistics of moved, is not made yet; `maps`:
    the overview's pooled maps, e.g. of a long input's words, not made yet)."""
    side, specials = overview_key(trace)
    sides = (side, MOVED) if field == "moved" else (side,)
    return any(la.pass_due(s, specials, maps) for la in trace.layers for s in sides)


def fill(trace, field: str = "weights", maps: bool = False) -> None:
    """Make the overview's and the statistics' passes over a trace's layers now, a layer per
    core, so that the engine finds them memoized (a trace that holds its maps: nothing); field
    "moved": the statistics of moved too (their own pass: bands.summarize_moved); `maps`: the
    overview's pooled maps of a long input's words too (both fields in one pass)."""
    side, specials = overview_key(trace)
    for s in (side, MOVED) if field == "moved" else (side,):
        due = [la for la in trace.layers if la.pass_due(s, specials, maps)]
        _wait(due, s, specials)
        for la in due:  # made above; else here (a GPU trace, or a pass that failed: its error)
            la.make_pass(s, specials)


def warm_trace(trace) -> None:
    """Start the overview's pass over a trace's layers in bands in the background, then the pass
    of the statistics of moved (queued behind it: the overview, the first view, waits for no
    more)."""
    if not trace.layers:
        return
    side, specials = overview_key(trace)
    warm(trace.layers, side, specials)
    warm([la for la in trace.layers if la.has("f_norm")], MOVED, specials)
