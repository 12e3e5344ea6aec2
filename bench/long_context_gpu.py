"""Long inputs on a GPU: a lean trace of a 1B- or 8B-shaped Llama at up to 32,768 tokens, next to
a plain SDPA forward of the same model, each in a fresh process.

Run (on a machine with a CUDA GPU): python bench/long_context_gpu.py --model 1b --sizes 4096,32768
(prints a table; no asserts). ATTNVIZ_TEST_TOKENIZER may name a folder with a tokenizer's files
where the bundled model is not installed. `--model tiny` with BENCH_DEVICE=cpu checks the script
itself on a machine without a GPU (memory figures are then 0).

The models are randomly initialised on the GPU in bfloat16 from LlamaConfig with the shapes of
Llama 3.2 1B (16 layers, d_model 2,048, 32 heads, 8 K/V heads, d_head 64) and Llama 3.1 8B (32
layers, d_model 4,096, 32 heads, 8 K/V heads, d_head 128), with the bundled tokenizer's vocabulary
(30,522 words, so a little fewer parameters than the real ones). Each side:
- sdpa: attn_implementation="sdpa", one forward under inference_mode, logits of the last position
  only; time after torch.cuda.synchronize; peak = torch.cuda.max_memory_allocated();
- trace: attnviz.load_model(model object) + trace_model (a lean trace: q, k, v, z, the block
  outputs and the log-sum-exp stay on the GPU in bfloat16); the same timing and peak; then the
  time to read one head's pooled image and a 512 x 512 window of weights, and a check: one head's
  last 64 rows recomputed from the trace against softmax(q·kᵀ·scale + causal mask) computed
  directly from the stored q and k (max abs difference; rows sum to 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from long_context import both_sides, child  # noqa: E402

SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8),
    "tiny": dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2),
}  # fmt: skip
DEVICE = os.environ.get("BENCH_DEVICE", "cuda")
SENTENCE = "the cat sat on a mat and then it ran to see one big red dog in my old house"
WORDS = SENTENCE.split(" ")
GiB = 2**30


def text_of(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n + 8))  # cut to n by max_length


def build(shape: str, impl: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from attnviz.engine.hooked import resolve

    folder = os.environ.get("ATTNVIZ_TEST_TOKENIZER") or resolve(None)[0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.model_max_length = 131_072
    config = LlamaConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=131_072,
                         rope_theta=500_000.0, **SHAPES[shape])  # fmt: skip
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation=impl
        )
    return model.eval().requires_grad_(False), tokenizer


def allocated() -> int:
    import torch

    return torch.cuda.memory_allocated() if DEVICE == "cuda" else 0


def timed(fn, repeats: int = 1):
    """fn's result, its best time of `repeats` runs and the highest peak of memory among them."""
    import torch

    gpu, best, peak = DEVICE == "cuda", float("inf"), 0
    for _ in range(repeats):
        out = None  # the last run's result freed before the next one
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = fn()
        if gpu:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        peak = max(peak, torch.cuda.max_memory_allocated() if gpu else 0)
    return out, best, peak


def child_sdpa(shape: str, n: int) -> dict:
    import torch

    model, tokenizer = build(shape, "sdpa")
    weights = allocated()
    ids = tokenizer(text_of(n), truncation=True, max_length=n, return_tensors="pt")["input_ids"]
    ids = ids.to(DEVICE)
    with torch.inference_mode():
        model(input_ids=ids[:, :16], logits_to_keep=1)  # one-time set-up, as on the trace side
        _, seconds, peak = timed(lambda: model(input_ids=ids, logits_to_keep=1), 3)
    return {"seconds": seconds, "peak": peak, "weights": weights, "n": ids.shape[1]}


