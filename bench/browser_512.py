"""Speed at 512 tokens as a person sees it: from a link or a control change until every chart has
drawn in Chromium (issue 34, item 5), beside the figures the issue measured on main f1fc8e8.

Run: .venv/bin/python bench/browser_512.py [--reps 3] [--no-export] [--shots out/b512]
(needs Debian's chromium; about 3 minutes)

The server is `make run`'s own command (taken from `make -n run`: its allocator and OpenMP
settings, attnviz.ui.launch warming the bundled model and the default page before it listens),
plus --server.headless. One headless Chromium (Playwright) at 1920x1080. "Drawn" is measured in
the page: the script has run and is no longer running, every plotly chart has its SVG and one
image per heatmap or image trace, every <img> has loaded, and nothing in the document changed for
QUIET_S; the time is taken at the last change, not at the end of the quiet. A link opens a new tab
session (the trace is cached by then, except for the first open); a control change is a key press
on a slider. The JSON export is built in this process from the same 512-token trace
(attnviz.views.export.to_json) after the server has stopped, and once in the browser (click ->
file saved). The CPU is shared: the 1-minute load average is printed beside every row.
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
# The issue's figures (Chromium, main f1fc8e8, load average 1.3-1.6 unless said).
ISSUE = {
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


class Browser:
    """One Chromium tab and the waits above; each measure returns seconds."""

    def __init__(self, playwright, base: str) -> None:
        self.base = base
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        self.context = self.browser.new_context(
            viewport={"width": 1920, "height": 1080}, accept_downloads=True
        )
        self.context.add_init_script(WATCH)
        self.page = self.context.new_page()

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


def browser_rows(
    reps: int, export: bool, shots: Path | None
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

    def note(name: str, seconds: float, b: Browser) -> None:
        times.setdefault(name, []).append(seconds)
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
            note("first", b.open(link("bert", text=bert), 1), b)
            for _ in range(reps):
                note("overview", b.open(link("bert", text=bert), 1), b)
                note("heads", b.open(link("bert", text=bert, view="heads"), 12), b)
                note("heads_layer", b.press("Layer", "ArrowRight", 12), b)
                note("lines", b.open(link("bert", text=bert, view="lines"), 1), b)
                note("detail", b.open(link("bert", text=bert, view="detail"), 3), b)
                note("detail_head", b.press("Head", "ArrowRight", 3), b)
                note("query", b.open(link("bert", text=bert, view="query", query=10), 1), b)
                note("rollout", b.open(link("bert", text=bert, view="rollout", query=10), 1), b)
                note("pg_open", b.open(link("", text=playground, layers=2), 4), b)
                note("pg_layer", b.press("Layer", "ArrowRight", 4), b)
            if export:
                b.open(link("bert", text=bert), 1)
                seconds, size = b.download("JSON")
                times["export_browser"] = [seconds]
                loads["export_browser"] = load()
                counts["export_browser"] = size
            b.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        log.close()
    return times, loads, counts


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
    args = ap.parse_args()
    before = os.getloadavg()
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%h %cs"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    times, loads, counts = browser_rows(args.reps, not args.no_export, args.shots)
    if not args.no_export:
        took, size, at = export_row()
    print(f"attnviz {commit}; {N} tokens; Chromium 1920x1080; the server as `make run` starts it")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in before)}")
    print("| what | issue (f1fc8e8) | now: median s | min | max | n | charts | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ts in times.items():
        if name == "export_browser":
            print(
                f"| {LABELS[name]} | {ISSUE[name]} | {ts[0]:.2f} | | | 1 | "
                f"{counts[name]:,} B | {loads[name]:.2f} |"
            )
            continue
        print(
            f"| {LABELS[name]} | {ISSUE[name]} | {statistics.median(ts):.2f} | {min(ts):.2f} | "
            f"{max(ts):.2f} | {len(ts)} | {counts[name]} | {loads[name]:.2f} |"
        )
    if not args.no_export:
        print(f"| {LABELS['export']} | {ISSUE['export']} | {size:,} B / {took:.2f} s | | | 1 | | "
              f"{at:.2f} |")  # fmt: skip
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
