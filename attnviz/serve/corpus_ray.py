"""The head atlas over a corpus on Ray: `attnviz atlas` and `attnviz.atlas_corpus`.

What runs where: this process (the driver) reads the corpus, loads the model once to check its
name and plan the run (the token limit and each worker's memory, from the budget), and writes
every Parquet part; each Ray worker is an actor that loads the model once and scores batches of
texts (attnviz.serve.corpus.score_batch) and sends back the sums, a few KB a text. Without an
address Ray starts on this machine (and stops at the end); with one the run joins that cluster
(attnviz, the same version, installed on every node). Actors are restarted by Ray when they die
and their batch is retried, so a killed worker changes nothing but the time; Ctrl-C keeps the
parts written, and the same command again goes on from them.

Ray lives here, not in the engine: the engine starts no thread and imports nothing upward, and
the pooling maths (sums and counts per text, their merge) is attnviz.measures.roles'.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from attnviz.engine.budget import GiB, MiB, longest_input, model_trace_need, size
from attnviz.serve.corpus import Corpus, Manifest, Store, read_corpus, score_batch

RUNTIME_BYTES = (
    768 * MiB
)  # a worker before its model: Python, torch, transformers, Ray (bench/corpus.py)
IN_FLIGHT = 2  # batches queued per worker, so that none waits for the driver
MAX_BATCH = 32  # texts per part at most
CONNECT_S = 5.0  # seconds to reach a cluster's address before saying it cannot be reached
STALL_S = 1800.0  # seconds with no part back before a run stops (ATTNVIZ_ATLAS_STALL_S)
STALL_ENV = "ATTNVIZ_ATLAS_STALL_S"


@dataclass(frozen=True)
class Progress:
    """Where a run stands, after each part: texts done (scored or skipped) of all, parts, and
    this run's pace since its first part came back (the workers' start-up left out)."""

    done: int
    total: int
    parts_done: int
    parts: int
    rate: float  # texts a second

    @property
    def eta(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None


def bar(progress: Progress, stream=sys.stderr, unit: str = "texts") -> None:
    """The command line's progress bar: texts (or `unit`) done, a second, ETA (one line, redrawn
    on a tty)."""
    width = 30
    filled = width * progress.done // max(1, progress.total)
    eta = progress.eta
    clock = "--:--" if eta is None else f"{int(eta // 60)}:{int(eta % 60):02d}"
    line = (f"[{'#' * filled}{'.' * (width - filled)}] {progress.done:,}/{progress.total:,} {unit}"
            f"  {progress.rate:.2f} {unit}/s  ETA {clock}")  # fmt: skip
    end = "\n" if progress.done >= progress.total or not stream.isatty() else ""
    print("\r" + line if stream.isatty() else line, end=end, file=stream, flush=True)


def check_address(address: str | None) -> str | None:
    """None (Ray on this machine), "auto" (a cluster started here with `ray start`), or a
    reachable "ray://host:port" / "host:port"; anything else is a ValueError that says why."""
    if address is None or address == "auto":
        return address
    parsed = urlparse(address if "://" in address else f"gcs://{address}")
    if parsed.scheme not in ("ray", "gcs") or not parsed.hostname or not parsed.port:
        raise ValueError(
            f"--address {address!r} is not a Ray address: use auto (a cluster started on this "
            "machine with `ray start --head`), ray://HOST:10001 (Ray Client) or HOST:6379"
        )
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=CONNECT_S).close()
    except OSError as err:
        raise ValueError(
            f"cannot reach Ray at {address} ({err.strerror or err}): is the cluster up (`ray "
            "status` on its head node) and the port open from here?"
        ) from err
    return address


def _ray():
    """The ray module, or a ValueError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ValueError(
            "the corpus atlas runs on Ray, which is not installed: pip install 'attnviz[corpus]' "
            "(or ray==2.60.0)"
        ) from err
    return ray


def start_local(num_cpus: int | None = None, tries: int = 3) -> None:
    """Ray on this machine, quietly (no dashboard, no usage report; objects here are a few KB of
    sums a text). Ray gives its raylet 30 s to register and says "timed out during startup" past
    that, which a busy 2-core machine reached: such a start is retried."""
    ray = _ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves this machine
    for attempt in range(tries):
        try:
            ray.init(num_cpus=num_cpus, object_store_memory=256 * MiB, include_dashboard=False,
                     log_to_driver=False, logging_level="WARNING")  # fmt: skip
            return
        except Exception as err:  # noqa: BLE001 - Ray raises a bare Exception for this one
            ray.shutdown()
            if "timed out during startup" not in str(err) or attempt == tries - 1:
                raise


