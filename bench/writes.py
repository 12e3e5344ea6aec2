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
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import head_logits, load_model, logit_lens, special_share, trace_model  # noqa: E402
from attnviz.engine.roles import probe_texts  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a decoder for part 2 only (default: both parts)")
    parser.add_argument("--text", help="the decoder's input (default: see the docstring)")
    parser.add_argument("--token", help='the token to attribute, e.g. " tired" (default: top)')
    parser.add_argument("--top", type=int, default=10, help="heads to list")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.model is None:
        kobayashi()
        decoder(CHAR, args.text or CHAR_TEXT, args.token, args.top)
    else:
        decoder(args.model, args.text or REPEATED, args.token, args.top)


if __name__ == "__main__":
    main()
