"""Linear layers through oneDNN against torch's nn.Linear (MKL's sgemm), float32 on the CPU.

Run:  .venv/bin/python bench/onednn_linear.py                      (SmolLM2, Gemma 3, MiniLM)
      .venv/bin/python bench/onednn_linear.py --models smollm2-135m --threads 1

For each model, in a fresh process each side (ATTNVIZ_ONEDNN_LINEAR=0, then 1), alternating
twice: the plain forward (SDPA, no hooks, the last position's logits) of 8 sentences of 32 tokens
at once, and `attnviz.trace_each` of the same 8 (every head's tensors recorded); the best of 5
after two warm-ups, CPU and wall seconds per sentence. Then what oneDNN changes: the largest
difference of any attention weight and of the next-token logits between the two, and whether a
sentence traced alone gets the same bits as inside the batch of 8.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

MODELS = ["smollm2-135m", "gemma-3-270m", ""]


def measure(model_name: str, out: str) -> None:
    """In this process: times, and the batch's weights and logits saved to `out` (a .pt)."""
    import torch
    from classroom import sentence

    import attnviz
    from attnviz.engine.hooked import trace_each, trace_model
    from attnviz.engine.hooked.encoding import collate

    model = attnviz.load_model(model_name or None, device="cpu")
    rng = random.Random(7)
    texts = [sentence(rng, 32) for _ in range(8)]

    def best(fn) -> tuple[float, float]:
        result = (float("inf"), float("inf"))
        for i in range(7):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            cost = (time.process_time() - c0, time.perf_counter() - t0)
            result = min(result, cost) if i >= 2 else result
        return result

    enc = collate(model, [model.call_tokenizer(t, return_tensors="pt") for t in texts])
    enc = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")}
    if model.kind == "decoder":
        enc["logits_to_keep"] = torch.tensor([enc["input_ids"].shape[1] - 1])
    sdpa = attnviz.load_model(model_name or None, device="cpu")  # its own copy, switched to SDPA
    assert sdpa.model is not model.model
    sdpa.model.set_attn_implementation("sdpa")
    with torch.inference_mode():
        plain = best(lambda: sdpa.model(**enc))
    traced = best(lambda: trace_each(model, texts))
    traces = trace_each(model, texts)
    alone = trace_model(model, texts[3])
    same_alone = all(
        torch.equal(a.weights, b.weights)
        for a, b in zip(alone.layers, traces[3].layers, strict=True)
    )
    torch.save(
        {
            "weights": [torch.stack([layer.weights for layer in t.layers]) for t in traces],
            "logits": [t.next_logits for t in traces if t.next_logits is not None],
        },
        out,
    )
    print(json.dumps({"plain": plain, "traced": traced, "threads": torch.get_num_threads(),
                      "same_alone": same_alone}))  # fmt: skip


def apart(model_name: str, onednn: bool, out: str, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTNVIZ_ONEDNN_LINEAR": str(int(onednn))}
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, __file__, "--measure", model_name, "--out", out]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated; '' is MiniLM")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:
        measure(args.measure, args.out)
        return
    import torch

    tmp = ROOT / "out" / "onednn_bench"
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"8 sentences of 32 tokens a forward, {args.threads} thread(s); ms a sentence, CPU/wall")
    print(
        f"{'model':<14} {'linear':<7} {'plain forward':>15} {'trace_each':>15} {'alone=batch':>12}"
    )
    for name in args.models.split(","):
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for _ in range(2):  # alternating, each in a fresh process
            for onednn in (False, True):
                runs[onednn].append(
                    apart(name, onednn, str(tmp / f"{int(onednn)}.pt"), args.threads)
                )
        best = {}
        for onednn in (False, True):
            plain = min(r["plain"] for r in runs[onednn])
            traced = min(r["traced"] for r in runs[onednn])
            best[onednn] = (plain, traced)
            print(
                f"{name or 'MiniLM':<14} {'oneDNN' if onednn else 'MKL':<7} "
                f"{plain[0] / 8 * 1e3:>7.1f}/{plain[1] / 8 * 1e3:<7.1f} "
                f"{traced[0] / 8 * 1e3:>7.1f}/{traced[1] / 8 * 1e3:<7.1f} "
                f"{str(all(r['same_alone'] for r in runs[onednn])):>12}"
            )
        mkl, dnn = (torch.load(tmp / f"{i}.pt") for i in (0, 1))
        dw = max(
            (a - b).abs().max().item() for a, b in zip(mkl["weights"], dnn["weights"], strict=True)
        )
        dl = max(
            ((a - b).abs().max().item() for a, b in zip(mkl["logits"], dnn["logits"], strict=True)),
            default=0.0,
        )
        print(
            f"  MKL / oneDNN: plain forward {best[False][0][1] / best[True][0][1]:.2f}x wall, "
            f"trace {best[False][1][1] / best[True][1][1]:.2f}x; largest difference: "
            f"attention weight {dw:.1e}, next-token logit {dl:.1e}"
        )


if __name__ == "__main__":
    main()
