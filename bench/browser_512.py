"""Speed at 512 tokens as a person sees it: from a link or a control change until every chart has
drawn in Chromium, beside the figures measured before this bench's work, on main f1fc8e8.

Run: .venv/bin/python bench/browser_512.py [--reps 3] [--no-export] [--shots out/b512]
[--page bert] (needs Debian's chromium; about 3 minutes)

The server is `make run`'s own command (taken from `make -n run`: its allocator and OpenMP
settings, attnviz.ui.launch warming the bundled model and the default page before it listens),
plus --server.headless. One headless Chromium (Playwright) at 1920x1080. "Drawn" is measured in
the page: the script has run and is no longer running, every plotly chart has its SVG and one
image per heatmap or image trace, every <img> has loaded, and nothing in the document changed for
QUIET_S; the time is taken at the last change, not at the end of the quiet. A link opens a new tab
session (the trace is cached by then, except for the first open); a control change is a key press
on a slider. The JSON export is built in this process from the same 512-token trace
(attnviz.views.export.to_json) after the server has stopped, and once in the browser (click ->
file saved). The CPU is shared: the 1-minute load average is printed beside every row, and
beside it what load does not distort: the server's CPU seconds (user + system of its process),
the bytes its websocket sent, and the browser's CPU seconds (every Chromium process under this
one: renderer, GPU (software WebGL), browser; a process that ends within a row is not counted).
--only picks rows (e.g. --only lines,pg_open); --profile NAME prints the browser's JavaScript
functions by self time (CDP Profiler) over that row's measures. The links are the ones the app
writes (/pretrained?...); --page bert opens an older /bert link, which reaches the same
page through one more script run (attnviz.ui.url.redirect).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from lines import text_of  # noqa: E402  (512 words that are one BERT wordpiece each, + [CLS] [SEP])

from tests.e2e.conftest import CHROME_ARGS, CHROMIUM, _free_port, wait_healthy  # noqa: E402

N = 512
QUIET_S = 0.5
# The page's path in the links the app writes today. An older link (/bert) opens
# the same page through one more script run (attnviz.ui.url.redirect): --page bert times that.
PAGE = "pretrained"
# The figures before (Chromium, main f1fc8e8, load average 1.3-1.6 unless said).
BEFORE = {
    "first": "11 s (other work running)",
    "overview": "-",
    "heads": "10.5 s",
    "heads_layer": "11.9 s (load 5)",
    "lines": "3.1 s",
    "detail": "-",
    "detail_head": "1.4-2.1 s",
    "query": "3.7-4.0 s",
    "rollout": "2.1-2.7 s",
    "pg_open": "4.7 s (load 4.4)",
    "pg_layer": "3.0 s (load 4.4)",
    "export_browser": "-",
    "export": "93,340,946 B / 8.0 s",
}
LABELS = {
    "first": "Pretrained page, first open (512 tokens, fresh server)",
    "overview": "overview by link",
    "heads": "All heads by link",
    "heads_layer": "All heads: a layer change",
    "lines": "Lines by link",
    "detail": "Head detail by link",
    "detail_head": "Head detail: a head change",
    "query": "One query by link",
    "rollout": "Rollout by link",
    "pg_open": "Playground opened by link",
    "pg_layer": "Playground: a layer change",
    "export_browser": "JSON export in the browser (click -> file)",
    "export": "JSON export built (to_json)",
}

# Runs in every new document before the app: notes when the script ran and the last change.
WATCH = """
window.__av = {ran: false, last: performance.now()};
new MutationObserver(records => {
  window.__av.last = performance.now();
  for (const r of records) {
    if (r.type === 'attributes' && r.attributeName === 'data-test-script-state' &&
        (r.oldValue === 'running' || r.target.getAttribute(r.attributeName) === 'running'))
      window.__av.ran = true;
  }
}).observe(document, {subtree: true, childList: true, attributes: true, characterData: true,
                      attributeOldValue: true});
