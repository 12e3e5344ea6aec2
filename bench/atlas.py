"""The whole head atlas of the bundled model on the built-in probe set.

Run: .venv/bin/python bench/atlas.py  (prints times and ratios; no assertions; one torch thread)
Target: head_roles(load_model(), probe set) in <= 5 s on the 2-core CPU, with the model
already loaded (the app loads it once per process). Baseline, measured in the same run: the same
texts through the same weights loaded with Hugging Face's eager attention and
output_attentions=True, one text at a time, i.e. the weights alone with nothing recorded and no
scores computed. The atlas's own share is split into tracing (attnviz's trace of every tensor)
and scoring (roles_from_traces over traces already made).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz.engine import roles  # noqa: E402
from attnviz.engine.hooked import load_model, resolve, trace_model  # noqa: E402

THREADS = 1
REPS = 5


def best_and_median(fn, reps: int = REPS) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def paired(a, b, reps: int = REPS) -> tuple[list[float], list[float]]:
    """Times of a and b run interleaved (a b, b a, ...), so that load from other processes on a
    shared machine hits both alike."""
    a(), b()  # warm-up
    times_a, times_b = [], []
    for rep in range(reps):
        for fn, times in ((a, times_a), (b, times_b))[:: 1 if rep % 2 == 0 else -1]:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times_a, times_b


def main() -> None:
    torch.set_num_threads(THREADS)
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    model = load_model(device="cpu")
    folder = resolve(None)[0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    print(f"torch {torch.__version__}, {THREADS} thread(s), {model.name}")
    print("best and median of the atlas; ratio: the median of per-rep atlas / eager (interleaved)")
    head = f"{'probe set':>9} {'texts':>5} {'tokens':>6} | {'atlas s':>8} {'median':>7} "
    print(head + f"{'eager s':>8} {'ratio':>6} | {'trace s':>8} {'score s':>8} | target <= 5 s")
    for lang in ("en", "zh", "both"):
        texts = roles.probe_list(lang)
        n_tokens = sum(len(tokenizer(text)["input_ids"]) for text in texts)

        def atlas(texts=texts):
            return roles.head_roles(model, texts)

        def baseline(texts=texts):
            for text in texts:
                with torch.inference_mode():
                    eager(**tokenizer(text, return_tensors="pt"), output_attentions=True)

        traces = [trace_model(model, text) for text in texts]
        times_a, times_b = paired(atlas, baseline)
        a_best, a_med = min(times_a), statistics.median(times_a)
        ratio = statistics.median(x / y for x, y in zip(times_a, times_b, strict=True))
        t_best, _ = best_and_median(lambda texts=texts: [trace_model(model, t) for t in texts])
        s_best, _ = best_and_median(lambda traces=traces: roles.roles_from_traces(traces))
        print(
            f"{lang:>9} {len(texts):>5} {n_tokens:>6} | {a_best:>8.2f} {a_med:>7.2f} "
            f"{min(times_b):>8.2f} {ratio:>6.2f} | {t_best:>8.2f} {s_best:>8.2f} | "
            f"{'met' if a_med <= 5 else 'MISSED'}"
        )


if __name__ == "__main__":
    main()
