"""The head atlas over a corpus (attnviz.atlas_corpus) on 1 and 2 local Ray workers, against the
same texts scored in one process without Ray (the baseline, in the same run): texts a second,
the run's wall time with Ray's and the workers' start, and the peak memory of each worker.

Run:  .venv/bin/python bench/corpus.py [--model NAME ...] [--texts 200] [--workers 1,2]
                                       [--gpus-per-worker G] [--max-tokens N] [--no-ray]
                                       [--long 4096]

Default models: the two bundled ones, all-MiniLM-L6-v2 (the largest, 22.7 M parameters) and
attnviz-char-zh-en; any name load_model takes works (a Hub id, or a registry GGUF such as
gemma-3-270m). --gpus-per-worker 1 puts each worker (and the
baseline) on a GPU. --no-ray measures the baseline alone (a machine without Ray).
--long N first scores one document of N tokens (a lean trace) and prints its time and memory.
Every measurement runs in a fresh process (memory is compared), one torch thread per worker.
On a shared machine texts/s follows the load; the CPU seconds a worker spends per text do not
much: the bench prints both.
The corpus: texts of 2-3 sentences drawn (seeded) from the probe sets' sentences and passages,
both languages, each under 240 characters, so every bundled model takes them whole.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODELS = ("sentence-transformers/all-MiniLM-L6-v2", "attnviz-char-zh-en")


def corpus(n: int, seed: int = 0) -> list[str]:
    from attnviz.measures.roles import probe_texts

    pool = []
    for lang in ("en", "zh"):
        probes = probe_texts(lang)
        pieces = re.split(r"(?<=[.。])\s*", " ".join(probes["passage"]))
        pool.append([s for s in probes["natural"] + pieces if len(s.strip()) > 8])
    rng, texts = random.Random(seed), []
    while len(texts) < n:
        sentences = pool[len(texts) % 2]
        text = " ".join(rng.sample(sentences, rng.choice((2, 3))))
        if len(text) < 240:
            texts.append(text)
    return texts


def peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_baseline(args) -> dict:
    """One process, no Ray: the model loaded once, every text scored (score_batch)."""
    import torch

    torch.set_num_threads(1)
    from attnviz.engine.hooked import load_model
    from attnviz.serve.corpus import score_batch

    texts = Path(args.texts_file).read_text(encoding="utf-8").splitlines()
    device = "cuda" if args.gpus_per_worker > 0 else "cpu"
    model = load_model(args.model, device=device)
    limit = args.max_tokens or model.max_length
    score_batch(model, [(0, texts[0])], limit)  # warm-up
    t0, cpu0 = time.perf_counter(), time.process_time()
    out = score_batch(model, list(enumerate(texts)), limit)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    result = {"seconds": seconds, "cpu": cpu, "texts": len(texts), "skipped": len(out["skipped"]),
              "tokens": sum(out["tokens"].values()), "rss": peak_rss()}  # fmt: skip
    if device == "cuda":
        result["cuda"] = torch.cuda.max_memory_allocated()
    return result


def child_ray(args) -> dict:
    """Ray started here with `workers` workers; the run timed from the call, and from the first
    part back (the steady rate); each worker's peak memory asked after the run."""
    import ray

    from attnviz.serve import corpus_ray

    t0 = time.perf_counter()
    corpus_ray.start_local()
    started = time.perf_counter() - t0
    seen = []
    with tempfile.TemporaryDirectory() as out:
        t1 = time.perf_counter()
        corpus_ray.atlas_corpus(
            args.model, args.texts_file, out, workers=args.workers,
            gpus_per_worker=args.gpus_per_worker, max_tokens=args.max_tokens,
            progress=lambda p: seen.append((time.perf_counter(), p)),
        )  # fmt: skip
        run = time.perf_counter() - t1
        actors = [a for name, a in corpus_ray._pool.items() if name != "session"]
        peaks = ray.get([a.peak.remote() for a in actors], timeout=120)
    ray.shutdown()
    first_t, first = seen[0]
    last_t, last = seen[-1]
    steady = (last.done - first.done) / (last_t - first_t) if last_t > first_t else 0.0
    return {"ray_start": started, "run": run, "texts": last.total, "steady": steady,
            "first_part": first_t - t1, "peaks": peaks, "driver_rss": peak_rss()}  # fmt: skip


