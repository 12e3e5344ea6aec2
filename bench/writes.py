"""What heads write: the figures of the README's section on moved, head_logits and logit_lens.

Run: .venv/bin/python bench/writes.py              (both parts below, the bundled models)
     .venv/bin/python bench/writes.py --model NAME [--text T] [--token " tired"]   (a decoder)
Prints tables; no assertions. The numbers are exact functions of the weights (no timing in them
except the seconds printed beside each call).

1. The Kobayashi comparison on the bundled encoder (all-MiniLM-L6-v2): per layer, the share of the
   raw attention weights and of `moved` (weights * ||W_O^h v_j||) that goes to [CLS]/[SEP], to
   punctuation, and to both, averaged over heads and over the atlas's English probe sentences and
   passage (attnviz/assets/probes/en.toml; written for attnviz).
2. A decoder's heads that push its top next token (direct logit attribution): the strongest heads
   with the tokens each promotes, the rest of the final state (embeddings, MLPs, biases), the sum
   against the model's own logit, and the logit lens. Default: the bundled character decoder
   after a repeated sentence (it should say 'e', completing "street" the second time). With
   --model, any decoder attnviz.load_model reads (SmolLM2 from its GGUF package once that loads),
   default text the animal sentence said twice, cut before " tired".
3. What it costs: recording the per-key norms against the whole trace (MiniLM at 128 and 512
   tokens; medians of 5), their bytes against the trace's; and a 4,096-token lean trace of a tiny
   random Llama grouped into words: the overview's pooled maps of the words against those of the
   pieces (the same pass over bands), and the largest tensor the grouped trace holds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import (  # noqa: E402
    grouped,
    head_logits,
    load_model,
    logit_lens,
    special_share,
    trace_model,
)
from attnviz.engine.hooked.readout import w_o_matrix  # noqa: E402
from attnviz.engine.trace import pooled_weights  # noqa: E402
from attnviz.engine.writes import key_norms  # noqa: E402
from attnviz.measures.roles import probe_texts  # noqa: E402

CHAR = "attnviz-char-zh-en"
CHAR_TEXT = (
    "The animal didn't cross the street because it was too tired. The animal didn't cross the str"
)
ANIMAL = "The animal didn't cross the street because it was too"
REPEATED = f"{ANIMAL} tired. {ANIMAL}"


def kobayashi() -> None:
    model = load_model(device="cpu")
    texts = probe_texts("en")
    texts = texts["natural"] + texts["passage"]
    t0 = time.perf_counter()
    traces = [trace_model(model, text) for text in texts]
    tables = [special_share(trace) for trace in traces]
    seconds = time.perf_counter() - t0
    per_layer = pd.concat(tables).groupby("layer").mean().drop(columns="head")
    per_layer.loc["all"] = pd.concat(tables).drop(columns=["layer", "head"]).mean()
    n = sum(len(trace.tokens) for trace in traces)
    print(f"\n## Kobayashi comparison: {model.name}, {len(texts)} texts ({n} tokens), "
          f"trace + special_share {seconds:.2f} s")  # fmt: skip
    print("share of each head's attention (weights) and of what it moves (moved), mean over")
    print("heads and texts; special = [CLS] + [SEP], punct = tokens of punctuation alone\n")
    print(per_layer.round(3).to_string())


def decoder(name: str, text: str, token: str | None, top: int) -> None:
    model = load_model(name, device="cpu")
    trace = trace_model(model, text)
    t0 = time.perf_counter()
    table = head_logits(model, trace, token=token)
    t1 = time.perf_counter()
    lens = logit_lens(model, trace, k=5)
    t2 = time.perf_counter()
    p = torch.softmax(trace.next_logits.float(), -1)[table.attrs["target_id"]]
    print(f"\n## Heads that push the next token: {model.name}, {len(trace.tokens)} tokens")
    print(f"text: {text!r}")
    total, logit = table.logit.sum(), table.attrs["model_logit"]
    print(
        f"target {table.target.iloc[0]!r} (id {table.attrs['target_id']}), p = {p:.3f}, "
        f"model logit {logit:.4f}, rows add up to {total:.4f} ({total - logit:+.1e})"
    )
    print(f"head_logits {t1 - t0:.2f} s, logit_lens {t2 - t1:.2f} s (each reruns the forward)\n")
    heads = table[table.kind == "head"].sort_values("logit", ascending=False)
    cols = ["part", "layer", "head", "logit", "promote_1", "promote_2", "promote_3"]
    if set(heads.part) == {"decoder"}:
        cols.remove("part")
    print(f"top {top} heads by their push on the target:")
    print(heads[cols].head(top).round(3).to_string(index=False))
    print(f"\nmost negative {min(top, 5)} heads:")
    print(heads[cols].tail(min(top, 5)).round(3).to_string(index=False))
    rest = table[table.kind != "head"].groupby("kind", sort=False).logit.sum()
    rest["all heads"] = heads.logit.sum()
    print("\nthe rest of the final state (summed by kind):")
    print(rest.round(3).to_string())
    print("\nlogit lens (layer -1: the embeddings):")
    print(lens.round(3).to_string(index=False))


def _median(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[reps // 2]


def _direct_error(block, layer) -> float:
    """The Gram-matrix norms against the direct ||v_j W_O^h|| (every key projected)."""
    w, v, n_heads = w_o_matrix(block), layer.v, block.n_heads
    d, group = v.shape[-1], n_heads // v.shape[0]
    direct = torch.stack([(v[h // group] @ w[h * d : (h + 1) * d]).norm(dim=-1)
                          for h in range(n_heads)])  # fmt: skip
    return float(((layer.f_norm - direct).abs() / direct.clamp_min(1e-12)).max())


def costs() -> None:
    import os
    import tempfile

    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from attnviz.engine.hooked import resolve

    model = load_model(device="cpu")
    print("\n## What it costs (one torch thread)")
    words = " ".join(probe_texts("en")["passage"] * 4).split()
    for n in (128, 512):
        text = " ".join(words[: int(n * 0.8)])
        trace = trace_model(model, text, max_length=n)
        pairs = list(zip(model.blocks, trace.layers, strict=True))

        def norms(pairs=pairs) -> None:
            for block, layer in pairs:
                key_norms(layer.v, w_o_matrix(block), block.n_heads)

        whole = _median(lambda text=text, n=n: trace_model(model, text, max_length=n))
        part = _median(norms)
        kept = sum(layer.f_norm.numel() * 4 for layer in trace.layers)
        error = max(_direct_error(block, layer) for block, layer in pairs)
        print(f"MiniLM, {len(trace.tokens)} tokens: trace_model {whole * 1e3:.1f} ms, of which "
              f"the per-key norms {part * 1e3:.2f} ms ({part / whole:.1%}; largest relative "
              f"difference from projecting every key to d_model: {error:.1e}); f_norm "
              f"{kept / 1024:.1f} KiB of the trace's {trace.nbytes() / 2**20:.1f} MiB")  # fmt: skip
    folder = tempfile.mkdtemp()
    config = LlamaConfig(vocab_size=30522, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                         max_position_embeddings=4200)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(resolve(None)[0])
    tok.model_max_length = 16_384
    tok.save_pretrained(folder)
    os.environ["ATTNVIZ_FULL_TRACE_BYTES"] = "1"  # lean, as a long input is traced
    from attnviz.engine.budget import budget

    budget.cache_clear()
    llama = load_model(folder, device="cpu")
    text = " ".join(("the unbelievably tired animal didn't cross the street " * 700).split())
    trace = trace_model(llama, text, max_length=4096)
    t0 = time.perf_counter()
    words_trace = grouped(trace)
    t1 = time.perf_counter()
    pooled_weights(words_trace, 96, 96)
    t2 = time.perf_counter()
    pooled_weights(trace, 96, 96)
    t3 = time.perf_counter()
    largest = max(t.numel() for layer in words_trace.layers for t in layer.__dict__.values()
                  if isinstance(t, torch.Tensor))  # fmt: skip
    print(f"tiny Llama (4 layers x 8 heads, d_model 256), {len(trace.tokens)} pieces -> "
          f"{len(words_trace.tokens)} words: grouped {t1 - t0:.2f} s; the overview's pooled "
          f"maps of the words {t2 - t1:.2f} s, of the pieces {t3 - t2:.2f} s; the largest "
          f"tensor a grouped layer holds: {largest} numbers")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a decoder for part 2 only (default: both parts)")
    parser.add_argument("--text", help="the decoder's input (default: see the docstring)")
    parser.add_argument("--token", help='the token to attribute, e.g. " tired" (default: top)')
    parser.add_argument("--top", type=int, default=10, help="heads to list")
    parser.add_argument("--costs", action="store_true", help="part 3 only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.costs:
        costs()
    elif args.model is None:
        kobayashi()
        decoder(CHAR, args.text or CHAR_TEXT, args.token, args.top)
    else:
        decoder(args.model, args.text or REPEATED, args.token, args.top)


if __name__ == "__main__":
    main()
