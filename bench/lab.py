"""The training lab's runs at the page's default settings, each in a fresh process with one torch
thread: wall time (each must stay under the lab's 60 s limit), where the induction head appears,
and ÷√d_k against raw q·k at d_k = 256 (gradient at the logits, saturation, loss).

Run:  .venv/bin/python bench/lab.py              (three runs, about 2 minutes on this machine)
      .venv/bin/python bench/lab.py --explorer   (the class benchmark's head change on the BERT
                                                  page, alone and while two lab runs train)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from attnviz.training.lab import LabConfig, train
r = train(LabConfig(**json.loads(sys.argv[1])))
print(json.dumps(dict(seconds=r.seconds, stopped=r.stopped, steps=r.steps_done,
    crossed=r.crossed(), points=[p.__dict__ for p in r.points])))
"""

RUNS = {
    "induction (page default)": dict(),
    "÷√d_k, d_k=256 (page default)": dict(d_k=256, steps=100, eval_every=5),
    "raw q·k, d_k=256 (page default)": dict(d_k=256, steps=100, eval_every=5, use_scale=False),
}


def fresh(settings: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(settings)],
        capture_output=True, text=True, env=env, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def explorer(reps: int = 10) -> None:
    """Head changes on Head detail (bench/load.py's control_changes) against a real `streamlit
    run`: alone, then while two lab runs (clicked in a headless browser) train on the server."""
    sys.path.insert(0, str(ROOT / "bench"))
    from classroom import Workload, warm
    from load import NEW, Server, control_changes
    from playwright.sync_api import sync_playwright

    server = Server(NEW, "lab")
    try:
        server.wait_healthy()
        asyncio.run(warm(server.url, Workload()))
        alone = asyncio.run(control_changes(server.url, Workload(), reps))
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless=new", "--no-sandbox"]
            )
            for section in (0, 1):  # the induction run and the two ÷√d_k runs: both slots
                page = browser.new_page()
                page.goto(f"{server.url}/lab?lab_steps=2000&sc_steps=300")
                button = page.locator('[data-testid="stButton"] button').filter(has_text="Train")
                button.nth(section).wait_for(timeout=120_000)
                button.nth(section).click()
                page.get_by_text("Training…").first.wait_for(timeout=60_000)
            browser.close()  # the jobs train on in the server's threads
        training = asyncio.run(control_changes(server.url, Workload(), reps))
    finally:
        server.stop()
    a, b = statistics.median(alone), statistics.median(training)
    print(f"head change, 32 tokens, {reps} changes: alone median {a:.3f} s (max {max(alone):.3f})"
          f"; while two lab jobs train median {b:.3f} s (max {max(training):.3f}); "
          f"ratio {b / a:.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--explorer", action="store_true", help="explorer latency while training")
    if ap.parse_args().explorer:
        explorer()
        return
    results = {}
    for name, settings in RUNS.items():
        r = results[name] = fresh(settings)
        last = r["points"][-1]
        print(
            f"{name:34s} {r['seconds']:6.1f} s  {r['steps']} steps ({r['stopped']})  "
            f"crossed 0.5 at {r['crossed']}  final loss {last['loss']:.3f}  "
            f"best induction {max(last['induction']):.3f}"
        )
    on, off = (results[n]["points"] for n in list(RUNS)[1:])
    g_on = statistics.mean(p["grad_logits"] for p in on)
    g_off = statistics.mean(p["grad_logits"] for p in off)
    print(
        f"d_k=256: mean ‖∂loss/∂logits‖ scaled {g_on:.5f}, unscaled {g_off:.5f} "
        f"(ratio {g_off / g_on:.2f}); step-0 mean max weight {on[0]['max_weight']:.3f} vs "
        f"{off[0]['max_weight']:.3f}; mean ‖∂loss/∂(W_Q,W_K)‖ "
        f"{statistics.mean(p['grad_qk'] for p in on):.4f} vs "
        f"{statistics.mean(p['grad_qk'] for p in off):.4f}"
    )


if __name__ == "__main__":
    main()
