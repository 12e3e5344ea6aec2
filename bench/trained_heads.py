"""What the bundled decoder's heads do, measured on held-out poems (never trained on).

Run: .venv/bin/python bench/trained_heads.py  (prints tables; no assertions)
- next-character top-10 after the first part of a Tang line, for a held-out poem and a trained one;
- previous-token score of every head: mean weight on key i-1 over every query i >= 2 of the poems'
  text (the first character after [BOS] excluded), against the uniform weight 1/(i+1);
- previous-line score: for a character at column c of a verse line, the mean weight on column c of
  the line before (the same position one line up), and how often that key is the row's argmax;
  the same for the previous half-line (the part before '，').
Traces come from trace_model, whose weights equal HF eager attention (tests/test_trained.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import load_model, trace_model  # noqa: E402
from attnviz.training import corpus  # noqa: E402

NAME = "attnviz-char-zh-en"


def verse(poem: str) -> str:
    """A poem's verse lines (title and author lines dropped), joined by newlines."""
    lines = [x for x in poem.split("\n") if x and not x.startswith(("《", "作者"))]
    return "\n".join(lines)


def columns(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Pairs (query, key) of token positions ([BOS] is 0): the same column one line up, and the
    same column one half-line up (half-lines end at '，' or '。')."""
    line_pairs, half_pairs = [], []
    starts, halves = [0], [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
        if ch in "，。？！；" and i + 1 < len(text) and text[i + 1] != "\n":
            halves.append(i + 1)
    for group, out in ((starts, line_pairs), (sorted(set(starts + halves)), half_pairs)):
        for prev, cur, nxt in zip(group, group[1:], group[2:] + [len(text)], strict=False):
            for c in range(nxt - cur):
                if prev + c < cur and text[cur + c] not in "\n" and text[prev + c] not in "\n":
                    out.append((cur + c + 1, prev + c + 1))  # +1: [BOS] comes first
    return line_pairs, half_pairs


def top10(model, prompt: str) -> str:
    logits = trace_model(model, prompt).next_logits  # [vocab]
    probs = logits.softmax(-1)
    p, idx = probs.topk(10)
    toks = model.tokenizer.convert_ids_to_tokens(idx.tolist())
    return "  ".join(f"{t}{q:.2f}" for t, q in zip(toks, p.tolist(), strict=True))


def main() -> None:
    torch.set_num_threads(1)
    model = load_model(NAME, device="cpu")
    text = corpus.read(streams={"poems": corpus.POEMS})
    held = [verse(p) for p in text.val["poems"]]
    held = [v[:255] for v in held if v.count("\n") >= 1]
    seen = verse(text.train["poems"][0])
    for label, poem in (("held-out", held[0]), ("trained", seen)):
        first = poem.split("\n")[0]
        cut = first.index("，") + 3 if "，" in first else len(first) // 2
        print(f"top-10 after {label} {first[:cut]!r} (true next {first[cut]!r}): "
              f"{top10(model, first[:cut])}")  # fmt: skip
    L, H = model.n_layers, model.n_heads
    prev_w, prev_u, prev_n = torch.zeros(L, H), 0.0, 0
    line_w, line_hit, half_w, half_hit = (torch.zeros(L, H) for _ in range(4))
    n_line = n_half = 0
    uni_line = uni_half = 0.0
    for poem in held:
        trace = trace_model(model, poem)
        w = torch.stack([layer.weights for layer in trace.layers])  # [layer, head, q, k]
        n = w.shape[-1]
        q = torch.arange(2, n)  # queries after the first character
        prev_w += w[:, :, q, q - 1].sum(-1)
        prev_u += float((1.0 / (q + 1)).sum())
        prev_n += len(q)
        lp, hp = columns(poem)
        for pairs, acc, hit, kind in (
            (lp, line_w, line_hit, "line"),
            (hp, half_w, half_hit, "half"),
        ):
            if not pairs:
                continue
            qi = torch.tensor([a for a, _ in pairs])
            ki = torch.tensor([b for _, b in pairs])
            acc += w[:, :, qi, ki].sum(-1)
            hit += (w[:, :, qi].argmax(-1) == ki).float().sum(-1)
            uniform = float((1.0 / (qi + 1)).sum())
            if kind == "line":
                n_line, uni_line = n_line + len(pairs), uni_line + uniform
            else:
                n_half, uni_half = n_half + len(pairs), uni_half + uniform
    print(f"\n{len(held)} held-out poems, {prev_n} queries; uniform weight on one key: "
          f"{prev_u / prev_n:.3f}")  # fmt: skip
    for label, score, base, hits, count in (
        ("previous token (key i-1)", prev_w / prev_n, prev_u / prev_n, None, prev_n),
        ("same column, previous line", line_w / max(n_line, 1), uni_line / max(n_line, 1),
         line_hit / max(n_line, 1), n_line),
        ("same column, previous half-line", half_w / max(n_half, 1), uni_half / max(n_half, 1),
         half_hit / max(n_half, 1), n_half),
    ):  # fmt: skip
        best = torch.topk(score.flatten(), 3)
        print(f"\n{label}: {count} queries, uniform {base:.3f}; mean weight per head "
              f"(rows = layers, columns = heads):")  # fmt: skip
        for layer in range(L):
            print(f"  L{layer} " + " ".join(f"{x:5.2f}" for x in score[layer].tolist()))
        for v, i in zip(best.values.tolist(), best.indices.tolist(), strict=True):
            extra = "" if hits is None else f", argmax of its row {hits.flatten()[i]:.0%}"
            print(f"  best: layer {i // H} head {i % H}: {v:.3f} ({v / base:.1f}x uniform{extra})")


if __name__ == "__main__":
    main()
