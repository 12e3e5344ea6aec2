"""Worker threads that run jobs in arrival order, and run the jobs of one group that wait at the
same moment as one call: a class typing at once gets one forward for many sentences
(attnviz.engine.hooked.trace_each), not thirty forwards one after another. No streamlit here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class _Job:
    group: Hashable
    item: Any
    run: Callable[[list], list]
    weight: float
    future: Future = field(default_factory=Future)
    since: float = field(default_factory=time.monotonic)  # when it was submitted


class Batcher:
    """`workers` threads that live as long as the process. A job that finds a thread free runs at
    once, alone; jobs that wait run together with the other waiting jobs of their group, at most
    `max_batch` jobs and `max_weight` of their weights at a time (a job over it goes alone),
    through the run function of the first. A batch that fails is run
    again one job at a time, so that one bad input fails only itself.

    `linger(waiting)`: how long (s) the first waiting job of a group may wait, counted from its
    submission, for others of its group to fill its batch; `waiting` is how many jobs wait. None
    (default) never waits: a job that finds a thread free runs at once."""

    def __init__(
        self,
        workers: int,
        max_batch: int,
        name: str,
        max_weight: float = float("inf"),
        linger: Callable[[int], float] | None = None,
    ) -> None:
        if workers < 1 or max_batch < 1:
            raise ValueError(f"workers={workers} and max_batch={max_batch} must be at least 1")
        self.max_batch, self.max_weight, self.linger = max_batch, max_weight, linger
        self._queue: list[_Job] = []
        self._ready = threading.Condition()
        self.threads = [
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    def submit(
        self, group: Hashable, item: Any, run: Callable[[list], list], weight: float = 1
    ) -> Future:
        """A future for run([item, ...])'s result for `item`. `group`: jobs that may share a
        call (same group, same kind of run); None never shares. `weight`: what the job costs
        towards max_weight (the app: bytes of its trace)."""
        job = _Job(group, item, run, weight)
        with self._ready:
            self._queue.append(job)
            self._ready.notify()
        return job.future

    def waiting(self) -> int:
        with self._ready:
            return len(self._queue)

    def _take(self) -> list[_Job]:
        with self._ready:
            while True:
                while not self._queue:
                    self._ready.wait()
                left = self._left_to_wait()
                if left <= 0:
                    break
                self._ready.wait(left)  # a submit wakes it to see whether the batch is full
            first = self._queue.pop(0)
            batch, rest, weight = [first], [], first.weight
            for job in self._queue:
                fits = len(batch) < self.max_batch and weight + job.weight <= self.max_weight
                if first.group is not None and job.group == first.group and fits:
                    batch.append(job)
                    weight += job.weight
                else:
                    rest.append(job)
            self._queue[:] = rest
            return batch

    def _left_to_wait(self) -> float:
        """Seconds the first waiting job may still wait for its group to fill a batch (with the
        lock held): 0 when nothing lingers, it shares with no one or its batch is full."""
        first = self._queue[0]
        if self.linger is None or first.group is None:
            return 0.0
        count, weight = 0, 0.0
        for job in self._queue:
            if job.group == first.group:
                count, weight = count + 1, weight + job.weight
        if count >= self.max_batch or weight + first.weight > self.max_weight:
            return 0.0  # full: one more like it would not fit
        return first.since + self.linger(len(self._queue)) - time.monotonic()

    def _work(self) -> None:
        while True:
            self._run([job for job in self._take() if job.future.set_running_or_notify_cancel()])

    def _run(self, batch: list[_Job]) -> None:
        if not batch:
            return
        try:
            results = batch[0].run([job.item for job in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for {len(batch)} jobs")
        except BaseException as err:  # noqa: BLE001  (handed to the caller through its future)
            if len(batch) == 1:
                batch[0].future.set_exception(err)
                return
            for job in batch:
                self._run([job])
            return
        for job, result in zip(batch, results, strict=True):
            job.future.set_result(result)