def child_trace(shape: str, n: int) -> dict:
    import torch

    from attnviz.engine.hooked import load_model, trace_model
    from attnviz.engine.lean import pooled_head

    model, tokenizer = build(shape, "sdpa")
    loaded = load_model(model, tokenizer=tokenizer)
    weights = allocated()
    trace_model(loaded, text_of(16), max_length=16)  # one-time set-up, as on the SDPA side
    trace, seconds, peak = timed(lambda: trace_model(loaded, text_of(n), max_length=n), 3)
    n_tok = len(trace.tokens)
    held = allocated() - weights
    out = {"seconds": seconds, "peak": peak, "weights": weights, "n": n_tok, "held": held}
    out["lean"] = bool(trace.meta.get("lean"))
    layer = trace.layers[len(trace.layers) // 2]
    h = min(5, layer.n_heads - 1)
    _, out["head_image"], _ = timed(lambda: pooled_head(layer, h, 300, 300))
    mid = max(0, n_tok // 2 - 256)
    window = slice(mid, mid + 512)
    _, out["window"], _ = timed(lambda: layer.block("weights", h, window, window))
    # the last 64 rows of head h over every key, against a direct softmax of the stored q and k
    rows = slice(n_tok - 64, n_tok)
    got = layer.block("weights", h, rows, None)  # [64, n] CPU float32
    q = layer.stored("q")[h, rows].float()  # [64, d]
    group = layer.stored("q").shape[0] // layer.stored("k").shape[0]
    k = layer.stored("k")[h // group].float()  # [n, d]
    logits = q @ k.T * layer.scale  # [64, n]
    pos = torch.arange(n_tok, device=q.device)
    logits.masked_fill_(pos.view(1, -1) > pos[rows].view(-1, 1), float("-inf"))
    want = torch.softmax(logits, -1).cpu()
    out["max_diff"] = float((got - want).abs().max())
    out["row_sum_err"] = float((got.sum(-1) - 1).abs().max())
    return out


def run_child(side: str, shape: str, n: int) -> dict:
    # every trace lean (what is measured), and limits a GPU server would set
    env = dict(os.environ, ATTNVIZ_FULL_TRACE_BYTES="1", ATTNVIZ_MAX_TOKENS="131072",
               ATTNVIZ_MAX_TEXT_CHARS="1000000",
               ATTNVIZ_MAX_TRACE_BYTES=str(120 * GiB),
               ATTNVIZ_MAX_MODEL_BYTES=str(64 * GiB), ATTNVIZ_MAX_MODEL_WORK=str(10**17),
               ATTNVIZ_MAX_WORK=str(10**17))  # fmt: skip
    return child(__file__, ["--child", side, "--model", shape, "--n", str(n)], env)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("sdpa", "trace"))
    parser.add_argument("--model", choices=tuple(SHAPES), default="1b")
    parser.add_argument("--n", type=int)
    parser.add_argument("--sizes", default="4096,8192,16384,32768")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        fn = child_sdpa if args.child == "sdpa" else child_trace
        print(json.dumps(fn(args.model, args.n)))
        return
    import torch

    name = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    print(f"{args.model}-shaped Llama, bfloat16, random; {name}; each side")
    print("a fresh process. time: s, best of 3; peak: torch.cuda.max_memory_allocated, GiB")
    head = ("n", "trace s", "SDPA s", "time ×", "trace peak", "SDPA peak", "peak ×", "weights",
            "trace held", "head img s", "window s", "max |Δw|", "row sum err")  # fmt: skip
    print(" | ".join(head), flush=True)
    for base, got in both_sides(args.sizes, lambda side, n: run_child(side, args.model, n)):
        row = (
            f"{got['n']}", f"{got['seconds']:.2f}", f"{base['seconds']:.2f}",
            f"{got['seconds'] / base['seconds']:.2f}", f"{got['peak'] / GiB:.1f}",
            f"{base['peak'] / GiB:.1f}", f"{got['peak'] / max(1, base['peak']):.2f}",
            f"{got['weights'] / GiB:.1f}", f"{got['held'] / GiB:.1f}",
            f"{got['head_image']:.2f}", f"{got['window']:.3f}", f"{got['max_diff']:.1e}",
            f"{got['row_sum_err']:.1e}",
        )  # fmt: skip
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