def _connect(address: str | None) -> bool:
    """Ray started or joined; True when this call started it (and so stops it)."""
    ray = _ray()

    if ray.is_initialized():
        return False
    try:
        if address is None:
            start_local()
        else:
            ray.init(address=address, log_to_driver=False)
    except ConnectionError as err:
        raise ValueError(
            "no Ray cluster is running on this machine (--address auto): start one with "
            "`ray start --head`, or leave --address out to start Ray here for this run"
            if address == "auto" else f"cannot join Ray at {address}: {err}"
        ) from err  # fmt: skip
    return True


@contextmanager
def ray_session(address: str | None) -> Iterator[None]:
    """Ray joined at `address` or started here for the block; one this call started is stopped
    at its end (and its workers with it), however the block ends."""
    started = _connect(address)
    try:
        yield
    finally:
        if started:
            import ray

            _pool.clear()
            ray.shutdown()


@dataclass(frozen=True)
class Plan:
    """A run's settings, checked in the driver before any worker starts."""

    model: str
    max_tokens: int
    device: str  # "cpu", or "cuda" for a worker with GPUs
    gpus: float
    memory: int  # bytes each worker may hold: its model, one trace at max_tokens, the runtime


def plan(model_name, max_tokens: int | None, gpus: float) -> Plan:
    """Load the model here once (a missing name fails now, with load_model's message), or take the
    one a notebook already loaded (the workers load it by the name it was loaded by), and size
    the run by the budget: tokens up to what a trace of it may hold (lean past the full-trace
    size), and each worker's memory."""
    from attnviz.engine.hooked import LoadedModel, load_model

    if isinstance(model_name, LoadedModel):
        model = model_name
        if model.name in ("", "model object"):  # loaded from an object with no name or folder
            raise ValueError(
                "the workers load the model by name, and this one was loaded from a model object "
                "without one: pass its Hub id or folder instead"
            )
    else:
        model = load_model(model_name, device="cpu")
    most = longest_input(model, 1)
    if max_tokens is None:
        max_tokens = most
    elif not 4 <= max_tokens <= most:
        raise ValueError(
            f"--max-tokens {max_tokens:,}: {model.name} takes 4 to {most:,} tokens here (its "
            "context, ATTNVIZ_MAX_TOKENS, and a trace's bytes and work within the budget: "
            "ATTNVIZ_MAX_TRACE_BYTES, ATTNVIZ_MAX_MODEL_WORK)"
        )
    params = sum(p.numel() * p.element_size() for p in model.model.parameters())
    memory = params + model_trace_need(model, 1, max_tokens) + RUNTIME_BYTES
    return Plan(model.name, max_tokens, "cuda" if gpus > 0 else "cpu", gpus, memory)


