"""trace_model against a plain Hugging Face eager forward of the same model.

Run: .venv/bin/python bench/hooked.py  (prints times, ratios and trace memory; no assertions)
Both sides start from the same text and tokenize it; the baseline is the same weights loaded with
attn_implementation="eager", called with output_attentions=True under inference_mode. The trace
side also keeps q, k, v, scores, z, the W_O output, the mask and the hidden states.
First the bundled all-MiniLM-L6-v2 (an encoder); then a decoder: a Llama of the same size
(6 layers, d_model 384, 12 query heads sharing 4 K/V heads, RoPE), randomly initialised from its
config (nothing is downloaded; speed does not depend on the weights' values), with the bundled
tokenizer, traced with its next-token logits (both sides compute logits for the last position only:
the trace keeps nothing else).
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer, LlamaConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz.engine.hooked import load_model, resolve, trace_each, trace_model  # noqa: E402
from attnviz.engine.trace import Trace  # noqa: E402

THREADS = 1
SIZES = (16, 128, 512)
SENTENCE = "the cat sat on a mat and then it ran to see one big red dog in my old house"
WORDS = SENTENCE.split()  # each one wordpiece


def text_of(n: int, tokenizer) -> str:
    """Single-token words that tokenize to exactly n tokens, [CLS] and [SEP] included."""
    text = " ".join(WORDS[i % len(WORDS)] for i in range(n - 2))
    assert len(tokenizer(text)["input_ids"]) == n
    return text


def paired_ms(a, b, reps: int, warmup: int = 2) -> dict[str, float]:
    """Times of a and b run interleaved (a b, b a, ...) so that load from other processes on a
    shared machine hits both alike: medians in ms, the median of per-rep ratios a/b, and the ratio
    of the best (least disturbed) times."""
    for _ in range(warmup):
        a()
        b()
    times_a, times_b = [], []
    for rep in range(reps):
        for fn, times in ((a, times_a), (b, times_b))[:: 1 if rep % 2 == 0 else -1]:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    med = statistics.median
    return {
        "a": med(times_a) * 1e3,
        "b": med(times_b) * 1e3,
        "ratio": med([x / y for x, y in zip(times_a, times_b, strict=True)]),
        "best": min(times_a) / min(times_b),
    }


def w_o_ms(loaded, trace: Trace, reps: int) -> float:
    """What recomputing the attention output (concat(z) @ W_O^T + b, all layers) costs alone."""
    zs = [layer.z.transpose(0, 1).reshape(layer.z.shape[1], -1) for layer in trace.layers]
    dense = [layer.attention.output.dense for layer in loaded.layers]

    def run() -> None:
        with torch.inference_mode():
            for z, d in zip(zs, dense, strict=True):
                torch.addmm(d.bias, z, d.weight.t())  # [n, d_model]

    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def trace_bytes(trace: Trace) -> tuple[int, int]:
    """(sum of tensor bytes over the trace's fields, bytes of the distinct storages they hold)."""
    tensors = [trace.hidden, trace.embedding]
    for layer in trace.layers:
        fields = (layer.q, layer.k, layer.v, layer.scores, layer.weights, layer.z, layer.output)
        tensors += [*fields, layer.mask, layer.x]
    tensors = [t for t in tensors if t is not None]
    unique = {id(t): t for t in tensors}.values()  # the mask is one tensor shared by all layers
    logical = sum(t.numel() * t.element_size() for t in unique)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return logical, sum(storages.values())


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    torch.set_num_threads(THREADS)
    loaded = load_model()
    tok = loaded.tokenizer
    eager = AutoModel.from_pretrained(resolve(None)[0], attn_implementation="eager").eval()

    def plain(text: str):
        with torch.inference_mode():
            return eager(**tok(text, return_tensors="pt"), output_attentions=True)

    # Memory first, while the process peak is still low.
    text = text_of(512, tok)
    gc.collect()
    before = peak_rss_mb()
    trace = trace_model(loaded, text)
    rss_delta = peak_rss_mb() - before
    logical, held = trace_bytes(trace)
    del trace
    gc.collect()
    attn_bytes = sum(a.numel() * a.element_size() for a in plain(text).attentions)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"all-MiniLM-L6-v2 (6 layers, 12 heads, d_model 384), CPU, {THREADS} torch thread, "
        f"load average {load}\nbaseline: tokenize + eager forward with output_attentions=True; "
        "medians of interleaved reps after warm-up"
    )
    head = f"{'n':>5} {'trace ms':>9} {'eager ms':>9} {'ratio':>6} {'best/best':>9} {'W_O ms':>7}"
    print(head)
    for n in SIZES:
        text = text_of(n, tok)
        reps = 40 if n < 512 else 16
        got = paired_ms(
            lambda text=text: trace_model(loaded, text), lambda text=text: plain(text), reps
        )
        w_o = w_o_ms(loaded, trace_model(loaded, text), reps)
        print(
            f"{n:>5} {got['a']:>9.2f} {got['b']:>9.2f} {got['ratio']:>6.2f} {got['best']:>9.2f} "
            f"{w_o:>7.2f}"
        )
    print(
        "ratio: median of per-rep (trace / eager); best/best: fastest trace / fastest eager;\n"
        "W_O ms: the part of trace time spent recomputing each layer's output from z (exact)"
    )
    mb = 1024**2
    print(f"\nmemory of one trace at n=512: {logical / mb:.1f} MiB in its tensors")
    print(f"  storages those tensors keep alive: {held / mb:.1f} MiB")
    print(f"  peak RSS rise during the first trace_model call: {rss_delta:.1f} MiB")
    print(f"  (eager output_attentions alone returns {attn_bytes / mb:.1f} MiB of weights)")


