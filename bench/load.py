"""A class on one server or on replicas: N students against a real `streamlit run`, over
Streamlit's own websocket protocol (bench/wsclient.py), on the Pretrained page of any bundled model.

Run:  .venv/bin/python bench/load.py --model smollm2-135m            (N = 1, 30, 60; 32 tokens)
      .venv/bin/python bench/load.py --model smollm2-135m --replicas 1,2   (each on one core)
      .venv/bin/python bench/load.py --model smollm2-135m --dtype bfloat16   (links with ?dtype=)
      .venv/bin/python bench/load.py --workload explore --sessions 1,10,30  (MiniLM, six steps)
      .venv/bin/python bench/load.py --quick    (N = 1, 5; a smoke run)
      .venv/bin/python bench/load.py --sentences 100 --tokens 512   (one user, RSS over time)
      .venv/bin/python bench/load.py --cold     (first visitor against a cold server)
      .venv/bin/python bench/load.py --cold-browser   (the same, timed in headless Chromium)
      .venv/bin/python bench/load.py --baseline (also a server with the old settings: no gc.freeze,
                                                 a full gc after every run, no compression)

Workloads (0.5-1.5 s of think time before each step):
- sentences (default): a student opens a link with their own sentence (`?pick=MODEL&text=...`),
  then types three more sentences: four traces each, the overview drawn for each.
- explore: open the page, type a sentence, change head on the overview, switch to Head detail,
  change head, type a new sentence.
The server is started the way `make run` starts it (deploy/replicas.py: the same allocator and
OpenMP settings, app.py, the project's .streamlit/config.toml); `--replicas 1,2` runs the class
through nginx (deploy/nginx.conf) in front of 1 and 2 replicas, replica i pinned to core i.
Latency: from sending a rerun to its script_finished. Bytes: what arrived on the client's sockets.
RSS: the servers' processes, summed. Server CPU per sentence: the servers' CPU seconds during a
class over the sentences it traced, against a plain batched forward of the same model on the same
sentences (SDPA, 8 a batch, no hooks) measured in a fresh process in the same run; the same
forward with torch's own linear layers (ATTNVIZ_ONEDNN_LINEAR=0, MKL) is printed under it, the
baseline before attnviz sent them to oneDNN (docs/models.md). That CPU is also split by thread:
each server's event loop (its main thread), the threads that outlive a class (the trace workers,
their OpenMP team) and the script runs (a thread each, gone when the run ends).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from classroom import (  # noqa: E402
    CROWDS,
    THINK,
    ReplicaTarget,
    Server,
    Target,
    Workload,
    load_run,
    sentence,
    warm,
)
from wsclient import Session  # noqa: E402

# The old settings, a baseline (--baseline): a full gc after every script run, no gc.freeze, no
# websocket compression.
OLD = {
    "cmd": [str(ROOT / ".venv" / "bin" / "streamlit"), "run"],
    "args": ["--runner.postScriptGC", "true", "--server.enableWebsocketCompression", "false"],
    "env": {"ATTNVIZ_GC_FREEZE": "0"},
}
# `make run`: python -m attnviz.ui.launch (deploy/replicas.py's command and SERVE_ENV).
NEW: dict = {"cmd": None, "args": [], "env": {}}
HEADS = {"": 12, "smollm2-135m": 9, "gemma-3-270m": 4, "attnviz-char-zh-en": 8}
GOAL_P95_S = 1.5  # a class's p95 that counts as carried


def plain_forward(work: Workload, batch: int = 8, reps: int = 6) -> dict:
    """In this (fresh) process: the model's plain forward (SDPA, no hooks, the logits of the
    last token) on `batch` of the workload's sentences at once and on one alone; CPU and wall
    seconds per sentence, the better of `reps`."""
    import torch

    import attnviz
    from attnviz.engine.hooked.encoding import collate

    model = attnviz.load_model(work.model or None, dtype=work.dtype or "float32")
    model.model.set_attn_implementation("sdpa")
    rng = random.Random(7)
    texts = [sentence(rng, work.tokens) for _ in range(batch)]
    encs = [model.call_tokenizer(t, return_tensors="pt") for t in texts]
    tokens = statistics.mean(e["input_ids"].shape[1] for e in encs)

    def timed(enc: dict) -> tuple[float, float]:
        enc = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")
               or model.kind == "encoder"}  # fmt: skip
        # the last position's logits, asked for as a position (an int 1 makes transformers'
        # lm_head multiply a strided view: in bfloat16 on a CPU 75x slower, 2x in float32)
        last = torch.tensor([enc["input_ids"].shape[1] - 1])
        keep = {"logits_to_keep": last} if model.kind == "decoder" else {}
        best = (float("inf"), float("inf"))
        with torch.inference_mode():
            for i in range(reps + 2):
                c0, t0 = time.process_time(), time.perf_counter()
                model.model(**enc, **keep)
                cost = (time.process_time() - c0, time.perf_counter() - t0)
                best = min(best, cost) if i >= 2 else best  # two warm-up runs
        return best

    batched = timed(collate(model, encs))
    alone = timed(encs[0])
    return {
        "tokens": tokens,
        "threads": torch.get_num_threads(),
        "batch_cpu": batched[0] / batch,
        "batch_wall": batched[1] / batch,
        "alone_cpu": alone[0],
        "alone_wall": alone[1],
    }


def plain_forward_apart(work: Workload, pinned: bool, torch_linear: bool = False) -> dict:
    """plain_forward in a fresh process with `make run`'s settings (on core 0 alone: `pinned`;
    with torch's own linear layers, MKL's sgemm, not oneDNN's: `torch_linear`)."""
    from replicas import SERVE_ENV

    env = {**os.environ, **SERVE_ENV, "PYTHONPATH": str(ROOT)}
    if torch_linear:
        env["ATTNVIZ_ONEDNN_LINEAR"] = "0"
    cmd = [sys.executable, __file__, "--plain-forward", "--model", work.model,
           "--tokens", str(work.tokens), "--dtype", work.dtype]  # fmt: skip
    if pinned:
        env["OMP_NUM_THREADS"] = "1"
        cmd = ["taskset", "-c", "0", *cmd]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_forward(fw: dict, label: str) -> None:
    print(
        f"  plain forward ({label}, {fw['threads']} thread(s), {fw['tokens']:.0f} tokens): "
        f"batch of 8 {fw['batch_cpu'] * 1e3:.0f} ms CPU / {fw['batch_wall'] * 1e3:.0f} ms wall "
        f"a sentence; alone {fw['alone_cpu'] * 1e3:.0f} ms CPU / {fw['alone_wall'] * 1e3:.0f} ms"
    )


