"""Bytes of a trace download: the JSON export against the old one (every tensor at 6 decimals,
frames.trace_to_dict) measured in the same run, and the full-precision .npz.

Run: .venv/bin/python bench/export.py  (prints a table; no assertions)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import StackConfig, load_model, trace_model, trace_text  # noqa: E402
from attnviz.views import export  # noqa: E402
from attnviz.views.frames import trace_to_dict  # noqa: E402

TEXT = "The animal didn't cross the street because it was too tired"
LONG = " ".join([TEXT] * 11)  # ~128 BERT tokens


def row(label: str, trace, text: str) -> None:
    n = len(trace.tokens)
    old = len(json.dumps(trace_to_dict(trace), ensure_ascii=False).encode())
    start = time.perf_counter()
    new = len(export.to_json(trace, text).encode())
    took = time.perf_counter() - start
    npz = len(export.to_npz(trace, text))
    print(
        f"| {label} | {n} | {old / 2**20:.2f} MiB | {new / 2**10:.1f} KiB | {old / new:.0f}× | "
        f"{new / n / 2**10:.1f} KiB | {took * 1000:.0f} ms | {npz / 2**20:.2f} MiB |"
    )


def long_row(model) -> None:
    """A 512-token trace: every weight against the default pick (the smallest threshold that keeps
    the file under 10 MB), each with its size as said before building and its build time."""
    text = " ".join([TEXT] * 60)
    trace = trace_model(model, text, max_length=512)
    n = len(trace.tokens)
    start = time.perf_counter()
    default = export.default_pick(trace)
    print(f"(the default picked in {time.perf_counter() - start:.2f} s)")
    for label, pick in (("every weight", export.Pick()), ("default", default)):
        start = time.perf_counter()
        said = export.json_bytes(trace, pick)
        counted = time.perf_counter() - start
        start = time.perf_counter()
        size = len(export.to_json(trace, text, pick=pick).encode())
        took = time.perf_counter() - start
        print(
            f"| MiniLM, {n} tokens, {label} (threshold {pick.threshold:g}) | "
            f"{size / 2**20:.1f} MiB | said {said / 2**20:.1f} MiB in {counted:.2f} s | "
            f"built in {took:.2f} s |"
        )


def main() -> None:
    print("| trace | n | old JSON | new JSON | smaller | new per token | build | .npz |")
    print("|---|---|---|---|---|---|---|---|")
    model = load_model()
    for text in (TEXT, LONG):
        row("all-MiniLM-L6-v2 (6×12)", trace_model(model, text), text)
    big = StackConfig(d_model=1024, n_heads=32, d_head=256, n_layers=6)
    row("Playground 6×32, d_k 256", trace_text(TEXT, big), TEXT)
    print("\n| 512 tokens | JSON | size said before | build |\n|---|---|---|---|")
    long_row(model)


if __name__ == "__main__":
    main()
