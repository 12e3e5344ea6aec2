"""Colour scales for weights that spread thin: a 478-token row has most weights near 1/478.

A scale here changes only which colour a value gets, never the value: the heatmap keeps the true
weights (hover and colour bar show them) and the non-linear part lives in the colour stops.
"""

from __future__ import annotations

import numpy as np
import torch
from plotly.colors import sample_colorscale

from attnviz.views.frames import to_numpy

SCALES = ("fixed", "max", "power", "log")
GAMMA = 0.5  # "power": colour ∝ (w / max)^γ
DECADES = 3  # "log": colour over log10(w) from max / 10^DECADES to max
STOPS = 33


def colour_scale(
    matrix: torch.Tensor | np.ndarray, mode: str, base: str = "Blues"
) -> dict[str, object]:
    """zmin, zmax and a colorscale for `matrix` under `mode`, plus `top` (the zmax used).

    fixed: 0 to 1, comparable across heads. max: 0 to this matrix's largest value, linear.
    power: 0 to max with colour ∝ (w/max)^0.5. log: colour ∝ log10(w), max/1000 to max.
    """
    if mode not in SCALES:
        raise ValueError(f"colour scale {mode!r} is not one of {', '.join(SCALES)}")
    z = to_numpy(matrix)
    finite = z[np.isfinite(z)]
    top = float(finite.max()) if finite.size and float(finite.max()) > 0 else 1.0
    if mode == "fixed":
        return dict(colorscale=base, zmin=0.0, zmax=1.0, top=1.0)
    if mode == "max":
        return dict(colorscale=base, zmin=0.0, zmax=top, top=top)
    s = np.linspace(0.0, 1.0, STOPS)
    if mode == "power":
        positions, shades = s, s**GAMMA
    else:
        # value positions spaced evenly in log10 from max/10^DECADES to max; below: the lightest
        positions = np.concatenate([[0.0], 10.0 ** (DECADES * (s - 1.0))])
        shades = np.concatenate([[0.0], s])
    colours = sample_colorscale(base, [float(v) for v in shades])
    stops = [[float(p), c] for p, c in zip(positions, colours, strict=True)]
    stops[-1][0] = 1.0
    return dict(colorscale=stops, zmin=0.0, zmax=top, top=top)
