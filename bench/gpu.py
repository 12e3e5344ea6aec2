"""trace_model on a GPU against an eager forward with output_attentions, both leaving their tensors
on the device; then what the overview copies to the CPU, and what copying every tensor would cost.

Run:  python bench/gpu.py                  (CUDA: a BERT-large-shaped model, n = 128 and 512)
      python bench/gpu.py --device cpu --layers 2 --sizes 16,64   (a smoke run without a GPU)

The model is a BertModel with 24 layers, 16 heads, d_model 1024 (BERT-large's shape), randomly
initialised from its config (speed does not depend on the weights' values; nothing is downloaded),
with the bundled model's tokenizer, or the tokenizer files in --tokenizer. Both sides start from
the text: they tokenize, run, and wait for the device (torch.cuda.synchronize) before the clock
stops. Prints medians of interleaved reps, their ratio, and the largest difference between the
trace's weights and the eager model's attentions (an oracle check on the device).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, BertConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hooked import text_of  # noqa: E402

# One trace of this model at n = 512 holds ~0.9 GiB of tensors, over a classroom server's default
# ATTNVIZ_MAX_TRACE_BYTES (512 MiB); a GPU server for such models raises it the same way.
os.environ.setdefault("ATTNVIZ_MAX_TRACE_BYTES", str(8 * 2**30))

from attnviz.engine.hooked import load_model, resolve, trace_model  # noqa: E402
from attnviz.engine.trace import pooled_weights, to_view  # noqa: E402


def timed(fns: dict, reps: int, sync) -> dict[str, float]:
    """Median ms of each function, run in turns (the order rotating) after two warm-ups."""
    for _ in range(2):
        for fn in fns.values():
            fn()
            sync()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            sync()
            t0 = time.perf_counter()
            fns[name]()
            sync()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def every_tensor_to_cpu(trace) -> None:
    """What a trace cost before views copied only what they draw: every field, every layer."""
    for layer in trace.layers:
        for name in ("q", "k", "v", "scores", "mask", "weights", "z", "output"):
            to_view(layer.stored(name))


def overview_copies(trace, head: int = 0) -> None:
    """What the overview copies to the CPU: the pooled mosaic and its chosen head."""
    n = len(trace.tokens)
    pooled_weights(trace, 48 if n <= 64 else 96, 48 if n <= 64 else 96)
    trace.layers[-1].head("weights", head)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--sizes", default="128,512")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--dtype", default="float32", help="float32 or bfloat16 (both sides)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--tokenizer", default=None, help="a folder with the tokenizer's files")
    args = ap.parse_args()
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    folder = tempfile.mkdtemp(prefix="bench-gpu-")
    config = BertConfig(
        hidden_size=args.d_model,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.d_model,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(args.tokenizer or resolve(None)[0]).save_pretrained(folder)
    loaded = load_model(folder, device=str(dev), dtype=args.dtype)
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=dtype)
    eager = eager.to(dev).eval()
    tok = loaded.call_tokenizer

    def plain(text: str):
        enc = {k: v.to(dev) for k, v in tok(text, return_tensors="pt").items()}
        with torch.inference_mode():
            return eager(**enc, output_attentions=True)

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(
        f"BertModel, {args.layers} layers, {args.heads} heads, d_model {args.d_model}, random "
        f"weights, {args.dtype}, on {name} (torch {torch.__version__})\n"
        "eager: tokenize + forward with output_attentions=True, attentions left on the device; "
        "trace: trace_model, every tensor left on the device; medians of interleaved reps"
    )
    print(
        f"{'n':>5} {'eager ms':>9} {'trace ms':>9} {'ratio':>6} {'+overview ms':>13} "
        f"{'ratio':>6} {'+every tensor ms':>17} {'ratio':>6} {'max |dw|':>9}"
    )
    for n in (int(x) for x in args.sizes.split(",")):
        text = text_of(n, tok)
        trace, ref = trace_model(loaded, text), plain(text)
        diff = max(
            # what a view reads (CPU float32; recomputed on a lean trace) against eager's
            float((layer.weights - att[0].float().cpu()).abs().max())
            for layer, att in zip(trace.layers, ref.attentions, strict=True)
        )
        del trace, ref
        got = timed(
            {
                "eager": lambda text=text: plain(text),
                "trace": lambda text=text: trace_model(loaded, text),
                "overview": lambda text=text: overview_copies(trace_model(loaded, text)),
                "all": lambda text=text: every_tensor_to_cpu(trace_model(loaded, text)),
            },
            args.reps if n < 512 else max(args.reps // 2, 5),
            sync,
        )
        e = got["eager"]
        print(
            f"{n:>5} {e:>9.2f} {got['trace']:>9.2f} {got['trace'] / e:>6.2f} "
            f"{got['overview']:>13.2f} {got['overview'] / e:>6.2f} {got['all']:>17.2f} "
            f"{got['all'] / e:>6.2f} {diff:>9.1e}"
        )
    print(
        "+overview: the trace, then the overview's copies to the CPU (every head pooled to "
        "48x48 or 96x96, and one head's weights);\n+every tensor: the trace, then every field "
        "of every layer copied to the CPU as float32 (what a trace cost before)"
    )


if __name__ == "__main__":
    main()
