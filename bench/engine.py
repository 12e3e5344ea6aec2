"""trace_text against a bare scaled_dot_product_attention stack of the same shape.

Run: .venv/bin/python bench/engine.py  (prints a table of times and ratios; no assertions)
Both sides start from text-free tensors of the same size and do the same projections and W_O; the
trace side also tokenizes, embeds and keeps every intermediate (scores, weights, z) for display.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnviz import StackConfig, trace_text  # noqa: E402
from attnviz.engine.stack import build_weights, inputs  # noqa: E402
from attnviz.engine.tokenize import tokenize  # noqa: E402

D_MODEL, HEADS, LAYERS = 512, 8, 2


def bare_stack(x: torch.Tensor, weights, config: StackConfig) -> torch.Tensor:
    n, h, dh = x.shape[0], config.n_heads, config.d_head
    with torch.inference_mode():
        for w in weights:
            q = (x @ w.w_q).view(n, h, dh).transpose(0, 1)  # [head, n, d_head]
            k = (x @ w.w_k).view(n, h, dh).transpose(0, 1)  # [head, n, d_head]
            v = (x @ w.w_v).view(n, h, dh).transpose(0, 1)  # [head, n, d_head]
            z = F.scaled_dot_product_attention(q, k, v, scale=config.scale)  # [head, n, d_head]
            x = z.transpose(0, 1).reshape(n, h * dh) @ w.w_o  # [n, d_model]
    return x


def median_time(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(1)
    config = StackConfig(d_model=D_MODEL, n_heads=HEADS, n_layers=LAYERS)
    weights = build_weights(config)
    print(f"d_model={D_MODEL} h={HEADS} layers={LAYERS}, 1 torch thread, median of reps")
    print(f"{'n':>5} {'trace_text ms':>14} {'bare SDPA ms':>13} {'ratio':>7}")
    for n in (16, 128, 512):
        text = " ".join(f"w{i}" for i in range(n))
        assert len(tokenize(text)) == n
        x = inputs(tokenize(text), config)
        reps = 30 if n < 512 else 10
        t_trace = median_time(lambda text=text: trace_text(text, config), reps)
        t_bare = median_time(lambda x=x: bare_stack(x, weights, config), reps)
        print(f"{n:>5} {t_trace * 1e3:>14.2f} {t_bare * 1e3:>13.2f} {t_trace / t_bare:>7.2f}")


if __name__ == "__main__":
    main()
