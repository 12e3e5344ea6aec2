"""The first draw a user waits for on a long trace: the words' view against the pieces' view of the
same Gemma 3 trace, and the 512-token overview of SmolLM2 (30 layers x 9 heads) against MiniLM's.

Run:  .venv/bin/python bench/words.py [--only words|overview] [--reps 3]
      (after `make llms`; prints tables of medians and ratios, no asserts)

Every figure comes from a fresh process, timed from the end of the trace as a server draws it:
the trace's background pass starts (attnviz.serve.bandpool.warm_trace, as the app does after a
trace), then the overview's first draw: its pass (bandpool.fill), the mosaic and the chosen head's
image. "words" draws the same over the trace grouped into words (attnviz.grouped), as a page opened
with unit=word does. Plotly's one-off set-up is made before the clock starts (a warm server has it).
- words: Gemma 3 270M, 5,000 characters of Chinese (cut to the default budget, 1,566 tokens; each
  Chinese piece is its own word) and 5,000 of English in long, rare words (several pieces each);
- overview: SmolLM2-135M and the bundled MiniLM at 512 tokens; seconds and the mosaic's bytes
  (the JSON sent to the browser).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from long_context import child  # noqa: E402

CHINESE = (
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的"
    "方式做出反应的智能机器。该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。"
)
ENGLISH = (  # long and rare words: several pieces a word in Gemma's vocabulary
    "Counterrevolutionaries in Thessaloniki photosynthesised unbelievably; the hydrodynamicists' "
    "electroencephalograms, incomprehensibilities and antidisestablishmentarianism bewildered us. "
)


def _text(kind: str) -> str:
    base = CHINESE if kind == "zh" else ENGLISH
    return (base * (5000 // len(base) + 1))[:5000]


def child_draw(model_name: str, text_kind: str, unit: str, max_length: int) -> dict:
    import torch

    import attnviz
    from attnviz.serve import bandpool
    from attnviz.views import images, panels, spec
    from attnviz.views.selection import Selection

    torch.set_num_threads(1)
    model = attnviz.load_model() if model_name == "minilm" else attnviz.load_model(model_name)
    with spec.making_specs():  # plotly's one-off set-up, made before the clock
        images.mosaic(torch.rand(1, 1, 4, 4))
    kw = {"max_length": max_length} if max_length else {}
    trace = attnviz.trace_model(model, _text(text_kind), **kw)
    t0 = time.perf_counter()
    bandpool.warm_trace(trace)  # as the app does once a trace is made
    shown = trace if unit == "pieces" else attnviz.grouped(trace, unit)
    bandpool.fill(shown, "weights", maps=True)
    with spec.making_specs():
        mosaic = panels.overview_figure(shown, Selection(), width=panels.MOSAIC_WIDTH)
    t_mosaic = time.perf_counter() - t0
    if panels.overview_head_is_picture(shown):
        panels.head_image_figure(shown, Selection(layer=0, head=0))
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "mosaic_s": t_mosaic, "mosaic_bytes": mosaic.nbytes,
            "n": len(trace.tokens), "groups": len(shown.tokens),
            "heads": f"{trace.n_layers} x {trace.n_heads}",
            "load": os.getloadavg()[0]}  # fmt: skip


def run(*args: object) -> dict:
    return child(__file__, ["--child", *map(str, args)], dict(os.environ))


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _rows(cases: list[tuple[str, tuple]], reps: int) -> dict[str, list[dict]]:
    """Each case's runs, the cases interleaved rep after rep (a load change hits them alike)."""
    got: dict[str, list[dict]] = {label: [] for label, _ in cases}
    for _ in range(reps):
        for label, args in cases:
            out = run(*args)
            if "error" in out:
                print(f"{label}: {out['error']}")
                continue
            got[label].append(out)
    return got


def words(reps: int) -> None:
    print("\n## Gemma 3 270M, default budget: first draw of the overview after the trace")
    cases = [(f"{lang} {unit}", ("gemma-3-270m", lang, unit, 0))
             for lang in ("zh", "en") for unit in ("pieces", "word")]  # fmt: skip
    got = _rows(cases, reps)
    print("| text | unit | tokens → groups | seconds (median) | against pieces | load |")
    print("|---|---|---|---|---|---|")
    for lang in ("zh", "en"):
        base = got[f"{lang} pieces"]
        for unit in ("pieces", "word"):
            runs = got[f"{lang} {unit}"]
            if not runs or not base:
                continue
            s, b = _median(runs, "seconds"), _median(base, "seconds")
            loads = ", ".join(f"{r['load']:.1f}" for r in runs)
            print(f"| {lang} | {unit} | {runs[0]['n']} → {runs[0]['groups']} | {s:.2f} | "
                  f"{s / b:.2f}× | {loads} |")  # fmt: skip


def overview(reps: int) -> None:
    print("\n## The overview at 512 tokens: pass, mosaic and head image after the trace")
    cases = [(m, (m, "en", "pieces", 512)) for m in ("minilm", "smollm2-135m")]
    got = _rows(cases, reps)
    base = got["minilm"]
    print("| model | heads | seconds (median) | mosaic bytes | against MiniLM (s, bytes) |")
    print("|---|---|---|---|---|")
    for label, _ in cases:
        runs = got[label]
        if not runs or not base:
            continue
        s, nb = _median(runs, "seconds"), _median(runs, "mosaic_bytes")
        bs, bb = _median(base, "seconds"), _median(base, "mosaic_bytes")
        print(f"| {label} | {runs[0]['heads']} | {s:.2f} | {nb / 1e6:.2f} MB | "
              f"{s / bs:.2f}×, {nb / bb:.2f}× |")  # fmt: skip


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        name, lang, unit, max_length = sys.argv[2:6]
        print(json.dumps(child_draw(name, lang, unit, int(max_length))), flush=True)
        os._exit(0)  # the background pass may still run: no teardown under its threads
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("words", "overview"))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if args.only in (None, "words"):
        words(args.reps)
    if args.only in (None, "overview"):
        overview(args.reps)


if __name__ == "__main__":
    main()
