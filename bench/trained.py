"""The bundled trained decoder against unigram and bigram baselines, and its load time.

Run: .venv/bin/python bench/trained.py [--windows N]  (prints tables; no assertions)
Next-character loss (nats) and top-1 accuracy on held-out Chinese (poems and sayings) and English
fortune records (every 20th record of each file, never trained on), in windows of [BOS] + 255
characters; the baselines are fitted on the training records of the same language with the
model's own vocabulary (add-one unigram; bigram interpolated 0.9 / 0.1 with it).
Load time: load_model(name) in a fresh process (median of 3), beside the bundled MiniLM's.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import load_model  # noqa: E402
from attnviz.training import chars, corpus, scoring  # noqa: E402

NAME = "attnviz-char-zh-en"
LOAD = (
    "import time; t=time.perf_counter(); from attnviz.engine.hooked import loading; "
    "u=time.perf_counter(); m=loading.load_model({name!r}, device='cpu'); "
    "print(u-t, time.perf_counter()-u)"
)


def load_seconds(name: str) -> tuple[float, float]:
    """(importing transformers and attnviz, load_model) in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD.format(name=name)], capture_output=True, text=True,
        check=True, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    imported, loaded = out.stdout.strip().splitlines()[-1].split()
    return float(imported), float(loaded)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--windows", type=int, default=40, help="held-out windows per stream (max)")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = load_model(NAME, device="cpu")
    ids = model.tokenizer.get_vocab()
    text = corpus.read()
    train = {s: torch.tensor(chars.encode(text.text("train", s), ids)) for s in corpus.STREAMS}
    zh = scoring.fit([train["poems"], train["chinese"]], len(ids))  # per language: the stronger
    en = scoring.fit([train["english"]], len(ids))
    val = {s: torch.tensor(chars.encode(text.text("val", s), ids)) for s in corpus.STREAMS}
    groups = {
        "zh poems": scoring.chunks(val["poems"], 256, args.windows),
        "zh sayings": scoring.chunks(val["chinese"], 256, args.windows),
        "en": scoring.chunks(val["english"], 256, args.windows),
    }
    print(f"{NAME}: next-character loss (nats) / top-1 accuracy on held-out text")
    print(f"{'text':12} {'chars':>7} {'model':>15} {'bigram':>15} {'unigram':>15} {'acc ratio':>9}")
    groups["zh (both)"] = torch.cat([groups["zh poems"], groups["zh sayings"]])
    for label, w in groups.items():
        uni, bi = scoring.score_ngrams(en if label == "en" else zh, w)
        ours = scoring.score_model(model.model, w)
        cells = [f"{s.loss:6.3f} / {s.accuracy:5.1%}" for s in (ours, bi, uni)]
        print(f"{label:12} {ours.n:7d} {cells[0]:>15} {cells[1]:>15} {cells[2]:>15} "
              f"{ours.accuracy / bi.accuracy:8.2f}x")  # fmt: skip
    for name in (NAME, None):
        runs = [load_seconds(name) for _ in range(3)]
        imp = statistics.median(r[0] for r in runs)
        load = statistics.median(r[1] for r in runs)
        print(f"load_model({name!r}) in a fresh process, median of 3: {load:.2f} s "
              f"(after {imp:.2f} s importing transformers and attnviz)")  # fmt: skip


if __name__ == "__main__":
    main()
