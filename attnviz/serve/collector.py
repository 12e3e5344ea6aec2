"""The collector: Streamlit's full collection after every script run held the GIL for ~8 ms of
each rerun (the app turns it off in .streamlit/config.toml); here a thread collects soon after
COLLECT_BYTES of traces were made, at most every SOON_S, else every SWEEP_S, and releases the
cached traces whose sessions all ended (bench/load.py)."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

from attnviz.serve.bytecache import ByteCache

SWEEP_S = 5.0  # how often traces of ended sessions are released and garbage cycles collected
SOON_S = 0.25  # the least time between two collections
COLLECT_BYTES = 64 * 2**20  # trace bytes made that call for a collection soon

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
        full = time.monotonic() - last_release >= SWEEP_S
        if full:
            last_release = time.monotonic()
            test = alive()
            if test is not None:
                cache.release(test)
        # Traces made since the last collection are young: the two young generations hold their
        # cycles (a full collection every time, ~7 ms of a class's CPU per sentence on SmolLM2,
        # walked every long-lived object again); everything else every SWEEP_S.
        gc.collect(2 if full else 1)
        time.sleep(SOON_S)