def print_runs(runs: list[dict], label: str, forward: dict | None) -> None:
    print(f"\n{label}")
    print(
        f"{'N':>3} {'p50 s':>7} {'p95 s':>7} {'max s':>7} {'errors':>6} "
        f"{'RSS before/peak/after MB':>26} {'CPU/sentence':>12} {'x forward':>9} {'wall s':>7} "
        f"{'client CPU':>10}"
    )
    for r in runs:
        b, p, a = r["rss"]
        ratio = r["cpu_sentence"] / forward["batch_cpu"] if forward else float("nan")
        print(
            f"{r['n']:>3} {r['p50']:7.2f} {r['p95']:7.2f} {r['max']:7.2f} {r['errors']:>6} "
            f"{b:8.0f} {p:8.0f} {a:8.0f} {r['cpu_sentence'] * 1e3:9.0f} ms {ratio:9.2f} "
            f"{r['wall']:7.1f} {r['client_sentence'] * 1e3:7.0f} ms"
        )
    one = next((r for r in runs if r["n"] == 1), None)
    if one:
        print("  per step at N=1, median (latency s / bytes on the wire):")
        for name, steps in one["by_step"].items():
            sec = statistics.median(st.seconds for st in steps)
            kb = statistics.median(st.wire_bytes for st in steps) / 1e3
            print(f"    {name:<16} {sec:6.3f} s {kb:10.1f} KB")
    for r in runs:
        if r["n"] > 1:
            each = ", ".join(f"{x:.2f}" for x in r["crowd_p95"])
            print(f"  N={r['n']}: each class's p95 {each} s")
    for r in runs:
        loop, kept, scripts = (x * 1e3 for x in r["cpu_split"])
        print(
            f"  N={r['n']}: CPU a sentence by thread: event loop {loop:.0f} ms, trace workers "
            f"and other kept threads {kept:.0f} ms, page scripts {scripts:.0f} ms"
        )


def carried(runs: list[dict]) -> int:
    """The most students of these runs with p95 <= GOAL_P95_S and no error (0: none)."""
    ok = [r["n"] for r in runs if r["p95"] <= GOAL_P95_S and not r["errors"]]
    return max(ok, default=0)


def run_target(target: Target, work: Workload, sessions: list[int], crowds: int) -> list[dict]:
    target.wait_healthy()
    for url in target.direct:  # each replica loads the model before the class
        asyncio.run(warm(url, work))
    return [load_run(target, n, work, crowds) for n in sessions]


async def control_changes(url: str, work: Workload, reps: int) -> list[float]:
    """One session on Head detail: time `reps` head changes."""
    rng = random.Random(7)
    async with Session(url, page="pretrained", query=work.query()) as s:
        await s.rerun()
        s.set("text", string_value=sentence(rng, work.tokens))
        s.set("view", string_array_value=["Head detail"])
        await s.rerun()
        times = []
        for i in range(reps):
            frag = s.set("head", double_array_value=[(i * 5 + 1) % work.heads])
            run = await s.rerun(frag)
            if not run.ok:
                raise RuntimeError(f"head change failed: {run.exceptions or run.status}")
            times.append(run.seconds)
            await asyncio.sleep(0.2)
        return times


def distinct_sentences(server: Server, count: int, work: Workload) -> None:
    async def go() -> None:
        rng = random.Random(99)
        async with Session(server.url, page="pretrained", query=work.query(), timeout=300) as s:
            await s.rerun()
            for i in range(count):
                s.set("text", string_value=f"{i} " + sentence(rng, work.tokens - 1))
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