def batch_size(n_texts: int) -> int:
    """Texts per part: fixed by the corpus alone (about 16 parts, at most MAX_BATCH texts each),
    so that a rerun with other --workers adds to the same parts."""
    return max(1, min(MAX_BATCH, -(-n_texts // 16)))


def worker_name(plan: Plan, k: int, kind: str = "atlas") -> str:
    """Worker k's actor name (ray.get_actor finds it), one set per kind, model and token limit."""
    return f"attnviz-{kind}-{plan.model.replace('/', '_')}-{plan.max_tokens}-{plan.device}-{k}"


def _worker_class():
    import ray

    @ray.remote(max_restarts=3, max_task_retries=3)
    class AtlasWorker:
        """Holds one model; scores batches of texts, one at a time."""

        def __init__(self, model: str, device: str, threads: int) -> None:
            import torch

            from attnviz.engine.hooked import load_model

            torch.set_num_threads(threads)
            self.model = load_model(model, device=device)
            self.cpu, self.texts = 0.0, 0  # CPU seconds spent scoring, texts scored

        def score(self, items: list[tuple[int, str]], max_tokens: int) -> dict:
            start = time.process_time()
            result = score_batch(self.model, items, max_tokens)
            self.cpu += time.process_time() - start
            self.texts += len(items)
            return result

        def pid(self) -> int:
            return os.getpid()

        def peak(self) -> dict:
            """Peak memory of this worker (RSS and, on a GPU, CUDA's allocator, in bytes) and
            the CPU seconds it spent scoring how many texts (bench/corpus.py)."""
            import resource

            import torch

            out = {"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                   "cpu": self.cpu, "texts": self.texts}  # fmt: skip
            if torch.cuda.is_available():
                out["cuda"] = torch.cuda.max_memory_allocated()
            return out

    return AtlasWorker


# The workers of this driver's Ray session by name: an actor lives while a handle to it does, so
# a notebook or a test that started Ray itself reuses them from call to call (ray.shutdown()
# ends them); a run that started Ray stops it, and them, at its end.
_pool: dict[str, object] = {}


def start_workers(
    plan: Plan, workers: int | None, n_parts: int, kind: str = "atlas", make: Callable | None = None
) -> list:
    """The run's actors (this session's of the same plan are reused), as many as asked, or as
    the cluster's CPUs, GPUs and memory allow, and never more than there are parts. `kind` and
    `make` (a function returning the actor class, built as cls(model, device, threads)): another
    job's workers (attnviz.serve.patch_pairs); the atlas's by default."""
    import ray

    free = ray.cluster_resources()
    fits = int(free.get("memory", 0) // plan.memory) if plan.memory else n_parts
    if plan.gpus > 0:
        fits = min(fits, int(free.get("GPU", 0) // plan.gpus))
    else:
        fits = min(fits, int(free.get("CPU", 1)))
    if fits < 1:
        raise ValueError(
            f"one worker needs {size(plan.memory)}"
            + (f" and {plan.gpus:g} GPU" if plan.gpus else "")
            + f"; this Ray cluster has {size(free.get('memory', 0))} of memory"
            + (f" and {free.get('GPU', 0):g} GPUs" if plan.gpus else "")
            + ": lower --max-tokens, or use a smaller model or a bigger cluster"
        )
    want = min(fits, n_parts) if workers is None else workers
    if want > fits:
        raise ValueError(
            f"--workers {want}: this Ray cluster fits {fits} (each needs {size(plan.memory)} of "
            f"memory{f' and {plan.gpus:g} GPU' if plan.gpus else ''})"
        )
    context = ray.get_runtime_context()  # a new local Ray has job 01000000 again: a new node id
    session = (context.get_job_id(), context.get_node_id())
    if _pool.get("session") != session:  # Ray was restarted: the old handles are gone
        _pool.clear()
        _pool["session"] = session
    names = [worker_name(plan, k, kind) for k in range(max(1, want))]
    for name in [n for n in _pool if n != "session" and n not in names]:
        ray.kill(_pool.pop(name))  # another plan's worker: its CPU and memory go to this run
    cls = (make or _worker_class)()
    for name in names:
        if name not in _pool:
            # One CPU and one torch thread a worker: texts are independent, so workers scale
            # where a second thread per forward won little (bench/bandpool.py, 2 cores).
            options = dict(name=name, num_cpus=1, num_gpus=plan.gpus, memory=plan.memory)
            _pool[name] = cls.options(**options).remote(plan.model, plan.device, 1)
    return [_pool[name] for name in names]


def stall_seconds() -> float:
    """How long a run waits for its next part before it stops: STALL_S, or ATTNVIZ_ATLAS_STALL_S
    (a worker stuck in a driver, a cluster that lost its nodes: never a hang)."""
    raw = os.environ.get(STALL_ENV, "")
    try:
        seconds = float(raw) if raw.strip() else STALL_S
    except ValueError:
        raise ValueError(f"{STALL_ENV}={raw!r}: give seconds, e.g. 1800") from None
    if not seconds > 0:
        raise ValueError(f"{STALL_ENV}={raw!r}: give seconds above 0")
    return seconds


def run(
    corpus: Corpus,
    store: Store,
    actors: list,
    progress: Callable[[Progress], object] | None,
    stall_s: float | None = None,
    args: tuple | None = None,
) -> None:
    """Every part not in the folder yet, scored by the actors (IN_FLIGHT each: actor.score(items,
    *args), args by default the token limit) and written as it comes back. Ctrl-C
    (KeyboardInterrupt) keeps what is written; what is in flight is dropped. No part back for
    `stall_s` seconds (default stall_seconds()) is a RuntimeError: every wait on Ray has a
    timeout, so a stuck worker never hangs the run."""
    import ray

    stall_s = stall_seconds() if stall_s is None else stall_s

    manifest = store.manifest
    todo = sorted(set(range(manifest.n_parts)) - store.done())
    done_before = sum(len(manifest.part_ids(k)) for k in range(manifest.n_parts)) - sum(
        len(manifest.part_ids(k)) for k in todo
    )
    first, fresh, parts_done = None, 0, manifest.n_parts - len(todo)
    flying: dict = {}  # ObjectRef -> (part, actor index)
    queue = list(todo)

    def submit(a: int) -> None:
        k = queue.pop(0)
        items = [(i, corpus.texts[i]) for i in manifest.part_ids(k)]
        flying[actors[a].score.remote(items, *(args or (manifest.max_tokens,)))] = (k, a)

    try:
        for a in range(len(actors)):
            for _ in range(IN_FLIGHT):
                if queue:
                    submit(a)
        last = time.monotonic()  # when a part last came back (or the run began)
        while flying:
            waited = time.monotonic() - last
            if waited >= stall_s:
                waiting = sorted(k for k, _ in flying.values())
                raise RuntimeError(
                    f"no part came back in {waited:.0f} s (parts {waiting} on their workers): "
                    "a worker is stuck or the cluster lost its nodes (`ray status`); the "
                    f"finished parts stay, the same command again goes on ({STALL_ENV}: the wait)"
                )
            ready, _ = ray.wait(list(flying), num_returns=1, timeout=min(1.0, stall_s - waited))
            for ref in ready:
                k, a = flying.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as err:
                    raise RuntimeError(
                        f"a worker failed on part {k} (texts {manifest.part_ids(k).start}.."
                        f"{manifest.part_ids(k).stop - 1}) after Ray's retries: {err}"
                    ) from err
                store.write_part(k, result)
                last = time.monotonic()
                fresh += len(manifest.part_ids(k))
                parts_done += 1
                if queue:
                    submit(a)
                if first is None:
                    first = (time.perf_counter(), fresh)
                elapsed = time.perf_counter() - first[0]
                rate = (fresh - first[1]) / elapsed if elapsed > 0 else 0.0
                if progress is not None:
                    progress(Progress(done_before + fresh, manifest.n_texts, parts_done,
                                      manifest.n_parts, rate))  # fmt: skip
    except (KeyboardInterrupt, RuntimeError):
        # What is in flight finishes on its worker in a moment and is dropped: ray.cancel would
        # raise inside a worker's forward and could cost its restart. A run that started Ray
        # stops it, and its workers, on the way out.
        flying.clear()
        raise


def atlas_corpus(
    model,
    texts: str | Path | list[str],
    out: str | Path,
    address: str | None = None,
    workers: int | None = None,
    *,
    gpus_per_worker: float = 0,
    max_tokens: int | None = None,
    progress: bool | Callable[[Progress], object] = True,
) -> pd.DataFrame:
    """The head atlas of `model` (a name load_model takes, None: the bundled model, or a model
    load_model returned: the workers load it by its name) over a corpus (a .txt / .jsonl file, a
    folder of .txt, or a list of texts), computed by Ray workers that
    hold the model once, written to `out` as Parquet parts and merged: the same DataFrame
    head_roles(model, texts) returns (equal within float rounding), plus atlas.parquet for the
    Atlas page. A rerun with the same arguments skips the parts already written. `progress`:
    True draws a bar on stderr, a function gets a Progress after each part."""
    corpus = _corpus(texts)
    address = check_address(address)
    _ray()
    check_workers(workers)
    if gpus_per_worker < 0:
        raise ValueError(f"--gpus-per-worker {gpus_per_worker}: give 0 (CPU) or more")
    stall_s = stall_seconds()
    the_plan = plan(model, max_tokens, gpus_per_worker)
    manifest = Manifest(the_plan.model, the_plan.max_tokens, batch_size(len(corpus.texts)),
                        len(corpus.texts), corpus.sha256)  # fmt: skip
    store = Store.open(out, manifest)
    if len(store.done()) < manifest.n_parts:  # a finished folder is only merged: no Ray
        with ray_session(address):
            actors = start_workers(the_plan, workers, manifest.n_parts)
            report = bar if progress is True else (progress or None)
            run(corpus, store, actors, report, stall_s)
    return store.finish(corpus)


def check_workers(workers) -> None:
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):  # fmt: skip
        raise ValueError(f"--workers {workers!r}: give a whole number, 1 or more")


def _corpus(texts: str | Path | list[str]) -> Corpus:
    if isinstance(texts, (str, Path)):
        return read_corpus(texts)
    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a corpus file, a folder, or a non-empty list of strings")
    kept = [(i, t) for i, t in enumerate(texts) if t.strip()]
    if not kept:
        raise ValueError("every text is blank")
    return Corpus(tuple(t for _, t in kept), tuple(f"texts[{i}]" for i, _ in kept),
                  len(texts) - len(kept))  # fmt: skip


__all__ = ["GiB", "Progress", "atlas_corpus", "bar", "check_address", "plan", "run", "worker_name"]
