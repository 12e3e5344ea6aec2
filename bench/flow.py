"""The information-flow graph (attnviz.flow_graph) on SmolLM2-135M at 512 and 4,096 tokens:
time and peak RSS against a plain trace of the same input, each side in a fresh process.

Run: .venv/bin/python bench/flow.py [--sizes 512,4096] [--model smollm2-135m] [--threads 1]
Prints a table; no asserts. The text is the animal sentence said over and over, cut to n tokens
(max_length), the graph at the default threshold (0.04) from the last token.
- trace: attnviz.load_model + trace_model (lean past the full-trace byte limit: 4,096 tokens
  is); its time and the process's peak RSS;
- flow: the same trace, then flow_graph: its time (the rerun that reads the residual stream
  included), the graph's nodes and edges, the most weight rows one layer read, and the peak RSS.
The budget's trace limits are raised for 4,096 tokens (BIG). The model's loading is not timed
(its dequantising is the same on both sides).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SENTENCE = "The animal didn't cross the street because it was too tired. "
MB = 2**20
# 4,096 tokens of SmolLM2 is past a classroom server's trace limits (as bench/llms.py raises them)
BIG = {"ATTNVIZ_MAX_TRACE_BYTES": str(8 * 2**30), "ATTNVIZ_MAX_MODEL_WORK": str(10**14)}


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def run_child(side: str, model: str, n: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **BIG)
    args = ["--child", side, "--model", model, "--sizes", str(n), "--threads", str(threads)]
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(side: str, name: str, n: int, threads: int) -> dict:
    import torch

    from attnviz import flow_graph, load_model, trace_model

    torch.set_num_threads(threads)
    model = load_model(name, device="cpu")
    trace_model(model, SENTENCE, max_length=16)  # one-time set-up, on both sides
    rss_loaded = peak_rss()
    t0 = time.perf_counter()
    trace = trace_model(model, SENTENCE * (n // 12 + 2), max_length=n)
    out = {"n": len(trace.tokens), "trace_s": time.perf_counter() - t0}
    out["lean"] = trace.layers[0].in_bands
    if side == "flow":
        t0 = time.perf_counter()
        graph = flow_graph(model, trace)
        out["flow_s"] = time.perf_counter() - t0
        out["nodes"], out["edges"] = graph.attrs["nodes"], len(graph)
        out["heads"] = int((graph.kind == "head").sum())
        mids = graph[graph.dst_stage == "mid"].groupby("dst_layer").dst_pos.nunique()
        out["rows_max"] = int(mids.max())
        top = graph[graph.kind == "head"].groupby(["dst_layer", "head"]).weight.sum()
        out["top_heads"] = [f"L{la}H{h} {w:.2f}" for (la, h), w in top.nlargest(5).items()]
    out["rss_loaded"], out["rss"] = rss_loaded, peak_rss()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="512,4096")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=("trace", "flow"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.model, int(args.sizes), args.threads)))
        return
    print(f"{args.model}, {args.threads} torch thread(s), threshold 0.04, last token")
    head = "| n | trace s | flow s | flow / trace | nodes | edges (heads) | rows a layer |"
    print(head + " trace RSS MB | flow RSS MB | flow − trace MB |")
    print("|" + "---|" * 10)
    for n in (int(s) for s in args.sizes.split(",")):
        base = run_child("trace", args.model, n, args.threads)
        got = run_child("flow", args.model, n, args.threads)
        if "error" in base or "error" in got:
            print(f"| {n} | {base.get('error', '')} {got.get('error', '')} |")
            continue
        print(
            f"| {got['n']:,}{' (lean)' if got['lean'] else ''} | {base['trace_s']:.2f} | "
            f"{got['flow_s']:.2f} | {got['flow_s'] / base['trace_s']:.1f} | {got['nodes']} | "
            f"{got['edges']} ({got['heads']}) | {got['rows_max']} | {base['rss'] / MB:.0f} | "
            f"{got['rss'] / MB:.0f} | {(got['rss'] - base['rss']) / MB:+.0f} |"
        )
        print(f"  strongest heads by summed weight: {', '.join(got['top_heads'])}")


if __name__ == "__main__":
    main()
