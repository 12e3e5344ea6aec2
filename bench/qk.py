"""Why heads look where they look, measured: each figure the docs state about the QK split
(attnviz.qk_attribution) comes from this script.

Run:  .venv/bin/python bench/qk.py [--only induction|minilm|sink|speed|atlas]
      (after `make llms`; prints what it measures, no asserts)

- induction: SmolLM2-135M and Gemma 3 270M on 30 distinct words said twice. For the top
  induction heads of each model's atlas (probe set; SmolLM2's L18H6 and Gemma's L5H1 among them),
  at every second-copy row, the head's logit at the key it weighs most, split; the key-side parts
  and the query-side parts summed over the rows, as shares of the summed logits, and whether the
  key side's top heads are heads the atlas calls previous-token (K-composition).
- minilm: a previous-token head of MiniLM (the atlas's strongest) on the probe texts: its
  top-weight logits split into position x position, token x token (embeddings and segment) and
  the rest.
- sink: SmolLM2's heads with first_token >= 0.8: at rows whose strongest key is the first token,
  which key-side parts carry the logit (the token's embedding, an MLP's write, heads, biases),
  and how much of it the rotation makes.
- speed: one cell (query = the last token, key = its strongest) at 128 and 4,096 tokens on
  SmolLM2 and Gemma 3, warm (the second call on the trace), and the per-key form (every key) at
  512 tokens; the atlas over the probe set with and without the qk_* columns.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ATTNVIZ_MAX_TRACE_BYTES", str(4 * 2**30))  # a 4,096-token trace
os.environ.setdefault("ATTNVIZ_MAX_MODEL_WORK", str(10**13))

import torch  # noqa: E402

import attnviz  # noqa: E402
from attnviz.measures import roles  # noqa: E402
from attnviz.measures.qk import qk_attribution  # noqa: E402
from attnviz.measures.qk_sources import qk_keys  # noqa: E402

WORDS = [
    *("apple", "river", "stone", "cloud", "table", "garden", "window", "silver", "orange"),
    *("pencil", "mountain", "candle", "forest", "bottle", "engine", "ladder", "mirror"),
    *("rocket", "violin", "pillow", "basket", "hammer", "island", "jacket", "lemon"),
    *("needle", "pepper", "rabbit", "saddle", "tunnel"),
]
_ATLAS: dict[str, object] = {}


def atlas(name: str, model):
    """The roles of every head over the probe set (without the qk_* columns: picking heads)."""
    if name not in _ATLAS:
        t0 = time.perf_counter()
        tracer = roles._tracer(model)
        _ATLAS[name] = roles.merge_sums(roles.role_sums(tracer(roles.probe_list("en"))))
        print(f"  atlas of {name}: {time.perf_counter() - t0:.1f} s")
    return _ATLAS[name]


def label(kind, layer, head) -> str:
    if kind == "head":
        return f"L{layer}H{head}"
    if kind == "mlp":
        return f"MLP{layer}"
    return kind if layer is None or str(layer) == "<NA>" else f"{kind} L{layer}"


def shares(frames, side: str) -> list[tuple[str, float]]:
    """Each part of one side summed over the frames, as a share of the summed logits."""
    import pandas as pd

    total = sum(f.attrs["logit"] for f in frames)
    both = pd.concat(frames)
    cols = [f"{side}_kind", f"{side}_layer", f"{side}_head"]
    grouped = both.groupby(cols, dropna=False)["score"].sum()
    grouped = grouped.reindex(grouped.abs().sort_values(ascending=False).index)
    return [(label(*k), v / total) for k, v in grouped.head(4).items()]


def induction(name: str, model, extra: tuple[int, int]) -> None:
    table = atlas(name, model)
    prev = table[table["roles"].str.contains("previous_token")]
    prev_names = {f"L{r.layer}H{r.head}" for r in prev.itertuples()}
    top = table.sort_values("induction", ascending=False).head(3)
    heads = [(int(la), int(h)) for la, h in top[["layer", "head"]].to_numpy()]
    heads = list(dict.fromkeys([extra, *heads]))
    trace = attnviz.trace_model(model, " ".join(WORDS + WORDS))
    n = len(trace.tokens)
    half = n // 2  # one copy's tokens (an odd count: a BOS first)
    rows = list(range(n - half + 1, n))
    print(f"{name}: {n} tokens, second-copy rows {rows[0]}..{rows[-1]}; atlas previous-token "
          f"heads: {sorted(prev_names)}")  # fmt: skip
    for layer, head in heads:
        score = table[(table["layer"] == layer) & (table["head"] == head)]["induction"].iloc[0]
        frames = [qk_attribution(model, trace, layer, head, i) for i in rows]
        offset = sum(1 for f in frames if f.attrs["key"] == f.attrs["query"] - half + 1)
        key = shares(frames, "k")
        query = shares(frames, "q")
        marks = ["(prev-token)" if k in prev_names else "" for k, _ in key]
        print(f"  L{layer}H{head} (induction {score:.2f}; strongest key = the token after the "
              f"first copy's in {offset}/{len(rows)} rows)")  # fmt: skip
        print(
            "    key side:  "
            + ", ".join(f"{k}{m} {v:+.0%}" for (k, v), m in zip(key, marks, strict=True))
        )
        print("    query side: " + ", ".join(f"{k} {v:+.0%}" for k, v in query))


def minilm() -> None:
    model = attnviz.load_model(None)
    table = atlas("MiniLM", model)
    best = table.sort_values("previous_token", ascending=False).iloc[0]
    layer, head = int(best["layer"]), int(best["head"])
    pos = tok = rest = total = 0.0
    token_kinds = {"embedding", "token type embedding"}
    for text in roles.probe_list("en")[:8]:
        trace = attnviz.trace_model(model, text)
        for i in range(2, len(trace.tokens) - 1):
            f = qk_attribution(model, trace, layer, head, i)
            both_pos = (f.q_kind == "position embedding") & (f.k_kind == "position embedding")
            both_tok = f.q_kind.isin(token_kinds) & f.k_kind.isin(token_kinds)
            pos += f.score[both_pos].sum()
            tok += f.score[both_tok].sum()
            rest += f.score[~both_pos & ~both_tok].sum()
            total += f.attrs["logit"]
    print(f"MiniLM L{layer}H{head} (previous_token {best.previous_token:.2f}): over its top-weight"
          f" cells, position x position {pos / total:+.0%}, token x token {tok / total:+.0%}, the"
          f" rest {rest / total:+.0%} of the summed logits {total:.1f}")  # fmt: skip


def sink() -> None:
    model = attnviz.load_model("smollm2-135m")
    table = atlas("SmolLM2", model)
    sinks = table[table.first_token >= 0.8].sort_values("first_token", ascending=False).head(3)
    trace = attnviz.trace_model(model, " ".join(WORDS[:12]) + ". The rest follows here.")
    for r in sinks.itertuples():
        layer, head = int(r.layer), int(r.head)
        w = trace.layers[layer].block("weights", head)
        rows = [i for i in range(4, len(trace.tokens)) if int(w[i].argmax()) == 0][:10]
        if not rows:
            continue
        frames = [qk_attribution(model, trace, layer, head, i, key=0) for i in rows]
        rotation = sum(f.attrs["rotation"] for f in frames) / sum(f.attrs["logit"] for f in frames)
        key = shares(frames, "k")
        print(f"SmolLM2 L{layer}H{head} (first_token {r.first_token:.2f}), {len(rows)} rows to "
              f"key 0 {trace.tokens[0]!r}: key side " + ", ".join(f"{k} {v:+.0%}" for k, v in key)
              + f"; the rotation's part {rotation:+.0%}")  # fmt: skip


def _cell(model, trace, layer, head) -> float:
    n = len(trace.tokens)
    qk_attribution(model, trace, layer, head, n - 1)  # warm: the modules' weights, the memo
    t0 = time.perf_counter()
    qk_attribution(model, trace, layer, head, n - 2)
    return time.perf_counter() - t0


def speed() -> None:
    text = (" ".join(WORDS) + ". ") * 200
    for name, (layer, head) in (("smollm2-135m", (18, 6)), ("gemma-3-270m", (5, 1))):
        model = attnviz.load_model(name)
        for n in (128, 4096):
            trace = attnviz.trace_model(model, text, max_length=n)
            print(f"{name}: one cell at {len(trace.tokens)} tokens, layer {layer}: "
                  f"{_cell(model, trace, layer, head):.2f} s")  # fmt: skip
            if name == "smollm2-135m" and n == 128:
                t512 = attnviz.trace_model(model, text, max_length=512)
                t0 = time.perf_counter()
                keys = qk_keys(model, t512, layer, head, len(t512.tokens) - 1)
                print(f"{name}: the per-key form at {len(t512.tokens)} tokens (every key, "
                      f"{len(keys):,} rows): {time.perf_counter() - t0:.2f} s")  # fmt: skip
            del trace


def atlas_cost() -> None:
    """The atlas over the probe set with and without the qk_* columns, each timed twice after a
    warm-up text, the better of each kept."""
    model = attnviz.load_model("smollm2-135m")
    texts = roles.probe_list("en")
    tracer = roles._tracer(model)
    roles.head_role_sums(model, texts[:1])  # warm: both paths' first calls
    plain, full = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        roles.role_sums(tracer(texts))
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        roles.head_role_sums(model, texts)
        full.append(time.perf_counter() - t0)
    print(f"SmolLM2 atlas over {len(texts)} probe texts: {min(plain):.1f} s without the qk_* "
          f"columns, {min(full):.1f} s with them ({min(full) / min(plain):.2f}x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["induction", "minilm", "sink", "speed", "atlas"])
    only = parser.parse_args().only
    torch.set_num_threads(2)
    print(f"load {os.getloadavg()[0]:.1f}")
    if only in (None, "speed"):
        speed()
    if only in (None, "induction"):
        induction("SmolLM2", attnviz.load_model("smollm2-135m"), (18, 6))
        induction("Gemma 3", attnviz.load_model("gemma-3-270m"), (5, 1))
    if only in (None, "minilm"):
        minilm()
    if only in (None, "sink"):
        sink()
    if only in (None, "atlas"):
        atlas_cost()
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
