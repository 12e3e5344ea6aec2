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