"""
DRAWN = """q => {
  const a = window.__av;
  if (!a || !a.ran) return false;
  const app = document.querySelector('[data-testid=stApp]');
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-testid=stException]')) return true;
  const charts = [...document.querySelectorAll('[data-testid=stPlotlyChart]')];
  if (charts.length < q.min) return false;
  for (const c of charts) {
    const gd = c.querySelector('.js-plotly-plot');
    if (!gd || !gd._fullData || !gd.querySelector('.main-svg')) return false;
    const n = t => gd._fullData.filter(d => d.type === t && d.visible !== false).length;
    if (gd.querySelectorAll('.heatmaplayer image').length < n('heatmap')) return false;
    if (gd.querySelectorAll('.imagelayer image').length < n('image')) return false;
  }
  for (const img of document.querySelectorAll('[data-testid=stMain] img'))
    if (!img.complete) return false;
  return performance.now() - a.last >= q.quiet;
}"""


def load() -> float:
    return os.getloadavg()[0]


def make_run_command(port: int) -> str:
    """The command `make run` runs (its last line under `make -n`), on `port`."""
    lines = subprocess.run(
        ["make", "-n", "--no-print-directory", "run", f"PORT={port}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip().splitlines()  # fmt: skip
    return lines[-1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chromium_cpu() -> dict[int, float]:
    """CPU seconds so far of every Chromium process started under this one, by pid."""
    import psutil

    out = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" in proc.name():
                times = proc.cpu_times()
                out[proc.pid] = times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return out


class Browser:
    """One Chromium tab and the waits above; each measure returns seconds. It counts the bytes
    the server's websocket sends."""

    def __init__(self, playwright, base: str) -> None:
        self.base = base
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        self.context = self.browser.new_context(
            viewport={"width": 1920, "height": 1080}, accept_downloads=True
        )
        self.context.add_init_script(WATCH)
        self.page = self.context.new_page()
        self.received = 0  # websocket bytes from the server, all sockets of the tab
        self.page.on("websocket", self._socket)
        self.cdp = self.context.new_cdp_session(self.page)

    def _socket(self, ws) -> None:
        def frame(payload) -> None:
            self.received += len(payload)

        ws.on("framereceived", frame)

    def profile_start(self) -> None:
        self.cdp.send("Profiler.enable")
        self.cdp.send("Profiler.setSamplingInterval", {"interval": 200})
        self.cdp.send("Profiler.start")

    def profile_stop(self) -> dict:
        return self.cdp.send("Profiler.stop")["profile"]

    def drawn(self, t0: float, charts: int) -> float:
        self.page.wait_for_function(
            DRAWN, arg={"min": charts, "quiet": QUIET_S * 1000}, timeout=300_000, polling=50
        )
        lag = self.page.evaluate("() => performance.now() - window.__av.last") / 1000
        end = time.perf_counter() - lag
        error = self.page.locator("[data-testid=stException]")
        if error.count():
            raise RuntimeError(f"the app raised: {error.first.inner_text()[:500]}")
        return end - t0

    def open(self, path: str, charts: int) -> float:
        t0 = time.perf_counter()
        self.page.goto(f"{self.base}/{path}", wait_until="commit")
        return self.drawn(t0, charts)

    def press(self, slider: str, key: str, charts: int) -> float:
        thumb = self.page.locator(f'input[type="range"][aria-label="{slider}"]')
        thumb.focus()
        self.page.evaluate("() => { window.__av.ran = false; }")
        t0 = time.perf_counter()
        thumb.press(key)
        return self.drawn(t0, charts)

    def charts(self) -> int:
        return self.page.locator("[data-testid=stPlotlyChart]").count()

    def download(self, label: str) -> tuple[float, int]:
        button = self.page.locator("[data-testid=stDownloadButton] button", has_text=label)
        t0 = time.perf_counter()
        with self.page.expect_download(timeout=300_000) as info:
            button.first.click()
        path = info.value.path()  # waits until the file is saved
        return time.perf_counter() - t0, Path(path).stat().st_size

    def close(self) -> None:
        self.browser.close()


def link(page: str, **params) -> str:
    return f"{page}?{urllib.parse.urlencode(params)}"


def top_functions(profiles: list[dict], n: int = 25) -> list[str]:
    """The JavaScript functions of CDP profiles by self time, heaviest first, as table rows."""
    self_us: dict[tuple, float] = {}
    total = 0.0
    for prof in profiles:
        nodes = {node["id"]: node for node in prof["nodes"]}
        deltas = prof["timeDeltas"]
        for sample, dt in zip(prof["samples"], deltas, strict=True):
            frame = nodes[sample]["callFrame"]
            where = frame["url"].rsplit("/", 1)[-1][:40]
            name = (frame["functionName"] or "(anonymous)", where, frame["lineNumber"])
            self_us[name] = self_us.get(name, 0.0) + dt
            total += dt
    rows = sorted(self_us.items(), key=lambda kv: -kv[1])[:n]
    return [
        f"| {f} | {w}:{line} | {us / 1e6:.3f} | {us / total:.1%} |" for (f, w, line), us in rows
    ]


