"""The training lab's background runs: one thread per job, at most LAB_RUNS at once per process.

A job trains one or more runs of attnviz.training.lab in turn, a step of each at a time, so a page
can draw both curves of a comparison as they grow. Each job has a stop flag; each run stops at its
own time limit. A job asked for while LAB_RUNS are training is refused at once with a message
(nothing queues up behind a busy server). Training uses one torch thread: the lab shares the
cores with every other page. No streamlit here: attnviz.ui.lab ties jobs to sessions.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from attnviz.serve.settings import serving
from attnviz.training.lab import LabConfig, LabResult, run

LAB_RUNS = serving().lab_runs
_SLOTS = threading.BoundedSemaphore(LAB_RUNS)


class Busy(RuntimeError):
    """Every training slot of this server is taken."""


@dataclass
class Job:
    """Runs trained side by side in one background thread; read `results` while it trains."""

    configs: tuple[LabConfig, ...]
    results: list[LabResult] = field(default_factory=list)
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def progress(self) -> float:
        """Fraction of all steps done, 0..1 (1 once finished, however it ended)."""
        if self.done:
            return 1.0
        total = sum(c.steps for c in self.configs)
        return min(1.0, sum(r.steps_done for r in self.results) / total) if total else 0.0

    def _work(self) -> None:
        try:
            torch.set_num_threads(1)
            loops = [
                run(c, r, self._stop.is_set)
                for c, r in zip(self.configs, self.results, strict=True)
            ]
            live = list(loops)
            while live:
                for loop in list(live):
                    try:
                        next(loop)
                    except StopIteration:
                        live.remove(loop)
        except Exception as err:  # noqa: BLE001 - a run's failure is shown, never raised in a page
            self.error = f"{type(err).__name__}: {err}"
        finally:
            for result in self.results:
                if (
                    self._stop.is_set()
                    and result.stopped == "done"
                    and (result.steps_done < result.config.steps)
                ):
                    result.stopped = "stopped"
            _SLOTS.release()
            self._done.set()


def start(configs: tuple[LabConfig, ...] | list[LabConfig]) -> Job:
    """Start training `configs` in a background thread, or raise Busy when LAB_RUNS jobs are
    training already (configs are checked against the budget when they are made)."""
    configs = tuple(configs)
    if not configs or not all(isinstance(c, LabConfig) for c in configs):
        raise TypeError("start() takes one or more LabConfig")
    if not _SLOTS.acquire(blocking=False):
        raise Busy(f"{LAB_RUNS} training runs are going on this server already")
    job = Job(configs, [LabResult(config=c) for c in configs])
    try:
        threading.Thread(target=job._work, name="attnviz-lab", daemon=True).start()
    except RuntimeError:
        _SLOTS.release()
        raise
    return job
