"""How many threads the trace workers' forwards use: every core for a forward alone, one while
other script runs are in flight (the second thread's share then costs more CPU than it saves;
bench/load.py)."""

from __future__ import annotations

import threading
import time

import torch

SCRIPT_THREAD = "ScriptRunner.scriptThread"  # the name Streamlit gives the thread of every run
ALONE_S = 2.0  # a forward gets every core again after this long with nothing else running


def script_runs() -> int:
    """Script runs in flight in this process (one thread each)."""
    return sum(thread.name == SCRIPT_THREAD for thread in threading.enumerate())


class Cores:
    """The thread count of each worker's forwards. Changing the count rebuilds OpenMP's team, so
    it goes back to all only after ALONE_S."""

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

    def use(self, callers: int, waiting: int) -> None:
        """Set this thread's count for a forward that `callers` runs wait for; `waiting`: the
        jobs queued behind it."""
        n = self.pick(callers, waiting, script_runs(), time.monotonic())
        if n != self.now:
            torch.set_num_threads(n)
            self._mine.n = n
