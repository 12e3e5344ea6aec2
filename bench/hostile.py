"""Hostile requests against a real `streamlit run` server and the engine: an over-budget link
and long pairs.

Run: .venv/bin/python bench/hostile.py

1. An over-budget Playground link (d_model=1024, d_head=1024, 32 heads, 6 layers, FFN, a 600-word
   text): the time from the request to script_finished on a fresh websocket session, and the
   server's RSS before and after, against the same session's ordinary default Playground run
   measured in the same run (the baseline). Target: a message in under a second, RSS unchanged.
2. Long pairs: trace_model with 1200 + 1200 words at max_length=5, against the same call on
   12 + 12 words (the baseline).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.wsclient import Session, rss_bytes, server  # noqa: E402

LINK = {
    "d_model": "1024",
    "dk_auto": "false",
    "d_head": "1024",
    "heads": "32",
    "kv": "32",
    "layers": "6",
    "ffn": "true",
    "text": " ".join(f"word{i % 50}" for i in range(600)),
}
REPS = 5
MiB = 2**20


def timed_run(port: int, query: str) -> tuple[float, dict]:
    tab = Session(port)
    t0 = time.perf_counter()
    drawn = tab.run(page="playground", query=query)
    elapsed = time.perf_counter() - t0
    tab.close()
    return elapsed, drawn


def link() -> None:
    with server() as (port, proc):
        timed_run(port, "")  # warm: imports, the first trace
        plain, hostile, rss = [], [], []
        rss.append(rss_bytes(proc.pid))
        for _ in range(REPS):
            plain.append(timed_run(port, "")[0])
            elapsed, drawn = timed_run(port, urlencode(LINK))
            hostile.append(elapsed)
            rss.append(rss_bytes(proc.pid))
            alerts = [a.body for a in drawn.get("alert", [])]
            assert any("GiB" in a for a in alerts), alerts
            assert "exception" not in drawn
        print("over-budget link: the Playground link on a real server (5 fresh sessions each)")
        print(f"  default Playground      median {statistics.median(plain):.3f} s")
        ratio = statistics.median(hostile) / statistics.median(plain)
        print(
            f"  over-budget link        median {statistics.median(hostile):.3f} s, "
            f"max {max(hostile):.3f} s  ({ratio:.2f}x the default)"
        )
        print(f"  message: {alerts[0][:160]}")
        print(
            f"  server RSS: {rss[0] / MiB:.0f} MiB before, {rss[-1] / MiB:.0f} MiB after "
            f"(max {max(rss) / MiB:.0f} MiB, change {(rss[-1] - rss[0]) / MiB:+.0f} MiB)"
        )


def long_pairs() -> None:
    import torch

    from attnviz.engine.hooked import load_model, trace_model

    torch.set_num_threads(1)
    model = load_model(device="cpu")

    def timed(words: int) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            trace_model(model, "word " * words, text_pair="word " * words, max_length=5)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    small, big = timed(12), timed(1200)
    print("long pairs: trace_model, two sentences, max_length=5")
    print(f"  12 + 12 words           median {small:.4f} s")
    print(f"  1200 + 1200 words       median {big:.4f} s  ({big / small:.2f}x)")


if __name__ == "__main__":
    long_pairs()
    link()