def cold_start(settings: dict, name: str, work: Workload) -> None:
    async def first_visit(server: Server) -> tuple[float, float]:
        t0 = time.perf_counter()
        async with Session(server.url, page="pretrained", query=work.query(), timeout=300) as s:
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
        asyncio.run(warm(server.url, work))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="a bundled model to pick (default: the page's)")
    ap.add_argument("--workload", default="sentences", choices=["sentences", "explore"])
    ap.add_argument("--sessions", default="1,30,60", help="comma-separated N (default 1,30,60)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per sentence (default 32)")
    ap.add_argument("--think", default=",".join(map(str, THINK)), help="think time range, s")
    ap.add_argument("--crowds", type=int, default=CROWDS, help="classes run per N > 1")
    ap.add_argument("--replicas", default="", help="e.g. 1,2: behind nginx, one core each")
    ap.add_argument("--quick", action="store_true", help="N = 1, 5")
    ap.add_argument("--baseline", action="store_true", help="head changes vs the old settings")
    ap.add_argument("--reps", type=int, default=10, help="head changes timed (--baseline)")
    ap.add_argument("--sentences", type=int, default=0, help="one user, this many sentences")
    ap.add_argument("--cold", action="store_true", help="first visitor on a cold server")
    ap.add_argument("--cold-browser", action="store_true", help="--cold, timed in Chromium")
    ap.add_argument(
        "--dtype",
        default="",
        choices=["", "float32", "bfloat16"],
        help="the links' precision (?dtype=); the plain forward runs in it too",
    )
    ap.add_argument("--new-env", default="", help="extra VAR=value,... for the servers")
    ap.add_argument("--plain-forward", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    think = tuple(float(x) for x in args.think.split(","))
    work = Workload(args.model, HEADS.get(args.model, 12), args.tokens, args.workload, think,
                    args.dtype)  # fmt: skip
    if args.plain_forward:  # the baseline's own process (plain_forward_apart)
        print(json.dumps(plain_forward(work)))
        return
    NEW["env"] = dict(kv.split("=", 1) for kv in args.new_env.split(",") if kv)
    sessions = [1, 5] if args.quick else [int(x) for x in args.sessions.split(",")]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f}, {os.cpu_count()} cores; model "
          f"{args.model or 'the default'} in {args.dtype or 'float32'}, workload {work.kind}, "
          f"{work.tokens} tokens, think {think} s")  # fmt: skip
    if args.cold or args.cold_browser:
        print("cold start (time from the first request):")
        if args.cold_browser:
            cold_browser(NEW, "new")
        else:
            cold_start(NEW, "new", work)
        return
    if args.sentences:
        server = Server(NEW, "new")
        try:
            server.wait_healthy()
            asyncio.run(warm(server.url, work))
            print(f"\none user, {args.sentences} distinct {args.tokens}-token sentences")
            distinct_sentences(server, args.sentences, work)
        finally:
            server.stop()
        return
    if args.baseline:
        baseline(work, args.reps)
    if args.replicas:
        fw = plain_forward_apart(work, pinned=True)
        print_forward(fw, "on one core")
        print_forward(plain_forward_apart(work, True, torch_linear=True), "torch's linear layers")
        per_core = []
        for n in (int(x) for x in args.replicas.split(",")):
            target = ReplicaTarget(n, NEW["env"])
            try:
                runs = run_target(target, work, sessions, args.crowds)
            finally:
                target.stop()
            print_runs(runs, f"{target.name} behind nginx, one core each", fw)
            per_core.append((n, carried(runs)))
        for n, most in per_core:
            print(f"  {n} replica(s): {most} students at p95 <= {GOAL_P95_S} s of those run "
                  f"= {most / n:.0f} students per core")  # fmt: skip
        return
    fw = plain_forward_apart(work, pinned=False)
    print_forward(fw, "every core")
    print_forward(plain_forward_apart(work, False, torch_linear=True), "torch's linear layers")
    server = Server(NEW, "new")
    try:
        runs = run_target(server, work, sessions, args.crowds)
    finally:
        server.stop()
    print_runs(runs, "one server (make run's), every core", fw)


def baseline(work: Workload, reps: int) -> None:
    """Head changes on Head detail, one session, against the old settings and today's."""
    changes = {}
    for name, settings in (("old", OLD), ("new", NEW)):
        server = Server(settings, name)
        try:
            server.wait_healthy()
            asyncio.run(warm(server.url, work))
            changes[name] = asyncio.run(control_changes(server.url, work, reps))
        finally:
            server.stop()
    print(f"\nhead change on Head detail, {work.tokens} tokens, {reps} changes, one session:")
    for name, times in changes.items():
        print(f"  {name:<6} median {statistics.median(times):.3f} s  max {max(times):.3f} s")
    ratio = statistics.median(changes["new"]) / statistics.median(changes["old"])
    print(f"  new / old = {ratio:.2f}")


if __name__ == "__main__":
    main()