def child_long(args) -> dict:
    """One long document through bench/long_context.py's model (4 layers, 8 heads, 2 K/V heads,
    d_model 256): its lean trace, then its role sums band by band; peak RSS after each."""
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "bench"))
    from long_context import build, text_of

    from attnviz.engine.hooked import load_model, trace_model
    from attnviz.measures import roles

    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        model = load_model(folder, device="cpu")
    n = args.long
    t0 = time.perf_counter()
    trace = trace_model(model, text_of(n), max_length=n)
    traced, rss_trace = time.perf_counter() - t0, peak_rss()
    t1 = time.perf_counter()
    roles.role_sums([trace])
    scored = time.perf_counter() - t1
    layer = trace.layers[0]
    return {"n": len(trace.tokens), "lean": bool(trace.meta["lean"]), "trace_s": traced,
            "score_s": scored, "rss_trace": rss_trace, "rss_scored": peak_rss(),
            "nn_bytes": 4 * layer.n_heads * layer.n_q * layer.n_k}  # fmt: skip


def fresh(kind: str, model: str, texts_file: str, args, workers: int = 0) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--model", model, "--texts-file", texts_file,
           "--workers", str(workers), "--gpus-per-worker", str(args.gpus_per_worker)]  # fmt: skip
    if args.max_tokens:
        cmd += ["--max-tokens", str(args.max_tokens)]
    if args.long:
        cmd += ["--long", str(args.long)]
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}  # a lent GPU's packages too
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{kind} {model} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", action="append")
    parser.add_argument("--texts", type=int, default=200)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--gpus-per-worker", type=float, default=0)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--long", type=int, help="also one document of this many tokens (lean)")
    parser.add_argument("--child")
    parser.add_argument("--texts-file")
    args = parser.parse_args()
    if args.child:
        args.workers, args.model = int(args.workers), args.model[0]
        fn = {"baseline": child_baseline, "ray": child_ray, "long": child_long}[args.child]
        print(json.dumps(fn(args)))
        return
    import importlib.util

    if not args.no_ray and importlib.util.find_spec("ray") is None:
        print("Ray is not installed here (pip install ray==2.60.0): the one-process baseline only")
        args.no_ray = True
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} cores, load average {load:.1f}; {args.texts} texts; one torch "
          f"thread per worker; {'GPU' if args.gpus_per_worker else 'CPU'}")  # fmt: skip
    if args.long:
        r = fresh("long", "", "", args)
        print(f"one document of {r['n']:,} tokens ({'lean' if r['lean'] else 'full'} trace), "
              f"bench/long_context.py's model: traced in {r['trace_s']:.1f} s (peak RSS "
              f"{mib(r['rss_trace'])}), role sums band by band in {r['score_s']:.1f} s (peak RSS "
              f"{mib(r['rss_scored'])}); one layer's n x n weights of every head would be "
              f"{mib(r['nn_bytes'])}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "texts.txt"
        path.write_text("\n".join(corpus(args.texts)) + "\n", encoding="utf-8")
        for model in args.model or MODELS:
            base = fresh("baseline", model, str(path), args)
            rate = (base["texts"] - base["skipped"]) / base["seconds"]
            extra = f", CUDA peak {mib(base['cuda'])}" if "cuda" in base else ""
            print(f"\n{model}: {base['texts'] - base['skipped']} texts, {base['tokens']:,} tokens "
                  f"({base['skipped']} skipped)")  # fmt: skip
            per_text = 1000 * base["cpu"] / base["texts"]
            print(f"  one process, no Ray: {rate:.1f} texts/s, {per_text:.0f} ms of CPU a text, "
                  f"peak RSS {mib(base['rss'])}{extra}")  # fmt: skip
            if args.no_ray:
                continue
            for workers in (int(w) for w in args.workers.split(",")):
                r = fresh("ray", model, str(path), args, workers)
                rss = ", ".join(mib(p["rss"]) for p in r["peaks"])
                cpu = sum(p["cpu"] for p in r["peaks"]) / max(
                    1, sum(p["texts"] for p in r["peaks"])
                )
                cuda = [mib(p["cuda"]) for p in r["peaks"] if "cuda" in p]
                print(f"  Ray, {workers} worker(s): {r['steady']:.1f} texts/s steady "
                      f"({r['steady'] / rate:.2f}x one process), {1000 * cpu:.0f} ms of CPU a "
                      f"text ({cpu / (base['cpu'] / base['texts']):.2f}x); wall "
                      f"{r['ray_start']:.1f} s Ray start + {r['run']:.1f} s run (first part back "
                      f"at {r['first_part']:.1f} s); "
                      f"peak RSS per worker {rss}"
                      + (f", CUDA {', '.join(cuda)}" if cuda else "")
                      + f"; driver {mib(r['driver_rss'])}")  # fmt: skip


if __name__ == "__main__":
    main()
