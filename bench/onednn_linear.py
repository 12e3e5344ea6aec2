"""Linear layers through oneDNN against torch's nn.Linear (MKL's sgemm), float32 on the CPU.

Run:  .venv/bin/python bench/onednn_linear.py                      (SmolLM2, Gemma 3, MiniLM)
      .venv/bin/python bench/onednn_linear.py --models smollm2-135m --threads 1 --batches 1,4,8

For each model, in a fresh process each side, alternating twice: MKL (ATTNVIZ_ONEDNN_LINEAR=0),
oneDNN given the plain weights (ATTNVIZ_PACKED_LINEAR_MB=0: reordered on every product) and
oneDNN with each weight packed once (the default). Each measures the plain forward (SDPA, no
hooks, the last position's logits) of 1, 4 and 8 sentences of 32 tokens at once, and
`attnviz.trace_each` of the same sentences (every head's tensors recorded); the best of 5 after two
warm-ups, CPU and wall seconds per sentence. Then what oneDNN changes: the largest difference of
any attention weight and of the next-token logits against MKL, whether the packed weights give
the unpacked ones' bits, and whether a sentence traced alone gets the same bits as in a batch.
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


def measure(model_name: str, out: str, batches: list[int]) -> None:
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

    def encoded(some: list[str]) -> dict:
        enc = collate(model, [model.call_tokenizer(t, return_tensors="pt") for t in some])
        enc = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        if model.kind == "decoder":
            enc["logits_to_keep"] = torch.tensor([enc["input_ids"].shape[1] - 1])
        return enc

    sdpa = attnviz.load_model(model_name or None, device="cpu")  # its own copy, switched to SDPA
    assert sdpa.model is not model.model
    sdpa.model.set_attn_implementation("sdpa")
    plain, traced = {}, {}
    for b in batches:
        enc = encoded(texts[:b])
        with torch.inference_mode():
            plain[b] = best(lambda enc=enc: sdpa.model(**enc))
        traced[b] = best(lambda b=b: trace_each(model, texts[:b]))
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
    import resource

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # two copies of the model
    print(json.dumps({"plain": plain, "traced": traced, "threads": torch.get_num_threads(),
                      "peak_mb": peak_mb,
                      "same_alone": same_alone}))  # fmt: skip


# each side's settings: torch's layers (MKL), oneDNN reordering the plain weights on every
# product, oneDNN with the weights packed once (what attnviz does)
SIDES = {
    "MKL": {"ATTNVIZ_ONEDNN_LINEAR": "0"},
    "oneDNN": {"ATTNVIZ_ONEDNN_LINEAR": "1", "ATTNVIZ_PACKED_LINEAR_MB": "0"},
    "packed": {"ATTNVIZ_ONEDNN_LINEAR": "1", "ATTNVIZ_PACKED_LINEAR_MB": str(2**20)},
}


def apart(model_name: str, side: str, out: str, threads: int, batches: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **SIDES[side]}
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [sys.executable, __file__, "--measure", model_name, "--out", out, "--batches", batches]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated; '' is MiniLM")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,4,8", help="sentences a forward, comma-separated")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.measure is not None:
        measure(args.measure, args.out, batches)
        return
    import torch

    tmp = ROOT / "out" / "onednn_bench"
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"32-token sentences, {args.threads} thread(s); ms a sentence, CPU/wall")
    print(
        f"{'model':<14} {'linear':<7} {'batch':>5} {'plain forward':>15} {'trace_each':>15} "
        f"{'peak MB':>8}"
    )
    for name in args.models.split(","):
        runs: dict[str, list[dict]] = {side: [] for side in SIDES}
        for _ in range(2):  # alternating, each in a fresh process
            for side in SIDES:
                out = str(tmp / f"{side}.pt")
                runs[side].append(apart(name, side, out, args.threads, args.batches))
        for side in SIDES:
            for b in batches:
                plain = min(r["plain"][str(b)] for r in runs[side])
                traced = min(r["traced"][str(b)] for r in runs[side])
                print(
                    f"{name or 'MiniLM':<14} {side:<7} {b:>5} "
                    f"{plain[0] / b * 1e3:>7.1f}/{plain[1] / b * 1e3:<7.1f} "
                    f"{traced[0] / b * 1e3:>7.1f}/{traced[1] / b * 1e3:<7.1f} "
                    f"{max(r['peak_mb'] for r in runs[side]):>8.0f}"
                )
        saved = {side: torch.load(tmp / f"{side}.pt") for side in SIDES}
        mkl, dnn, packed = saved["MKL"], saved["oneDNN"], saved["packed"]
        dw = max(
            (a - b).abs().max().item() for a, b in zip(mkl["weights"], dnn["weights"], strict=True)
        )
        dl = max(
            ((a - b).abs().max().item() for a, b in zip(mkl["logits"], dnn["logits"], strict=True)),
            default=0.0,
        )
        same = all(
            torch.equal(a, b)
            for key in ("weights", "logits")
            for a, b in zip(dnn[key], packed[key], strict=True)
        )
        alone = all(r["same_alone"] for side in ("oneDNN", "packed") for r in runs[side])
        print(
            f"  against MKL: largest difference attention weight {dw:.1e}, next-token logit "
            f"{dl:.1e}; packed = unpacked bits: {same}; a sentence alone = in a batch: {alone}"
        )


if __name__ == "__main__":
    main()
