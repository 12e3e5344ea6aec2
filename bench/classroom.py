"""What bench/load.py runs a class against and with: a server started as `make run` starts it, or
replicas behind nginx (deploy/replicas.py); the students (two workloads); one class's run and
its figures. See bench/load.py."""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "deploy"))

from replicas import SERVE_ENV, Replicas, free_port, replica_command, wait_healthy  # noqa: E402
from wsclient import Session  # noqa: E402

THINK = (0.5, 1.5)  # seconds before each step
ONES = 3  # N=1 is run this many times in a row (each a new student and sentence)
CROWDS = 3  # N>1: this many classes in a row (new students each), their reruns pooled
CROWD_GAP_S = 3.0  # between two classes
WORDS = " ".join(
    [
        "the a cat dog bird river city house teacher student book light water tree stone road",
        "morning night green small old new quick slow happy quiet loud warm cold red blue",
        "walks runs reads sees finds loves keeps opens writes sings near under over behind with",
        "from into across because while when after before and but or so very",
    ]
).split()


def sentence(rng: random.Random, n_tokens: int) -> str:
    # Every word above is one WordPiece token (and one BPE token with its space); [CLS] and
    # [SEP] make up the rest.
    return " ".join(rng.choice(WORDS) for _ in range(max(n_tokens - 2, 1)))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int, tid: int | None = None) -> float:
    """CPU seconds (user + system) a process (or its thread `tid`) has used so far."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def threads_cpu_s(pids: list[int]) -> dict[tuple[int, int], float]:
    """CPU seconds of every live thread of `pids`, by (pid, thread id)."""
    out = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out[(pid, int(tid))] = cpu_s(pid, int(tid))
            except (FileNotFoundError, ProcessLookupError):
                continue  # ended meanwhile
    return out


def cpu_split(before: dict, after: dict, total: float) -> tuple[float, float, float]:
    """A class's server CPU `total` split by thread: each process's main thread (Streamlit's event
    loop: the websocket, its deflate, protobuf), the threads alive before and after (the trace
    workers and their OpenMP team, the cache's sweeper) and the rest: threads that came and went,
    Streamlit's script runs (a thread each)."""
    loop = sum(after[k] - before[k] for k in after if k[0] == k[1] and k in before)
    kept = sum(after[k] - before[k] for k in after if k[0] != k[1] and k in before)
    return loop, kept, total - loop - kept


class Target:
    """Server processes a class runs against: their URL, summed RSS (sampled, with its peak) and
    CPU, and the URLs of each replica (to warm each one up directly)."""

    url: str
    pids: list[int]
    direct: list[str]

    def start_sampling(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.rss())
            except OSError:
                return
            time.sleep(0.1)

    def rss(self) -> float:
        return sum(rss_mb(pid) for pid in self.pids)

    def cpu_s(self) -> float:
        return sum(cpu_s(pid) for pid in self.pids)

    def reset_peak(self) -> None:
        self.peak = self.rss()


class Server(Target):
    """`streamlit run app.py` as `make run` starts it (or with `settings`' command and options)."""

    def __init__(self, settings: dict, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.direct = [self.url]
        self.name = name
        # `streamlit run` puts the script's folder on sys.path, not the checkout: a worktree
        # whose venv does not install this checkout would not find `attnviz`
        env = {**os.environ, **SERVE_ENV, **settings["env"], "PYTHONPATH": str(ROOT)}
        cmd = replica_command(self.port, settings["cmd"])  # None: make run's launcher
        (ROOT / "out").mkdir(exist_ok=True)
        self.log = open(ROOT / "out" / f"load-{name}.log", "w")  # noqa: SIM115
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            [*cmd, *settings["args"]], cwd=ROOT, env=env, stdout=self.log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.pids = [self.proc.pid]
        self.start_sampling()

    def wait_healthy(self, timeout: float = 300) -> float:
        wait_healthy(self.url, [self.proc], timeout)
        return time.perf_counter() - self.t_start

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class ReplicaTarget(Target):
    """`n` replicas behind nginx, replica i pinned to core i (deploy/replicas.py)."""

    def __init__(self, n: int, env: dict | None = None) -> None:
        self.name = f"{n} replica{'s' * (n > 1)}"
        self.group = Replicas(n, pin=True, env=env)
        self.url = self.group.url
        self.direct = [f"http://127.0.0.1:{p}" for p in self.group.ports]
        self.pids = [p.pid for p in self.group.replicas]
        self.start_sampling()

    def wait_healthy(self, timeout: float = 300) -> float:
        t0 = time.perf_counter()
        self.group.wait(timeout)
        return time.perf_counter() - t0

    def stop(self) -> None:
        self._stop.set()
        self.group.stop()


@dataclass
class Workload:
    """What each student does: `model` the bundled model picked ('' = the page's default),
    `heads` its heads per layer, `tokens` per sentence, `kind` 'sentences' or 'explore',
    `dtype` the precision the link asks for."""

    model: str = ""
    heads: int = 12
    tokens: int = 32
    kind: str = "sentences"
    think: tuple[float, float] = THINK
    dtype: str = ""  # the link's precision (?dtype=bfloat16); "" the page's default, float32

    def query(self, text: str | None = None) -> str:
        pairs = [("pick", self.model)] if self.model else []
        pairs += [("dtype", self.dtype)] if self.dtype else []
        pairs += [("text", text)] if text is not None else []
        return urllib.parse.urlencode(pairs)

    @property
    def sentences(self) -> int:
        """Sentences one student's visit traces."""
        return 4 if self.kind == "sentences" else 2


@dataclass
class Step:
    name: str
    seconds: float
    wire_bytes: int
    ok: bool
    error: str = ""


@dataclass
class Student:
    steps: list[Step] = field(default_factory=list)
    think: float = 0.0
    error: str = ""


def _step(name: str, run, needs: str = "") -> Step:
    error = "; ".join(run.exceptions) or ("" if run.ok else f"finished with status {run.status}")
    if not error and needs and needs not in run.elements:
        error = f"{needs} was not drawn"
    return Step(name, run.seconds, run.wire_bytes, not error, error)


async def student(url: str, idx: int, work: Workload) -> Student:
    rng = random.Random(1000 + idx)
    out = Student()

    async def pause() -> None:
        dt = rng.uniform(*work.think)
        out.think += dt
        await asyncio.sleep(dt)

    try:
        if work.kind == "sentences":
            await _sentences(url, rng, work, out, pause)
        else:
            await _explore(url, rng, work, out, pause)
    except (OSError, TimeoutError, KeyError) as err:
        out.error = f"{type(err).__name__}: {err}"
    return out


async def _sentences(url, rng, work: Workload, out: Student, pause) -> None:
    """A link with the student's own sentence, then three more typed."""
    await pause()
    async with Session(url, page="pretrained", query=work.query(sentence(rng, work.tokens))) as s:
        out.steps.append(_step("open link", await s.rerun(), "mosaic"))
        for _ in range(3):
            await pause()
            s.set("text", string_value=sentence(rng, work.tokens))
            out.steps.append(_step("new sentence", await s.rerun(), "mosaic"))


async def _explore(url, rng, work: Workload, out: Student, pause) -> None:
    """The page, a sentence, a head on the overview, Head detail, a head, a new sentence."""
    async with Session(url, page="pretrained", query=work.query()) as s:
        await pause()
        out.steps.append(_step("open page", await s.rerun()))
        await pause()
        s.set("text", string_value=sentence(rng, work.tokens))
        out.steps.append(_step("own sentence", await s.rerun()))
        await pause()
        frag = s.set("head", double_array_value=[rng.randrange(1, work.heads)])
        out.steps.append(_step("head (overview)", await s.rerun(frag)))
        await pause()
        s.set("view", string_array_value=["Head detail"])
        out.steps.append(_step("view -> detail", await s.rerun(), "detail_weights"))
        await pause()
        frag = s.set("head", double_array_value=[rng.randrange(1, work.heads)])
        out.steps.append(_step("head (detail)", await s.rerun(frag)))
        await pause()
        s.set("text", string_value=sentence(rng, work.tokens))
        out.steps.append(_step("new sentence", await s.rerun()))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def crowd(url: str, n: int, work: Workload, first: int = 0) -> list[Student]:
    return await asyncio.gather(*(student(url, first + i, work) for i in range(n)))


async def warm(url: str, work: Workload) -> None:
    """One visit that waits for the overview: the model loaded and the page warm."""
    async with Session(url, page="pretrained", query=work.query(), timeout=600) as s:
        run = await s.rerun()
        if "mosaic" not in run.elements:
            await s.wait_for("mosaic", 600)


def load_run(target: Target, n: int, work: Workload, crowds: int = CROWDS) -> dict:
    """N=1: one student ONES times in a row. N>1: `crowds` classes of n in a row, each new
    students (sentences, think times), a few seconds apart: the p95 of one class moved 2-3x
    between runs on this shared machine."""
    before = target.rss()
    target.reset_peak()
    walls, crowd_p95, cpus, client, splits = [], [], [], [], []
    students = []
    for rep in range(ONES if n == 1 else crowds):
        if rep:
            time.sleep(CROWD_GAP_S if n > 1 else 0.5)
        t0, cpu0, own0 = time.perf_counter(), target.cpu_s(), time.process_time()
        threads0 = threads_cpu_s(target.pids)
        one = asyncio.run(crowd(target.url, n, work, rep * n))
        walls.append(time.perf_counter() - t0)
        cpus.append(target.cpu_s() - cpu0)
        splits.append(cpu_split(threads0, threads_cpu_s(target.pids), cpus[-1]))
        client.append(time.process_time() - own0)
        crowd_p95.append(pct([st.seconds for s in one for st in s.steps if st.ok], 0.95))
        students += one
    time.sleep(8)  # sessions closed: the cache releases their traces within 5 s
    steps = [st for s in students for st in s.steps]
    lat = [st.seconds for st in steps if st.ok]
    errors = sum(not st.ok for st in steps) + sum(bool(s.error) for s in students)
    for s in students:
        for msg in [s.error] + [st.error for st in s.steps]:
            if msg:
                print(f"    error: {msg[:200]}")
    by_step: dict[str, list[Step]] = {}
    for st in steps:
        by_step.setdefault(st.name, []).append(st)
    return {
        "n": n,
        "p50": pct(lat, 0.5),
        "p95": pct(lat, 0.95),
        "max": max(lat, default=float("nan")),
        "errors": errors,
        "rss": (before, target.peak, target.rss()),
        "wall": statistics.mean(walls),
        "think": max(s.think for s in students),
        "by_step": by_step,
        "crowd_p95": crowd_p95,
        # the servers' CPU over the sentences the class traced
        "cpu_sentence": statistics.mean(cpus) / (n * work.sentences),
        # that CPU by thread (cpu_split): event loop, kept threads, script runs
        "cpu_split": [statistics.mean(x) / (n * work.sentences) for x in zip(*splits, strict=True)],
        # the students' own CPU (this process, on the same cores): what the servers did not get
        "client_sentence": statistics.mean(client) / (n * work.sentences),
    }
