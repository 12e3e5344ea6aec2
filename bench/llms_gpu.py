"""bench/llms.py on a GPU: the registry LLMs' trace time against a plain eager forward at 128 and
4,096 tokens, peak GPU memory, the oracle check and (real weights only) the atlas's raw scores,
with the card's name. One process, under 5 minutes on an H100/H200.

Here (with the models converted):   python bench/llms_gpu.py --export out/llm-shapes
On the GPU machine:                 python bench/llms_gpu.py --shapes out/llm-shapes
A smoke run without a GPU:          python bench/llms_gpu.py --device cpu --sizes 16,64 --reps 1
Where a trace's time goes:          ... --models gemma-3-270m --sizes 4096 --profile 4096

A lent GPU machine reaches nothing outside it and takes only small files along, so `--export`
writes each model's config.json and tokenizer (no weights; 37 MiB in all) and the GPU run builds
the model from them with seeded random weights (float32, saved and loaded through load_model as a
folder), unless ATTNVIZ_HOME there holds the converted caches, whose real weights it then uses.
Speed and memory do not depend on the weights' values; the atlas does, so it is printed only for
real weights. Each side waits for the device (torch.cuda.synchronize) before its clock stops.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("ATTNVIZ_MAX_TRACE_BYTES", str(16 * 2**30))
os.environ.setdefault("ATTNVIZ_MAX_MODEL_WORK", str(10**15))

from llms import ANIMAL, MODELS, child_atlas, long_text, plain_forward  # noqa: E402

from attnviz.engine.hooked import gguf_cache, load_model, trace_model  # noqa: E402
from attnviz.engine.hooked.intercept import IMPL  # noqa: E402

SHAPE_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def export(out: Path) -> None:
    """Each model's config and tokenizer from its converted cache, for a machine without them."""
    for name in MODELS:
        folder = gguf_cache.converted(gguf_cache.source(name))
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        for file in SHAPE_FILES:
            if (folder / file).exists():
                shutil.copy(folder / file, target / file)
        print(name, "->", target, sum(p.stat().st_size for p in target.iterdir()) // 2**20, "MiB")


def random_folder(shapes: Path, name: str, work: Path) -> Path:
    """A folder with the model's config and tokenizer and seeded random float32 weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = work / name
    shutil.copytree(shapes / name, folder)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    return folder


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fns: dict, reps: int) -> dict[str, float]:
    """Median seconds of each function, run in turns (the order rotating) after a warm-up."""
    for fn in fns.values():
        fn()
        sync()
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for rep in range(reps):
        for k in names[rep % len(names) :] + names[: rep % len(names)]:
            sync()
            t0 = time.perf_counter()
            inside = fns[k]()  # a plain forward times itself (not its implementation switch)
            sync()
            times[k].append(inside[0] if isinstance(inside, tuple) else time.perf_counter() - t0)
    return {k: statistics.median(t) for k, t in times.items()}


def bench(model, n: int, reps: int) -> None:
    hf = model.model
    text = long_text(n) if n > 64 else ANIMAL
    ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
    ids = ids["input_ids"].to(model.device)

    sides = {
        "trace": lambda: trace_model(model, text, max_length=n),
        "eager": plain_forward(hf, ids, "eager", sync),
        "sdpa": plain_forward(hf, ids, "sdpa", sync),
    }
    t = timed(sides, reps)
    peaks = dict.fromkeys(sides, 0.0)
    for side, fn in sides.items() if ids.is_cuda else ():
        sync()
        torch.cuda.reset_peak_memory_stats()
        kept = fn()  # a trace stays alive until its peak is read
        sync()
        peaks[side] = torch.cuda.max_memory_allocated() / 2**30
        del kept
    print(f"{ids.shape[1]} | {t['trace'] * 1e3:.1f} | {t['eager'] * 1e3:.1f} | "
          f"{t['trace'] / t['eager']:.2f}x | {t['sdpa'] * 1e3:.1f} | peak GPU GiB trace "
          f"{peaks['trace']:.2f}, eager {peaks['eager']:.2f}, SDPA {peaks['sdpa']:.2f}",
          flush=True)  # fmt: skip


def oracle(model, n: int) -> None:
    """Largest |trace - eager| of every layer's weights (n = 128) and of the logits."""
    hf = model.model
    text = long_text(n) if n > 64 else ANIMAL
    trace = trace_model(model, text, max_length=n)
    ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
    hf.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            ref = hf(ids["input_ids"].to(model.device), output_attentions=True)
    finally:
        hf.set_attn_implementation(IMPL)
    worst = max(float((layer.weights - ref.attentions[i][0].float().cpu()).abs().max())
                for i, layer in enumerate(trace.layers))  # fmt: skip
    logits = float((trace.next_logits - ref.logits[0, -1].float().cpu()).abs().max())
    print(f"oracle at {len(trace.tokens)} tokens, every layer: weights {worst:.1e}, logits "
          f"{logits:.1e}")  # fmt: skip


def profile(model, n: int, rows: int = 14) -> None:
    """Where one trace's time goes at n tokens, against one eager forward: torch.profiler's
    operators by their own GPU time and by their own CPU time (a trace bound by Python and
    launches shows CPU time far above its GPU time)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    hf = model.model
    text = long_text(n)
    ids = model.call_tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
    ids = ids["input_ids"].to(model.device)
    sides = {"trace": lambda: trace_model(model, text, max_length=n),
             "eager": plain_forward(hf, ids, "eager", sync)}  # fmt: skip
    for side, fn in sides.items():
        fn()  # warm
        sync()
        with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            sync()
        events = prof.key_averages()
        gpu = sum(e.self_device_time_total for e in events) / 1e3
        cpu = sum(e.self_cpu_time_total for e in events) / 1e3
        print(f"\n### {side} at {n} tokens: GPU {gpu:.1f} ms, CPU {cpu:.1f} ms (self totals)")
        print(
            events.table(sort_by="self_device_time_total", row_limit=rows, max_name_column_width=60)
        )
        print(
            events.table(
                sort_by="self_cpu_time_total", row_limit=rows // 2, max_name_column_width=60
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--export", type=Path)
    parser.add_argument("--shapes", type=Path, default=ROOT / "out" / "llm-shapes")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--sizes", default="128,4096")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profile", type=int, default=0, help="also profile a trace at N tokens")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    if args.export:
        export(args.export)
        return
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this is the GPU variant of bench/llms.py")
    import transformers

    card = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU (a smoke run)"
    print(f"attnviz LLM bench on {card} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"transformers {transformers.__version__}), float32")  # fmt: skip
    sizes = [int(n) for n in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            try:
                where, real = str(gguf_cache.converted(gguf_cache.source(name))), True
            except ValueError:
                where, real = str(random_folder(args.shapes, name, Path(tmp))), False
            t0 = time.perf_counter()
            model = load_model(where, device=args.device)
            sync()
            print(f"\n## {name} ({'real' if real else 'seeded random'} weights): loaded in "
                  f"{time.perf_counter() - t0:.2f} s")  # fmt: skip
            print("n | trace ms | eager ms | trace / eager | SDPA ms | memory")
            for n in sizes:
                bench(model, n, args.reps if n <= 512 else max(1, args.reps // 4))
            oracle(model, sizes[0])
            if args.profile:
                profile(model, args.profile)
            if real:
                os.environ["BENCH_DEVICE"] = args.device
                print("atlas:", json.dumps(child_atlas(name)))
            del model
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