def decoder() -> None:
    folder = tempfile.mkdtemp(prefix="bench-llama-")
    config = LlamaConfig(
        vocab_size=30522,
        hidden_size=384,
        intermediate_size=1536,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve(None)[0]).save_pretrained(folder)
    loaded = load_model(folder, device="cpu")
    tok = loaded.call_tokenizer
    eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()

    def plain(text: str):
        enc = tok(text, return_tensors="pt")
        with torch.inference_mode():
            return eager(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                output_attentions=True,
                logits_to_keep=1,  # as the trace: the next-token logits only
            )

    print(
        f"\ndecoder: Llama, 6 layers, 12 query heads / 4 K/V heads (GQA), d_model 384, RoPE, "
        f"random weights, CPU, {THREADS} torch thread\nbaseline: tokenize + eager causal-LM "
        "forward with output_attentions=True and the last position's logits (as the trace)"
    )
    print(f"{'n':>5} {'trace ms':>9} {'eager ms':>9} {'ratio':>6} {'best/best':>9}")
    for n in SIZES:
        text = text_of(n, tok)
        reps = 40 if n < 512 else 16
        got = paired_ms(
            lambda text=text: trace_model(loaded, text), lambda text=text: plain(text), reps
        )
        print(f"{n:>5} {got['a']:>9.2f} {got['b']:>9.2f} {got['ratio']:>6.2f} {got['best']:>9.2f}")


def each(batch: int = 8, n: int = 32) -> None:
    """A class server's case: `batch` different sentences waiting at once, traced as one padded
    forward (trace_each, each trace cut to its own tokens) against one trace_model call each."""
    loaded = load_model()
    tok = loaded.tokenizer
    words = WORDS * 4
    texts = [" ".join(words[i : i + n - 2]) for i in range(batch)]  # n tokens each, all different
    assert all(len(tok(t)["input_ids"]) == n for t in texts)
    print(f"\n{batch} different {n}-token sentences at once (MiniLM): one trace_each call against "
          f"{batch} trace_model calls")  # fmt: skip
    print(f"{'threads':>7} {'each ms':>8} {'one by one ms':>13} {'ratio':>6} {'best/best':>9}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        got = paired_ms(
            lambda: trace_each(loaded, texts), lambda: [trace_model(loaded, t) for t in texts], 20
        )
        a, b, ratio, best = got["a"], got["b"], got["ratio"], got["best"]
        print(f"{threads:>7} {a:>8.1f} {b:>13.1f} {ratio:>6.2f} {best:>9.2f}")
    torch.set_num_threads(THREADS)


if __name__ == "__main__":
    main()
    decoder()
    each()
