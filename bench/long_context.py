"""Long inputs: trace_model against a plain SDPA forward of the same model, n = 512 ... 8,192.

Run: .venv/bin/python bench/long_context.py [--sizes 512,1024,...]  (prints a table; no asserts)

The model is a 4-layer, 8-head (2 K/V heads), d_model 256 Llama, randomly
initialised from LlamaConfig (max_position_embeddings 16,384), saved with the bundled tokenizer
(its limit raised to 16,384) to a temporary folder and loaded from there as a user would. Each
side runs in a fresh process with one torch thread, so that its peak RSS is its own:
- sdpa: AutoModelForCausalLM with attn_implementation="sdpa", one forward under inference_mode
  with logits for the last position only (what trace_model computes too);
- trace: attnviz.load_model + trace_model (lean past the full-trace byte limit), then, in the
  same process after its peak RSS is read, the time to draw the overview mosaic, one head's
  image, a 512 x 512 window of Head detail and the head statistics (the overview's one pass over
  bands makes the statistics too, memoized: "stats" is what they cost after the overview).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (512, 1024, 2048, 4096, 8192)
SENTENCE = "the cat sat on a mat and then it ran to see one big red dog in my old house"
WORDS = SENTENCE.split()


def text_of(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n + 8))  # cut to n by max_length


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def build(folder: str, intermediate_size: int = 1024) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from attnviz.engine.hooked import resolve

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve(None)[0])
    tokenizer.model_max_length = 16_384
    config = LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=256, intermediate_size=intermediate_size,
        num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
        max_position_embeddings=16_384,
    )  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def child_sdpa(folder: str, n: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    ids = tokenizer(text_of(n), truncation=True, max_length=n, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        model(input_ids=ids[:, :16], logits_to_keep=1)  # one-time set-up, as on the trace side
    t0 = time.perf_counter()
    with torch.inference_mode():
        model(input_ids=ids, logits_to_keep=1)
    return {"seconds": time.perf_counter() - t0, "rss": peak_rss(), "n": ids.shape[1]}


def child_trace(folder: str, n: int) -> dict:
    import torch

    torch.set_num_threads(1)
    from attnviz.engine.hooked import load_model, trace_model

    model = load_model(folder, device="cpu")
    trace_model(model, text_of(16), max_length=16)  # one-time set-up, as on the SDPA side
    t0 = time.perf_counter()
    trace = trace_model(model, text_of(n), max_length=n)
    out = {"seconds": time.perf_counter() - t0, "rss": peak_rss(), "n": len(trace.tokens)}
    from attnviz.measures.stats import head_stats  # the views' imports after the RSS is read
    from attnviz.views import panels
    from attnviz.views.selection import Selection

    out |= {"trace_bytes": trace.nbytes(), "lean": trace.meta.get("lean", False)}
    mid = max(0, len(trace.tokens) // 2 - 256)
    views = {
        "overview": lambda: panels.overview_figure(trace, Selection()),
        "head_image": lambda: panels.head_image_figure(trace, Selection(layer=2, head=3)),
        "window": lambda: panels.detail_figures(trace, Selection(window=(mid, mid + 512))),
        "stats": lambda: head_stats(trace),
    }
    for name, draw in views.items():
        t0 = time.perf_counter()
        draw()
        out[name] = time.perf_counter() - t0
    out["rss_after_views"] = peak_rss()
    return out


def child(script: str, args: list[str], env: dict[str, str]) -> dict:
    """Run `script args` in a fresh process; the JSON its last line prints, or {"error": ...}."""
    cmd = [sys.executable, script, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1][:300] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_child(side: str, folder: str, n: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return child(__file__, ["--child", side, "--folder", folder, "--n", str(n)], env)


def both_sides(sizes: str, run) -> Iterator[tuple[dict, dict]]:
    """For each n of `sizes` ("512,1024"): (the SDPA side's result, the trace's), each from
    run(side, n) in a fresh process; an n where either side failed is printed and skipped."""
    for n in (int(s) for s in sizes.split(",")):
        base, got = run("sdpa", n), run("trace", n)
        if "error" in base or "error" in got:
            print(f"{n} | sdpa: {base.get('error', 'ok')} | trace: {got.get('error', 'ok')}")
            continue
        yield base, got


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("sdpa", "trace"))
    parser.add_argument("--folder")
    parser.add_argument("--n", type=int)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        fn = child_sdpa if args.child == "sdpa" else child_trace
        print(json.dumps(fn(args.folder, args.n)))
        return
    gb = 1e9
    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        print("4-layer, 8-head (2 K/V), d_model 256 Llama; one torch thread; each side a fresh")
        print("process. time: s; RSS: process peak, GB; views: s after the trace.")
        head = ("n", "trace s", "SDPA s", "time ×", "trace RSS", "SDPA RSS", "RSS ×",
                "trace MiB", "overview", "head img", "window", "stats")  # fmt: skip
        print(" | ".join(head))
        for base, got in both_sides(args.sizes, lambda side, n: run_child(side, folder, n)):
            row = (
                f"{got['n']}", f"{got['seconds']:.2f}", f"{base['seconds']:.2f}",
                f"{got['seconds'] / base['seconds']:.2f}", f"{got['rss'] / gb:.2f}",
                f"{base['rss'] / gb:.2f}", f"{got['rss'] / base['rss']:.2f}",
                f"{got['trace_bytes'] / 2**20:.0f}", f"{got['overview']:.2f}",
                f"{got['head_image']:.2f}", f"{got['window']:.2f}", f"{got['stats']:.2f}",
            )  # fmt: skip
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
