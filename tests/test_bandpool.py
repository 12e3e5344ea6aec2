"""attnviz.serve.bandpool: lean layers summarized in parallel threads of one core each, the same
summaries as one after another, each layer passed over once however many threads ask (a view
during a warm-up included), warm-ups bounded, and what the server does once a long trace is made."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from attnviz.engine import bands
from attnviz.engine.trace import Trace
from attnviz.serve import bandpool
from tests.test_bands import RULES, lean_layer

SIDE = (bands.THUMB, bands.THUMB)


def layers(n: int = 4, size: int = 120, seed: int = 0) -> list:
    return [lean_layer(size, size, RULES["causal"], seed=seed + i) for i in range(n)]


def counting(monkeypatch, delay: float = 0.0) -> list:
    """Record every real pass (and make each one last `delay` seconds longer)."""
    calls, real = [], bands._summarize

    def slow(layer, side, specials):
        calls.append(id(layer))
        time.sleep(delay)
        return real(layer, side, specials)

    monkeypatch.setattr(bands, "_summarize", slow)
    return calls


def test_parallel_summaries_equal_the_ones_made_one_after_another(monkeypatch) -> None:
    monkeypatch.setattr(bands, "BAND_CELLS", 6 * 120 * 10)  # 10-row bands
    mine, theirs = layers(), layers()  # the same random layers, twice
    want = [bands.summarize(la, SIDE, (0,)) for la in mine]
    got = bandpool.summaries(theirs, SIDE, (0,))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.pooled, b.pooled, rtol=1e-6, atol=1e-8)
        for name in bands.STAT_SUMS:
            torch.testing.assert_close(a.sums[name], b.sums[name], rtol=1e-6, atol=1e-8)
        assert a.rows == b.rows


def test_each_layer_is_passed_over_once_when_a_view_asks_during_the_warm_up(monkeypatch) -> None:
    calls = counting(monkeypatch, delay=0.2)
    ls = layers()
    bandpool.warm(ls, SIDE, ())
    time.sleep(0.05)  # the warm-up has started on the first layer
    got = bandpool.summaries(ls, SIDE, ())  # waits for it, takes the other layers itself
    assert sorted(calls) == sorted(id(la) for la in ls)
    assert [g is la._summaries.made[(SIDE, ())] for g, la in zip(got, ls, strict=True)] == [
        True
    ] * 4
    assert bandpool.summaries(ls, SIDE, ()) == got and len(calls) == 4  # memoized


def test_two_threads_asking_at_once_share_the_passes(monkeypatch) -> None:
    calls = counting(monkeypatch, delay=0.1)
    ls = layers()
    out = []
    askers = [threading.Thread(target=lambda: out.append(bandpool.summaries(ls, SIDE, ())))]
    askers.append(threading.Thread(target=lambda: out.append(bands.summarize(ls[2], SIDE))))
    for a in askers:
        a.start()
    for a in askers:
        a.join(30)
    assert len(calls) == 4, "a layer was passed over twice"
    (every,) = [o for o in out if isinstance(o, list)]
    (one,) = [o for o in out if not isinstance(o, list)]
    assert every[2] is one


def test_pool_threads_use_one_core_and_leave_other_threads_as_they_were(monkeypatch) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a new pool's threads would start with 2 without their own setting
    monkeypatch.setattr(bandpool, "_pool", bandpool._Pool())
    seen = []
    layer = lean_layer(30, 30, RULES["causal"])
    real = bands._summarize

    def spy(la, side, specials):
        seen.append(torch.get_num_threads())
        return real(la, side, specials)

    bands._summarize = spy
    try:
        bandpool.summaries([layer, lean_layer(30, 30, RULES["causal"], seed=1)], SIDE, ())
    finally:
        bands._summarize = real
    assert seen == [1, 1]
    assert torch.get_num_threads() == 2
    later = []
    thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    torch.set_num_threads(before)
    assert later == [2], "a thread started after the pool got another thread count"


def test_warm_ups_are_bounded_and_skip_traces_nobody_holds(monkeypatch) -> None:
    gate = threading.Event()
    real = bands._summarize
    passed = []

    def held(layer, side, specials):
        gate.wait(30)
        passed.append(id(layer))
        return real(layer, side, specials)

    monkeypatch.setattr(bands, "_summarize", held)
    first = layers(1, 20)
    bandpool.warm(first, SIDE, ())  # runs, held at the gate
    time.sleep(0.05)
    many = layers(bandpool.WARM_JOBS + 5, 20, seed=100)
    bandpool.warm(many, SIDE, ())
    queued = [job for job in bandpool._pool.queue if job.warm]
    assert len(queued) == bandpool.WARM_JOBS  # the oldest five were dropped
    kept = {id(la) for la in many[5:]}
    assert {id(job.ref()) for job in queued} == kept
    del many[5:]  # nobody holds these any more
    gate.set()
    deadline = time.monotonic() + 30
    while bandpool._pool.jobs and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not bandpool._pool.jobs
    assert passed == [id(first[0])], "a dropped or unheld layer was passed over"


def test_a_failing_pass_raises_in_the_caller(monkeypatch) -> None:
    def broken(layer, side, specials):
        raise RuntimeError("no memory for a band")

    monkeypatch.setattr(bands, "_summarize", broken)
    with pytest.raises(RuntimeError, match="no memory for a band"):
        bandpool.summaries(layers(3, 20), SIDE, ())


def test_a_long_trace_made_by_the_server_starts_its_overview_pass(monkeypatch) -> None:
    """serve.tracing.make warms a lean trace's layers with the overview's key, then the
    statistics of moved (layers with per-key norms)."""
    from attnviz.engine.config import StackConfig
    from attnviz.engine.request import TraceRequest
    from attnviz.serve import tracing

    ls = layers(2, 40)
    for layer in ls:
        layer.f_norm = torch.rand(layer.n_heads, 40) + 0.5  # [head, k]
    trace = Trace(tokens=[f"t{i}" for i in range(40)], layers=ls, source="t")
    monkeypatch.setattr(tracing, "trace_text", lambda *a, **k: trace)
    made = tracing.make(TraceRequest(StackConfig(), "a long document"))
    key = bandpool.overview_key(made)
    deadline = time.monotonic() + 30
    while not all(bands.made(la, s, key[1]) for la in made.layers for s in (key[0], "moved")):
        assert time.monotonic() < deadline, "the pass did not start"
        time.sleep(0.02)
    assert not bandpool.pending(made) and not bandpool.pending(made, "moved")


def test_the_engine_makes_a_long_traces_summaries_without_starting_a_thread() -> None:
    """The data model starts no thread: a notebook's overview and statistics of a long trace are
    made in the caller's thread (the server's pool is serve's, started by serve)."""
    from attnviz.engine.trace import pooled_weights
    from attnviz.measures import stats

    ls = layers(2, 40, seed=7)
    trace = Trace(tokens=[f"t{i}" for i in range(40)], layers=ls, source="t")
    before = set(threading.enumerate())
    pooled = pooled_weights(trace, bands.THUMB, bands.THUMB)
    table = stats.head_stats(trace)
    assert set(threading.enumerate()) <= before, "the engine started a thread"
    assert pooled.shape[:2] == (2, ls[0].n_heads) and len(table["entropy"]) == 2