def browser_rows(
    reps: int,
    export: bool,
    shots: Path | None,
    only: set[str] | None = None,
    profile: str | None = None,
) -> tuple[dict[str, list], dict[str, float], dict]:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    command = make_run_command(port) + " --server.headless true"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (ROOT / "out").mkdir(exist_ok=True)
    log = open(ROOT / "out" / "browser_512-server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        ["bash", "-c", f"exec env {command}"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    times: dict[str, list] = {}
    loads: dict[str, float] = {}
    counts: dict[str, int] = {}
    costs: dict[str, list] = {}  # name: [(server CPU s, websocket bytes, browser CPU s)]
    profiles: list[dict] = []
    mark: list = []

    def start(b: Browser, name: str) -> bool:
        if only is not None and name not in only and name != "first":
            return False
        mark[:] = [cpu_seconds(server.pid), b.received, chromium_cpu()]
        if name == profile:
            b.profile_start()
        return True

    def note(name: str, seconds: float, b: Browser) -> None:
        cpu, got, chrome = cpu_seconds(server.pid), b.received, chromium_cpu()
        busy = sum(s - mark[2].get(pid, 0.0) for pid, s in chrome.items())
        if name == profile:
            profiles.append(b.profile_stop())
        times.setdefault(name, []).append(seconds)
        costs.setdefault(name, []).append((cpu - mark[0], got - mark[1], busy))
        loads[name] = load()
        counts[name] = b.charts()
        if shots is not None:  # what "drawn" looked like, after the clock stopped
            shots.mkdir(parents=True, exist_ok=True)
            b.page.screenshot(path=str(shots / f"{name}-{len(times[name])}.png"))

    bert = text_of(N)
    playground = " ".join(bert.split()[:N])  # the toy stack: one token a word
    try:
        if not wait_healthy(base, 600, proc=server):
            raise RuntimeError(f"the server did not start: see {log.name}")
        with sync_playwright() as p:
            b = Browser(p, base)
            start(b, "first")
            note("first", b.open(link(PAGE, text=bert), 1), b)
            opens = {
                "overview": (link(PAGE, text=bert), 1),
                "heads": (link(PAGE, text=bert, view="heads"), 1),  # one chart of 12 pictures
                "lines": (link(PAGE, text=bert, view="lines"), 1),
                "detail": (link(PAGE, text=bert, view="detail"), 3),
                "query": (link(PAGE, text=bert, view="query", query=10), 1),
                "rollout": (link(PAGE, text=bert, view="rollout", query=10), 1),
                "pg_open": (link("", text=playground, layers=2), 1),  # one chart of 4 pictures
            }
            presses = {  # a control change on the page just opened: (slider, key, charts)
                "heads": ("heads_layer", "Layer", "ArrowRight", 1),
                "detail": ("detail_head", "Head", "ArrowRight", 3),
                "pg_open": ("pg_layer", "Layer", "ArrowRight", 1),
            }
            for _ in range(reps):
                for name, (path, charts) in opens.items():
                    press = presses.get(name)
                    wanted = start(b, name)
                    if not wanted and not (press and start(b, press[0])):
                        continue
                    seconds = b.open(path, charts)
                    if wanted:
                        note(name, seconds, b)
                    if press and start(b, press[0]):
                        note(press[0], b.press(*press[1:]), b)
            if export:
                b.open(link(PAGE, text=bert), 1)
                seconds, size = b.download("JSON")
                times["export_browser"] = [seconds]
                loads["export_browser"] = load()
                counts["export_browser"] = size
            b.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
    if profiles:
        print(f"The browser's JavaScript by self time over {len(profiles)} x {profile}:")
        print("| function | script:line | self s | share |\n|---|---|---|---|")
        print("\n".join(top_functions(profiles)))
    return times, loads, counts, costs


def export_row() -> tuple[float, int, float]:
    """Build the JSON export of the 512-token BERT trace here, as the download button does."""
    from attnviz import load_model, trace_model
    from attnviz.views import export

    text = text_of(N)
    trace = trace_model(load_model(), text)
    assert len(trace.tokens) == N, len(trace.tokens)
    export.to_json(trace, text)  # warm: imports, first allocation
    start = time.perf_counter()
    size = len(export.to_json(trace, text).encode())
    return time.perf_counter() - start, size, load()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="measurements of each warm row")
    ap.add_argument("--no-export", action="store_true", help="skip both export rows")
    ap.add_argument("--shots", type=Path, help="a folder for a screenshot after each measure")
    ap.add_argument("--only", help="comma-separated rows to measure (the first open always)")
    ap.add_argument("--profile", help="a row whose browser JavaScript to profile")
    ap.add_argument("--page", default=PAGE, help="the model page's path in the links")
    args = ap.parse_args()
    globals()["PAGE"] = args.page
    only = set(args.only.split(",")) if args.only else None
    before = os.getloadavg()
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    times, loads, counts, costs = browser_rows(
        args.reps, not args.no_export, args.shots, only, args.profile
    )
    if not args.no_export:
        took, size, at = export_row()
    print(f"attnviz {commit}; {N} tokens; Chromium 1920x1080; the server as `make run` starts it; "
          f"links to /{PAGE}")  # fmt: skip
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in before)}")
    print(
        "| what | before (f1fc8e8) | now: median s | min | max | n | charts | load (1 min) "
        "| server CPU s | websocket KB | browser CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, ts in times.items():
        if name == "export_browser":
            print(
                f"| {LABELS[name]} | {BEFORE[name]} | {ts[0]:.2f} | | | 1 | "
                f"{counts[name]:,} B | {loads[name]:.2f} |"
            )
            continue
        cpu, got, busy = (statistics.median(c) for c in zip(*costs[name], strict=True))
        print(
            f"| {LABELS[name]} | {BEFORE[name]} | {statistics.median(ts):.2f} | {min(ts):.2f} | "
            f"{max(ts):.2f} | {len(ts)} | {counts[name]} | {loads[name]:.2f} | {cpu:.2f} | "
            f"{got / 1000:,.0f} | {busy:.2f} |"
        )
    if not args.no_export:
        print(f"| {LABELS['export']} | {BEFORE['export']} | {size:,} B / {took:.2f} s | | | 1 | | "
              f"{at:.2f} |")  # fmt: skip
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
