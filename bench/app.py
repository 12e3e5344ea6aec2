"""Server time for a control change on the Playground, at n <= 64 tokens (target: 0.3 s).

Run: .venv/bin/python bench/app.py
AppTest runs the page script exactly as the server does, without a browser, so the time of one
`run()` after a widget change is the server time of that rerun. The baseline, measured in the same
run, is trace_text on the same input alone: the ratio says how much the page adds to the engine.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from attnviz import StackConfig, trace_text  # noqa: E402

REPS = 8


def timed_changes(at: AppTest, change, values) -> list[float]:
    times = []
    for value in values:
        change(at, value)
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
        assert not at.exception, at.exception
    return times


def main() -> None:
    import torch

    torch.set_num_threads(1)
    print(f"{'n':>4} {'control':<22} {'median s':>9} {'max s':>7} {'trace_text s':>13}")
    for n in (16, 64):
        text = " ".join(f"w{i}" for i in range(n))
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        at.text_area(key="text").set_value(text).run()
        cases = {
            "heads slider": (
                lambda a, v: a.select_slider(key="heads").set_value(v),
                [2, 8, 4, 16, 1, 8, 2, 4][:REPS],
            ),
            "scaling toggle": (
                lambda a, v: a.toggle(key="scale").set_value(v),
                [False, True] * (REPS // 2),
            ),
            "d_model slider": (
                lambda a, v: a.select_slider(key="d_model").set_value(v),
                [128, 64, 256, 64, 32, 64, 512, 64][:REPS],
            ),
        }
        for name, (change, values) in cases.items():
            times = timed_changes(at, change, values)
            configs = [StackConfig(d_model=64, n_heads=4, use_scale=bool(i % 2)) for i in range(4)]
            base = statistics.median(
                _timed(lambda c=c, text=text: trace_text(text, c))
                for c in configs
                for _ in range(2)
            )
            print(
                f"{n:>4} {name:<22} {statistics.median(times):>9.3f} {max(times):>7.3f} "
                f"{base:>13.4f}"
            )


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
