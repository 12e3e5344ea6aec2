"""A class on one server: N concurrent sessions against a real `streamlit run`, over Streamlit's own
websocket protocol (bench/wsclient.py), each doing what a student does on the Pretrained page.

Run:  .venv/bin/python bench/load.py            (N = 1, 10, 30; 32 tokens; ~3 minutes)
      .venv/bin/python bench/load.py --quick    (N = 1, 5; a smoke run)
      .venv/bin/python bench/load.py --tokens 512 --sessions 30 --no-baseline
      .venv/bin/python bench/load.py --sentences 100 --tokens 512   (one user, RSS over time)
      .venv/bin/python bench/load.py --cold     (first visitor against a cold server)
      .venv/bin/python bench/load.py --cold-browser   (the same, timed in headless Chromium)

Each session: open the Pretrained page, type its own sentence, change head on the overview, switch
to Head detail, change head, type a new sentence, with 0.5-1.5 s of think time before each step.
The server is started the way `make run` starts it (same allocator and OpenMP settings, app.py, the
project's .streamlit/config.toml). A second server with today's settings (the garbage
collection after every run, no gc.freeze, no websocket compression) is the baseline for the
control-change time, measured in the same run. Latency: from sending a rerun to its
script_finished. Bytes: what arrived on the client's sockets. RSS: the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from wsclient import Session  # noqa: E402

# The baseline settings: a full gc after every script run, no gc.freeze, no compression.
OLD = {
    "cmd": [str(ROOT / ".venv" / "bin" / "streamlit"), "run"],
    "args": ["--runner.postScriptGC", "true", "--server.enableWebsocketCompression", "false"],
    "env": {"ATTNVIZ_GC_FREEZE": "0"},
}
# `make run`: streamlit run with the model loading in the background from the start.
NEW: dict = {"cmd": [sys.executable, "-m", "attnviz.ui.launch"], "args": [], "env": {}}
ONES = 3  # N=1 is run this many times in a row (each a new student and sentence)
CROWDS = 3  # N>1: this many classes in a row (new students each), their reruns pooled
CROWD_GAP_S = 3.0  # between two classes
MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": "268435456",
    "MALLOC_TRIM_THRESHOLD_": "536870912",
    "MALLOC_ARENA_MAX": "2",
}
WORDS = " ".join(
    [
        "the a cat dog bird river city house teacher student book light water tree stone road",
        "morning night green small old new quick slow happy quiet loud warm cold red blue",
        "walks runs reads sees finds loves keeps opens writes sings near under over behind with",
        "from into across because while when after before and but or so very",
    ]
).split()


def sentence(rng: random.Random, n_tokens: int) -> str:
    # Every word above is one WordPiece token; [CLS] and [SEP] make up the rest.
    return " ".join(rng.choice(WORDS) for _ in range(max(n_tokens - 2, 1)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """`streamlit run app.py` as `make run` starts it, plus a thread sampling its RSS."""

    def __init__(self, settings: dict, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = name
        # `streamlit run` puts the script's folder on sys.path, not the checkout: a worktree
        # whose venv does not install this checkout would not find `attnviz`
        env = {**os.environ, **MALLOC, **settings["env"], "PYTHONPATH": str(ROOT)}
        cmd = [
            *settings["cmd"],
            "attnviz/app.py",
            "--server.port",
            str(self.port),
            "--browser.gatherUsageStats",
            "false",
            "--server.headless",  # no browser to open; everything else as `make run` has it
            "true",
            *settings["args"],
        ]
        (ROOT / "out").mkdir(exist_ok=True)
        self.log = open(ROOT / "out" / f"load-{name}.log", "w")  # noqa: SIM115
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.peak = 0.0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def wait_healthy(self, timeout: float = 120) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name} exited: see out/load-{self.name}.log")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        return time.perf_counter() - self.t_start
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"server {self.name} not healthy after {timeout} s")

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mb(self.proc.pid))
            except OSError:
                return
            time.sleep(0.1)

    def rss(self) -> float:
        return rss_mb(self.proc.pid)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset_peak(self) -> None:
        self.peak = self.rss()

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


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


def _step(name: str, run) -> Step:
    error = "; ".join(run.exceptions) or ("" if run.ok else f"finished with status {run.status}")
    return Step(name, run.seconds, run.wire_bytes, run.ok, error)


async def student(url: str, idx: int, n_tokens: int, think: tuple[float, float]) -> Student:
    rng = random.Random(1000 + idx)
    out = Student()

    async def pause() -> None:
        dt = rng.uniform(*think)
        out.think += dt
        await asyncio.sleep(dt)

    try:
        async with Session(url, page="pretrained") as s:
            await pause()
            out.steps.append(_step("open page", await s.rerun()))
            await pause()
            s.set("text", string_value=sentence(rng, n_tokens))
            out.steps.append(_step("own sentence", await s.rerun()))
            await pause()
            frag = s.set("head", double_array_value=[rng.randrange(1, 12)])
            out.steps.append(_step("head (overview)", await s.rerun(frag)))
            await pause()
            s.set("view", string_array_value=["Head detail"])
            run = await s.rerun()
            out.steps.append(_step("view -> detail", run))
            if "detail_weights" not in run.elements and run.ok:
                out.steps[-1].ok, out.steps[-1].error = False, "Head detail did not draw"
            await pause()
            frag = s.set("head", double_array_value=[rng.randrange(1, 12)])
            out.steps.append(_step("head (detail)", await s.rerun(frag)))
            await pause()
            s.set("text", string_value=sentence(rng, n_tokens))
            out.steps.append(_step("new sentence", await s.rerun()))
    except (OSError, TimeoutError, KeyError) as err:
        out.error = f"{type(err).__name__}: {err}"
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def crowd(
    url: str, n: int, n_tokens: int, think: tuple[float, float], first: int = 0
) -> list[Student]:
    return await asyncio.gather(*(student(url, first + i, n_tokens, think) for i in range(n)))


def load_run(
    server: Server, n: int, n_tokens: int, think: tuple[float, float], crowds: int = 1
) -> dict:
    """N=1: one student ONES times in a row. N>1: `crowds` classes of n in a row, each new
    students (sentences, think times), a few seconds apart: the p95 of one class of 30 (180
    reruns, the 9th slowest) moved 2-3x between runs on this shared machine."""
    before = server.rss()
    server.reset_peak()
    walls, crowd_p95, cpus = [], [], []
    if n == 1:  # one student, several times in a row: a p95 of more than six reruns
        t0 = time.perf_counter()
        students = [asyncio.run(crowd(server.url, 1, n_tokens, think, i))[0] for i in range(ONES)]
        walls.append((time.perf_counter() - t0) / ONES)
    else:
        students = []
        for rep in range(crowds):
            if rep:
                time.sleep(CROWD_GAP_S)
            t0, cpu0 = time.perf_counter(), server.cpu_s()
            one = asyncio.run(crowd(server.url, n, n_tokens, think, rep * n))
            walls.append(time.perf_counter() - t0)
            cpus.append(server.cpu_s() - cpu0)
            crowd_p95.append(pct([st.seconds for s in one for st in s.steps if st.ok], 0.95))
            students += one
    wall = statistics.mean(walls)
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
        "rss": (before, server.peak, server.rss()),
        "bytes": sum(st.wire_bytes for st in steps) / (ONES if n == 1 else crowds),  # a class's
        "wall": wall,
        "think": max(s.think for s in students),  # one student's (N=1: the longest of ONES)
        "by_step": by_step,
        "crowd_p95": crowd_p95,
        "cpu": statistics.mean(cpus) if cpus else float("nan"),  # the server's, one class
    }


async def control_changes(url: str, n_tokens: int, reps: int) -> list[float]:
    """One session on Head detail: time `reps` head changes."""
    rng = random.Random(7)
    async with Session(url, page="pretrained") as s:
        await s.rerun()
        s.set("text", string_value=sentence(rng, n_tokens))
        s.set("view", string_array_value=["Head detail"])
        await s.rerun()
        times = []
        for i in range(reps):
            frag = s.set("head", double_array_value=[(i * 5 + 1) % 12])
            run = await s.rerun(frag)
            if not run.ok:
                raise RuntimeError(f"head change failed: {run.exceptions or run.status}")
            times.append(run.seconds)
            await asyncio.sleep(0.2)
        return times


async def warm(url: str) -> None:
    async with Session(url, page="pretrained", timeout=300) as s:
        run = await s.rerun()
        if "mosaic" not in run.elements:
            await s.wait_for("mosaic", 300)


def distinct_sentences(server: Server, count: int, n_tokens: int) -> None:
    async def go() -> None:
        rng = random.Random(99)
        async with Session(server.url, page="pretrained", timeout=300) as s:
            await s.rerun()
            for i in range(count):
                s.set("text", string_value=f"{i} " + sentence(rng, n_tokens - 1))
                run = await s.rerun()
                if not run.ok:
                    print(f"    sentence {i}: {run.exceptions or run.status}")
                if (i + 1) % 10 == 0:
                    print(
                        f"  after {i + 1:>3} sentences: RSS {server.rss():7.0f} MB, "
                        f"peak {server.peak:7.0f} MB, last rerun {run.seconds:.2f} s"
                    )

    before = server.rss()
    server.reset_peak()
    asyncio.run(go())
    time.sleep(8)  # the session closed: the cache releases its traces within 5 s
    print(
        f"  RSS before {before:.0f} MB, peak {server.peak:.0f} MB, "
        f"after close {server.rss():.0f} MB"
    )


def cold_start(settings: dict, name: str) -> None:
    async def first_visit(server: Server) -> tuple[float, float]:
        t0 = time.perf_counter()
        async with Session(server.url, page="pretrained", timeout=300) as s:
            first = await s.rerun()
            drawn = time.perf_counter() - t0
            if "mosaic" not in first.elements:
                await s.wait_for("mosaic", 300)
            return drawn, time.perf_counter() - t0

    server = Server(settings, f"cold-{name}")
    try:
        healthy = server.wait_healthy()
        drawn, full = asyncio.run(first_visit(server))
        t0 = time.perf_counter()
        asyncio.run(warm(server.url))
        warm_s = time.perf_counter() - t0
    finally:
        server.stop()
    print(
        f"  {name:<9} healthy {healthy:5.1f} s after start; first visitor: first script run "
        f"done {drawn:5.2f} s, Pretrained page drawn {full:5.2f} s; warm load {warm_s:5.2f} s; "
        f"cold/warm {full / warm_s:4.2f}"
    )


def cold_browser(settings: dict, name: str) -> None:
    """A first visitor in a real browser (Debian's chromium, as the e2e tests use): the moment the
    server answers its health check, open the Pretrained-model page and time, from the request,
    the page's title drawn and the overview fully drawn (the mosaic image in the DOM and the
    script finished); then a second tab on the warm server, timed the same way."""
    import shutil

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    image = '[data-testid="stPlotlyChart"] .imagelayer image'

    def visit(browser, url: str) -> tuple[float, float]:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        t0 = time.perf_counter()
        page.goto(f"{url}/pretrained", wait_until="commit")
        page.locator("h1").first.wait_for(timeout=120_000)
        drawn = time.perf_counter() - t0
        page.locator(image).first.wait_for(state="attached", timeout=120_000)
        app = page.locator('[data-testid="stApp"]')
        while app.get_attribute("data-test-script-state") != "notRunning":
            time.sleep(0.02)
        full = time.perf_counter() - t0
        page.close()
        return drawn, full

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        browser.new_page().close()  # the browser's own start is not the server's
        server = Server(settings, f"coldb-{name}")
        try:
            healthy = server.wait_healthy()
            first = visit(browser, server.url)
            warm = visit(browser, server.url)
        finally:
            server.stop()
            browser.close()
    print(
        f"  {name:<9} healthy {healthy:5.1f} s after start; first visitor: title drawn "
        f"{first[0]:5.2f} s, overview drawn {first[1]:5.2f} s; warm tab: {warm[0]:5.2f} s, "
        f"{warm[1]:5.2f} s; first/warm (overview drawn) {first[1] / warm[1]:4.2f}"
    )


def print_runs(runs: list[dict], label: str) -> None:
    print(f"\n{label}")
    print(
        f"{'N':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'errors':>6} "
        f"{'RSS before/peak/after MB':>26} {'bytes a class':>17} {'wall s':>7} "
        f"{'think s':>7}"
    )
    for r in runs:
        b, p, a = r["rss"]
        print(
            f"{r['n']:>3} {r['p50']:7.2f} {r['p95']:7.2f} {r['max']:7.2f} {r['errors']:>6} "
            f"{b:8.0f} {p:8.0f} {a:8.0f} {r['bytes'] / 1e6:14.2f} MB {r['wall']:7.1f} "
            f"{r['think']:7.1f}"
        )
    one = next((r for r in runs if r["n"] == 1), None)
    if one:
        print(f"  per step at N=1, median of {ONES} (latency s / bytes on the wire):")
        for name, steps in one["by_step"].items():
            sec = statistics.median(st.seconds for st in steps)
            kb = statistics.median(st.wire_bytes for st in steps) / 1e3
            print(f"    {name:<16} {sec:6.3f} s {kb:10.1f} KB")
        for r in runs:
            if r["n"] > 1:
                budget = 1.5 * r["think"] + one["wall"]
                each = ", ".join(f"{x:.2f}" for x in r["crowd_p95"])
                print(
                    f"  N={r['n']}: p95/p95(N=1) = {r['p95'] / one['p95']:.2f} (p95 over "
                    f"{len(r['crowd_p95'])} classes' reruns; each class: {each} s); wall "
                    f"{r['wall']:.1f} s vs 1.5 x think + N=1 wall = {budget:.1f} s; server CPU "
                    f"{r['cpu']:.1f} s a class"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,10,30", help="comma-separated N (default 1,10,30)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per sentence (default 32)")
    ap.add_argument("--think", default="0.5,1.5", help="think time range in s (default 0.5,1.5)")
    ap.add_argument("--reps", type=int, default=10, help="control changes timed per server")
    ap.add_argument(
        "--crowds", type=int, default=CROWDS, help=f"classes run per N > 1 (default {CROWDS})"
    )
    ap.add_argument("--quick", action="store_true", help="N = 1, 5 and 5 control changes")
    ap.add_argument("--no-baseline", action="store_true", help="skip today's-settings server")
    ap.add_argument("--baseline-load", action="store_true", help="the load runs on it too")
    ap.add_argument("--sentences", type=int, default=0, help="one user, this many sentences")
    ap.add_argument("--cold", action="store_true", help="first visitor on a cold server")
    ap.add_argument("--cold-browser", action="store_true", help="--cold, timed in Chromium")
    ap.add_argument("--new-args", default="", help="extra streamlit options for the new server")
    ap.add_argument("--new-env", default="", help="extra VAR=value,... for the new server")
    args = ap.parse_args()
    NEW["args"] = args.new_args.split()
    # `make run`'s SERVE_ENV beyond the allocator settings (the baseline server runs without it)
    NEW["env"] = {"GOMP_SPINCOUNT": "10000"}
    NEW["env"] |= dict(kv.split("=", 1) for kv in args.new_env.split(",") if kv)
    sessions = [1, 5] if args.quick else [int(x) for x in args.sessions.split(",")]
    reps = 5 if args.quick else args.reps
    think = tuple(float(x) for x in args.think.split(","))
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} cores")

    if args.cold or args.cold_browser:
        print("cold start (time from the first request):")
        (cold_browser if args.cold_browser else cold_start)(NEW, "new")
        return

    configs = [("new", NEW)] if args.no_baseline else [("today", OLD), ("new", NEW)]
    changes: dict[str, list[float]] = {}
    for name, settings in configs:
        server = Server(settings, name)
        try:
            server.wait_healthy()
            asyncio.run(warm(server.url))
            if args.sentences:
                print(
                    f"\n{name}: one user, {args.sentences} distinct {args.tokens}-token sentences"
                )
                distinct_sentences(server, args.sentences, args.tokens)
                continue
            changes[name] = asyncio.run(control_changes(server.url, args.tokens, reps))
            if name == "new" or args.baseline_load:
                runs = [load_run(server, n, args.tokens, think, args.crowds) for n in sessions]
                print_runs(runs, f"{name} settings, {args.tokens} tokens, think {think} s")
        finally:
            server.stop()
    if changes:
        print(f"\nhead change on Head detail, {args.tokens} tokens, {reps} changes, one session:")
        for name, times in changes.items():
            print(f"  {name:<6} median {statistics.median(times):.3f} s  max {max(times):.3f} s")
        if len(changes) == 2:
            ratio = statistics.median(changes["new"]) / statistics.median(changes["today"])
            print(f"  new / today = {ratio:.2f}")


if __name__ == "__main__":
    main()
