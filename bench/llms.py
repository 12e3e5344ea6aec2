"""The registry LLMs (SmolLM2-135M, Gemma 3 270M), whole: load times, trace time against a plain
eager forward, peak memory, an oracle check and the head atlas's raw scores.

Run:  .venv/bin/python bench/llms.py [--models smollm2-135m,gemma-3-270m] [--quick]
      (after `make llms`; prints tables, no asserts; --quick: one rep, no 4,096-token runs)

Every figure comes from a fresh process (one torch thread, as a classroom server runs a trace):
- load, first: a temporary ATTNVIZ_HOME holding only a link to the fetched .gguf, so load_model
  converts (header check, sha256, dequantise, write the cache) and then loads; the process's wall
  time from start (imports included), load_model's own time and the peak RSS;
- load, cached: the real cache, one fresh process per run (median of 3): the imports load_model
  needs (torch, transformers), then load_model alone, each as wall and CPU time, the whole
  process beside them, and the 1-minute load average when it ended (wall time on a shared
  machine stretches with it; CPU time barely does);
- speed: one process per n; trace_model against a plain eager forward of the same weights
  (attn_implementation "eager", no output_attentions, logits for the last position only, as the
  trace computes), reps interleaved, medians of wall time and of the process's CPU time (one
  thread: the CPU-time ratio holds when other work shares the cores, the wall-time one does not);
  SDPA's time beside it for reference;
- memory: one process per side at 4,096 tokens: load + one trace, load + one eager forward;
- oracle: the trace's weights against eager's output_attentions for every layer and head at 128
  tokens; at 4,096 (a lean trace) row blocks of three layers against eager weights caught by a
  hook, and the next-token logits;
- atlas: attnviz.head_roles over the probe set plus 30 distinct words said twice, and the
  induction score on that text alone (the atlas's role rule is being changed elsewhere: the raw
  scores, top heads per score, are what is printed).
The budget's trace limits are raised for 4,096 tokens (ATTNVIZ_MAX_TRACE_BYTES 8 GiB,
ATTNVIZ_MAX_MODEL_WORK 10^14); with the defaults a classroom server traces fewer tokens of these
models (printed as "default budget: up to N tokens").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from long_context import child  # noqa: E402

MODELS = ("smollm2-135m", "gemma-3-270m")
ANIMAL = "The animal didn't cross the street because it was too tired."
WORDS = (
    "apple river window candle forest silver doctor engine garden yellow market island ticket "
    "mirror letter bottle hammer summer planet coffee school rabbit camera violin ocean pocket "
    "tiger lemon chair music"
)  # 30 distinct words
REPEATED = f"{WORDS} {WORDS}"
BIG = {"ATTNVIZ_MAX_TRACE_BYTES": str(8 * 2**30), "ATTNVIZ_MAX_MODEL_WORK": str(10**14)}


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def long_text(n: int) -> str:
    words = (ANIMAL + " " + REPEATED).split()
    return " ".join(words[(i * 7) % len(words)] for i in range(n))  # more than n tokens


def _load(name: str):
    from attnviz.engine.hooked import load_model

    return load_model(name, device=os.environ.get("BENCH_DEVICE", "cpu"))


def child_load(name: str, first: bool) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    import attnviz.engine.hooked.loading  # noqa: F401  (torch and transformers' model classes)

    imports, imports_cpu = time.perf_counter() - t0, time.process_time() - c0
    home = None
    if first:  # an empty cache holding only the fetched file
        from attnviz.engine.bundled import gguf_path

        home = tempfile.mkdtemp(prefix="attnviz-bench-")
        (Path(home) / "gguf").mkdir()
        (Path(home) / "gguf" / gguf_path(name).name).symlink_to(gguf_path(name))
        os.environ["ATTNVIZ_HOME"] = home
    t1, c1 = time.perf_counter(), time.process_time()
    model = _load(name)
    out = {"imports": imports, "load": time.perf_counter() - t1, "rss": peak_rss()}
    out |= {"total": time.perf_counter() - t0, "load_cpu": time.process_time() - c1}
    out["total_cpu"] = time.process_time()  # the whole process so far, imports included
    out |= {"imports_cpu": imports_cpu, "loadavg": os.getloadavg()[0]}
    from attnviz.engine.budget import longest_input

    out["default_tokens"] = longest_input(model)
    if home is not None:
        from attnviz.engine.hooked import gguf_cache

        folder = next((Path(home) / "converted").iterdir())
        out["cache_bytes"] = sum(p.stat().st_size for p in folder.iterdir())
        out["seconds_recorded"] = gguf_cache.manifest(folder)["seconds"]
        import shutil

        shutil.rmtree(home)
    return out


def plain_forward(hf, ids, impl: str, sync=lambda: None):
    """A forward of the HF model with attention implementation `impl` ("eager", "sdpa"), no
    attentions kept, logits for the last position only (as a trace computes them). Returns
    (wall, CPU) seconds of the forward alone: switching the implementation (20 ms a switch for
    SmolLM2's 30 layers) is not the forward's time."""
    import torch

    from attnviz.engine.hooked.intercept import IMPL

    def run() -> tuple[float, float]:
        hf.set_attn_implementation(impl)
        try:
            with torch.inference_mode():
                sync()
                t0, c0 = time.perf_counter(), time.process_time()
                hf(ids, logits_to_keep=1)
                sync()
                return time.perf_counter() - t0, time.process_time() - c0
        finally:
            hf.set_attn_implementation(IMPL)

    return run


def child_speed(name: str, n: int, reps: int) -> dict:
    import torch

    from attnviz.engine.hooked import trace_model

    torch.set_num_threads(1)
    model = _load(name)
    hf, dev = model.model, torch.device(model.device)
    text = long_text(n) if n > 64 else ANIMAL
    ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
    ids = ids["input_ids"].to(dev)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    sides = {
        "trace": lambda: trace_model(model, text, max_length=n),
        "eager": plain_forward(hf, ids, "eager", sync),
        "sdpa": plain_forward(hf, ids, "sdpa", sync),
    }
    for fn in sides.values():  # warm-up (one-time set-up on each side)
        fn()
        sync()
    times: dict[str, list[float]] = {s: [] for s in sides}
    cpu: dict[str, list[float]] = {s: [] for s in sides}
    names = list(sides)
    for rep in range(reps):
        for side in names[rep % 3 :] + names[: rep % 3]:
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            inside = sides[side]()  # a plain forward times itself
            sync()
            elapsed = (time.perf_counter() - t0, time.process_time() - c0)
            wall, used = inside if isinstance(inside, tuple) else elapsed
            times[side].append(wall)
            cpu[side].append(used)
    out = {side: statistics.median(t) for side, t in times.items()}
    out |= {f"{side}_cpu": statistics.median(t) for side, t in cpu.items()}
    out["n"] = int(ids.shape[1])
    return out


def child_memory(name: str, n: int, side: str) -> dict:
    import torch

    from attnviz.engine.hooked import trace_model

    torch.set_num_threads(1)
    model = _load(name)
    loaded = peak_rss()
    text = long_text(n)
    if side == "trace":
        trace = trace_model(model, text, max_length=n)
        extra = {"trace_bytes": trace.nbytes(), "lean": bool(trace.meta.get("lean"))}
    else:
        ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
        model.model.set_attn_implementation("eager")
        with torch.inference_mode():
            model.model(ids["input_ids"], logits_to_keep=1)
        extra = {}
    return {"rss": peak_rss(), "rss_loaded": loaded, **extra}


def child_oracle(name: str, n: int) -> dict:
    """Largest |trace - eager| of the weights (every layer at n <= 512; three layers' row blocks
    through a hook on a longer input) and of the next-token logits."""
    import torch

    from attnviz.engine.hooked import trace_model
    from attnviz.engine.hooked.intercept import IMPL

    torch.set_num_threads(1)
    model = _load(name)
    hf = model.model
    text = long_text(n) if n > 64 else ANIMAL
    trace = trace_model(model, text, max_length=n)
    ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
    ids = ids["input_ids"].to(model.device)
    n = ids.shape[1]
    layers = sorted({0, model.n_layers // 2, model.n_layers - 1})
    rows = [slice(0, 32), slice(n // 2, n // 2 + 32), slice(n - 32, n)]
    caught: dict[int, list] = {}

    def catch(i: int):  # the eager weights' rows of layer i: [head, rows, k] per block
        return lambda m, a, out: caught.__setitem__(
            i, [out[1][0, :, r].float().cpu() for r in rows]
        )

    hooks = [hf.model.layers[i].self_attn.register_forward_hook(catch(i)) for i in layers]
    hf.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ref = hf(ids, logits_to_keep=1)
    finally:
        hf.set_attn_implementation(IMPL)
        for hook in hooks:
            hook.remove()
    worst = 0.0
    for i in layers:
        layer = trace.layers[i]
        for r, want in zip(rows, caught[i], strict=True):
            for h in range(layer.n_heads):
                worst = max(worst, float((layer.block("weights", h, r) - want[h]).abs().max()))
    logits = float((trace.next_logits - ref.logits[0, -1].float().cpu()).abs().max())
    return {"n": n, "lean": bool(trace.meta.get("lean")), "weights": worst, "logits": logits,
            "layers": layers}  # fmt: skip


def child_atlas(name: str) -> dict:
    import torch

    from attnviz.measures.next_token import next_tokens
    from attnviz.measures.roles import head_roles, probe_list

    torch.set_num_threads(1)
    model = _load(name)
    lang = "both" if name.startswith("gemma") else "en"
    texts = [*probe_list(lang), REPEATED]
    t0 = time.perf_counter()
    atlas = head_roles(model, texts)
    seconds = time.perf_counter() - t0
    alone = head_roles(model, [REPEATED])
    out: dict = {"seconds": seconds, "texts": len(texts), "lang": lang, "heads": len(atlas)}
    for score in ("first_token", "previous_token", "induction", "duplicate_token"):
        top = atlas.nlargest(5, score)
        out[score] = [
            (int(r["layer"]), int(r["head"]), round(float(r[score]), 3)) for _, r in top.iterrows()
        ]
        out[f"{score}_over_0.5"] = int((atlas[score] >= 0.5).sum())
    top = alone.nlargest(5, "induction")
    out["induction_repeated"] = [(int(r["layer"]), int(r["head"]), round(float(r["induction"]), 3))
                                 for _, r in top.iterrows()]  # fmt: skip
    from attnviz.engine.hooked import trace_model

    twice = trace_model(model, f"{ANIMAL} {ANIMAL[:-7]}")  # "... tired. The ... it was too"
    out["next_after_animal_twice"] = [
        (t.token, round(t.p, 3)) for t in next_tokens(model, twice, 3)
    ]
    return out


CHILDREN = {"load": child_load, "speed": child_speed, "memory": child_memory,
            "oracle": child_oracle, "atlas": child_atlas}  # fmt: skip


def run(kind: str, *args: object) -> dict:
    """A child in a fresh process; loads see the default budget, the rest the raised one."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if kind != "load":
        env |= BIG
    return child(__file__, ["--child", kind, *map(str, args)], env)


def report(
    name: str, quick: bool, only: str | None = None, sizes: tuple[int, ...] = (128, 4096)
) -> None:
    from attnviz.engine.bundled import REGISTRY, gguf_path

    print(f"\n## {name}: {REGISTRY[name].about}")
    print(f"GGUF {gguf_path(name).stat().st_size / 2**20:.1f} MiB")
    if only is None:
        first = run("load", name, "first")
        if "error" in first:
            print("first load:", first["error"])
        else:
            print(f"load, first (converts): {first['load']:.1f} s in load_model "
                  f"({first['load_cpu']:.1f} s CPU), process {first['total']:.1f} s with imports; "
                  f"peak RSS {first['rss'] / 2**30:.2f} GiB; "
                  f"cache {first['cache_bytes'] / 2**20:.0f} MiB (float32)")  # fmt: skip
    if only in (None, "load"):
        report_cached_load(name, quick)
    if only in (None, "speed"):
        report_speed(name, quick, sizes)
    if only is None:
        report_rest(name, quick)


def report_cached_load(name: str, quick: bool) -> None:
    cached = [run("load", name, "cached") for _ in range(1 if quick else 3)]
    cached = [c for c in cached if "error" not in c] or cached
    if "error" in cached[0]:
        print("cached load:", cached[0]["error"])
    else:
        keys = ("imports", "imports_cpu", "load", "total", "load_cpu", "total_cpu", "loadavg")
        med = {k: statistics.median(c[k] for c in cached) for k in keys}
        print(f"load, cached (median of {len(cached)} fresh processes): load_model "
              f"{med['load']:.2f} s ({med['load_cpu']:.2f} s CPU) after imports (torch, "
              f"transformers) {med['imports']:.2f} s ({med['imports_cpu']:.2f} s CPU); process "
              f"{med['total']:.2f} s ({med['total_cpu']:.2f} s CPU); load average "
              f"{med['loadavg']:.1f}; peak RSS {cached[0]['rss'] / 2**30:.2f} GiB; default "
              f"budget: up to {cached[0]['default_tokens']:,} tokens")  # fmt: skip


def report_speed(name: str, quick: bool, sizes: tuple[int, ...] = (128, 4096)) -> None:
    print("n | trace s | eager s | trace / eager | SDPA s | CPU time: trace / eager")
    for n, reps in ((128, 3 if quick else 7), (4096, 1)):
        if (quick and n > 128) or n not in sizes:
            continue
        got = run("speed", name, n, reps)
        if "error" in got:
            print(n, got["error"])
            continue
        print(f"{got['n']} | {got['trace']:.3f} | {got['eager']:.3f} | "
              f"{got['trace'] / got['eager']:.2f}x | {got['sdpa']:.3f} | "
              f"{got['trace_cpu'] / got['eager_cpu']:.2f}x", flush=True)  # fmt: skip


def report_rest(name: str, quick: bool) -> None:
    if not quick:
        mem = {side: run("memory", name, 4096, side) for side in ("trace", "eager")}
        if all("error" not in m for m in mem.values()):
            t, e = mem["trace"], mem["eager"]
            gib = 2**30
            print(f"peak RSS at 4,096 tokens: trace {t['rss'] / gib:.2f} GiB (lean {t['lean']}, "
                  f"its tensors {t['trace_bytes'] / 2**20:.0f} MiB), eager {e['rss'] / gib:.2f} "
                  f"GiB, loaded alone {e['rss_loaded'] / gib:.2f} GiB")  # fmt: skip
        else:
            print("memory:", {k: v.get("error") for k, v in mem.items()})
    for n in (128,) if quick else (128, 4096):
        got = run("oracle", name, n)
        if "error" in got:
            print(f"oracle at {n} tokens: {got['error']}")
            continue
        print(f"oracle at {got['n']} tokens (lean {got['lean']}, layers {got['layers']}): "
              f"largest |trace - eager| weights {got['weights']:.1e}, "
              f"logits {got['logits']:.1e}")  # fmt: skip
    atlas = run("atlas", name)
    if "error" in atlas:
        print("atlas:", atlas["error"])
        return
    print(f"atlas: {atlas['heads']} heads, {atlas['texts']} texts (probes '{atlas['lang']}' + 30 "
          f"words said twice), {atlas['seconds']:.1f} s")  # fmt: skip
    for score in ("first_token", "previous_token", "induction", "duplicate_token"):
        tops = ", ".join(f"L{a}H{b} {s}" for a, b, s in atlas[score])
        print(f"  {score}: {tops} ({atlas[f'{score}_over_0.5']} heads >= 0.5)")
    tops = ", ".join(f"L{a}H{b} {s}" for a, b, s in atlas["induction_repeated"])
    print(f"  induction on the 30 words said twice alone: {tops}")
    print(f"  next token after the animal sentence said twice: {atlas['next_after_animal_twice']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=sorted(CHILDREN))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("load", "speed"), help="only that part's rows")
    parser.add_argument("--sizes", default="128,4096", help="the speed rows' token counts")
    args, rest = parser.parse_known_args()
    if args.child:
        fn = CHILDREN[args.child]
        params = [int(a) if a.isdigit() else a for a in rest]
        if args.child == "load":
            params[1] = params[1] == "first"
        print(json.dumps(fn(*params)))
        return
    import platform

    print(f"attnviz LLM bench: {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, one torch thread a process; load average "
          f"{os.getloadavg()[0]:.1f} at the start")  # fmt: skip
    for name in args.models.split(","):
        report(name, args.quick, args.only, tuple(int(n) for n in args.sizes.split(",")))


if __name__ == "__main__":
    main()
