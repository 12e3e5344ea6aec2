"""Values a view derives from a trace (a figure, a table), made once while the trace lives and
kept on the trace itself (`Trace.memo`): they go when the trace goes, and no table outside it
holds them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from attnviz.engine.trace import Trace

_lock = threading.Lock()


def per_trace(trace: Trace, key: Hashable, make: Callable[[], Any], keep: int | None = None) -> Any:
    """`make()` once per (trace, key) while the trace lives, e.g. the overview figure, which a
    head change would otherwise rebuild (pool, colour, PNG) for the same picture. `key` is a
    tuple whose first item names the kind; `keep`: at most this many values of a kind per trace,
    the least recently used going first."""
    memo = trace.memo
    with _lock:
        if key in memo:
            memo[key] = memo.pop(key)  # most recently used last
            return memo[key]
    value = make()
    with _lock:
        memo[key] = value
        if keep is not None:
            same = [k for k in memo if k[0] == key[0]]
            for old in same[: max(0, len(same) - keep)]:
                del memo[old]
    return value


def grouped(trace: Trace, by: str | None) -> Trace:
    """The trace over words (by="word") or whole characters ("char"), made once while the trace
    of pieces lives and kept on it (a lean trace's words hold nothing n x n: measures/words.py);
    the trace itself for None or "pieces". The words keep the pieces' request, so a view can find
    the model and the whole run (attnviz.ui.caching.TraceRef makes them again after eviction)."""
    if by in (None, "pieces") or trace.unit == by:
        return trace

    def make() -> Trace:
        from attnviz.measures.words import grouped as group

        words = group(trace, by=by)
        words.request = trace.request
        return words

    return per_trace(trace, ("grouped", by), make)
