"""Activation patching over prompt pairs (attnviz.patch_pairs) on one local Ray worker, against
the same pairs patched in this process with attnviz.patch (the baseline, in the same run): the
run's wall time with Ray's and the worker's start, and a rerun on the finished folder (no Ray).

Run:  .venv/bin/python bench/patch_pairs.py [--model attnviz-char-zh-en] [--over heads]

The pairs are tests/test_patch_pairs.py's: three of equal token counts and one that is skipped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnviz  # noqa: E402
from attnviz.engine.hooked import load_model  # noqa: E402
from tests.test_patch_pairs import PAIRS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="attnviz-char-zh-en")
    parser.add_argument("--over", default="heads", choices=("heads", "residual"))
    args = parser.parse_args()
    model = load_model(args.model, device="cpu")
    start = time.perf_counter()
    for pair in PAIRS[:3]:
        attnviz.patch(model, pair["clean"], pair["corrupt"], over=args.over)
    base = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        frame = attnviz.patch_pairs(args.model, PAIRS, out, over=args.over, workers=1)
        ray_s = time.perf_counter() - start
        start = time.perf_counter()
        attnviz.patch_pairs(args.model, PAIRS, out, over=args.over, workers=1)
        again = time.perf_counter() - start
    print(f"{args.model}, over={args.over}, {len(PAIRS)} pairs ({len(frame.attrs['skipped'])} "
          f"skipped), {len(frame)} components")  # fmt: skip
    print(f"in this process (attnviz.patch x 3): {base:.2f} s")
    print(f"patch_pairs, 1 Ray worker, Ray's start included: {ray_s:.2f} s ({ray_s / base:.0f}x)")
    print(f"patch_pairs again on the finished folder (no Ray): {again:.2f} s")


if __name__ == "__main__":
    main()
