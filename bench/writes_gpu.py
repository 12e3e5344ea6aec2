"""moved, head_logits, logit_lens and grouped on a GPU against the CPU, for the lead's device runs.

Run:  python bench/writes_gpu.py                   (CUDA, float32 and bfloat16 loads)
      python bench/writes_gpu.py --device cpu      (a smoke run: both sides on the CPU)

The bundled encoder and character decoder are traced on the device (the per-key norms
||W_O^h v_j|| are computed there, in float32 from the model's dtype) and on the CPU in float32;
prints the largest difference of each result and whether head_logits' rows still add up to the
model's own logit on the device (float32 within 1e-3 is the test suite's bar; a bfloat16 load
differs from float32 by its rounding, so its row only says how far).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import grouped, head_logits, load_model, logit_lens, trace_model  # noqa: E402

TEXT = "The animal didn't cross the street because it was unbelievably tired."
CHAR_TEXT = "The animal didn't cross the street because it was too tired. 我爱水课，因为"


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def one(name: str | None, text: str, device: str, dtype: str) -> None:
    cpu = load_model(name, device="cpu")
    dev = load_model(name, device=device, dtype=dtype)
    a, b = trace_model(cpu, text), trace_model(dev, text)
    label = f"{cpu.name} on {device} {dtype}"
    moved = max(diff(x.moved, y.moved) for x, y in zip(a.layers, b.layers, strict=True))
    norms = max(diff(x.f_norm, y.f_norm) for x, y in zip(a.layers, b.layers, strict=True))
    ga, gb = grouped(a), grouped(b)
    words = max(diff(x.moved, y.moved) for x, y in zip(ga.layers, gb.layers, strict=True))
    print(f"{label}: max |moved| diff {moved:.2e}, f_norm {norms:.2e}, grouped moved {words:.2e}")
    if cpu.kind == "encoder":
        return
    ha, hb = head_logits(cpu, a), head_logits(dev, b)
    la, lb = logit_lens(cpu, a), logit_lens(dev, b)
    rows = float((ha.logit - hb.logit).abs().max())
    total = float(hb.logit.sum() - hb.attrs["model_logit"])
    lens = float((la.final_p - lb.final_p).abs().max())
    print(f"{label}: head_logits rows diff {rows:.2e}, rows minus the model's logit on the "
          f"device {total:+.2e}; logit_lens final_p diff {lens:.2e}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run with --device cpu for a smoke run")
    dtypes = ["float32"] if args.device == "cpu" else ["float32", "bfloat16"]
    for dtype in dtypes:
        one(None, TEXT, args.device, dtype)
        one("attnviz-char-zh-en", CHAR_TEXT, args.device, dtype)


if __name__ == "__main__":
    main()
