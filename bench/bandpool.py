"""The overview's pass over bands at 4,096 tokens three ways, in one process, alternating:
one layer after another with two torch threads (what a page's thread did before), the same with
one thread, and attnviz.serve.bandpool (one layer per thread, one core each).

Run:  .venv/bin/python bench/bandpool.py [--tokens 4096] [--repeats 3]

The model is bench/long_context.py's (4 layers, 8 heads, 2 K/V heads, d_model 256, random). Each
repeat clears the layers' memo and times every way once; the load average is printed with it, as
the two-thread way suffers most from other work on the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from long_context import build, text_of  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    from attnviz.engine import bands
    from attnviz.engine.hooked import load_model, trace_model
    from attnviz.serve import bandpool

    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        model = load_model(folder, device="cpu")
        trace = trace_model(model, text_of(args.tokens), max_length=args.tokens)
    assert trace.meta.get("lean"), "not a lean trace: use more tokens"
    side, specials = (bands.THUMB, bands.THUMB), bands.specials_of(trace)

    def one_after_another() -> list:
        return [bands.summarize(layer, side, specials) for layer in trace.layers]

    def pooled() -> list:
        return bandpool.summaries(trace.layers, side, specials)

    ways = {
        "one after another, 2 threads": (2, one_after_another),
        "one after another, 1 thread": (1, one_after_another),
        "bandpool (a layer per core)": (2, pooled),
    }
    print(f"{len(trace.tokens):,} tokens, {len(trace.layers)} layers x {model.n_heads} heads; "
          f"{os.cpu_count()} cores")  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(args.repeats):
        line = []
        for name, (threads, run) in ways.items():
            torch.set_num_threads(threads)
            for layer in trace.layers:
                layer.__dict__.pop("_summaries", None)
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
            line.append(f"{times[name][-1]:.2f} s")
        print(f"repeat {r + 1} (load average {os.getloadavg()[0]:.1f}): " + ", ".join(line))
    base = min(times["one after another, 2 threads"])
    for name, got in times.items():
        print(f"  {name:<30} best {min(got):.2f} s, worst {max(got):.2f} s, "
              f"best / two threads' best {min(got) / base:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
