"""Colour in attnviz: one palette, one highlight colour, and the colour scales of weights.

A scale here changes only which colour a value gets, never the value: a heatmap keeps the true
weights (hover and colour bar show them) and the non-linear part lives in the colour stops. Weights
spread thin over a long row (a 478-token row has most weights near 1/478) need "power" or "log".
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from plotly.colors import get_colorscale, sample_colorscale

from attnviz.views.frames import to_numpy

# One palette for everything drawn in series: lines of a sweep, heads overlaid in the lines view,
# K/V groups in the sharing diagram. The first colour is attnviz's blue, the second the highlight.
PALETTE = (
    "#2f6db3", "#e4572e", "#29a36a", "#9b59b6", "#f0a202", "#17becf",
    "#d6336c", "#7f7f7f", "#8c564b", "#bcbd22", "#1f3b73", "#ff7f0e",
)  # fmt: skip
BLUE = PALETTE[0]  # bars, dials
HIGHLIGHT = PALETTE[1]  # the chosen row, column, token or head, everywhere
GREY = "#b8b8b8"  # the unchanged model beside the changed one
WEIGHTS_SCALE = "Blues"
SIGNED_SCALE = "RdBu_r"


def rgb(colour: str) -> tuple[int, int, int]:
    """ "#e4572e" -> (228, 87, 46), for images drawn pixel by pixel."""
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))  # type: ignore[return-value]


SCALES = ("fixed", "max", "power", "log")
GAMMA = 0.5  # "power": colour ∝ (w / max)^γ
# A picture (the overview's thumbnails, a long head) colours by (w / max)^γ under each scale: the
# power scale's γ, half of it for log, none for the linear ones.
PICTURE_GAMMA = {"power": GAMMA, "log": GAMMA / 2, "fixed": 1.0, "max": 1.0}
DECADES = 3  # "log": colour over log10(w) from max / 10^DECADES to max
STOPS = 33


def colour_scale(
    matrix: torch.Tensor | np.ndarray, mode: str, base: str = WEIGHTS_SCALE
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


@functools.cache
def named_scale(name: str) -> list[list]:
    # What plotly's validation does to a named scale: plotly.js does not know plotly.py's names
    # ("RdBu_r" is plotly.py's reversal; its "Blues" is not plotly.js's), so send the colours.
    return [[float(at), colour] for at, colour in get_colorscale(name)]


# Colour levels of a mosaic: with white, the bars' grey and the silenced heads' X it stays a
# 256-colour palette PNG (one byte a pixel; see png_data_uri).
MOSAIC_LEVELS = 252


@functools.cache
def colour_lut(colorscale: str, n: int = 256) -> np.ndarray:
    rgb = sample_colorscale(colorscale, list(np.linspace(0, 1, n)), colortype="tuple")
    return (np.array(rgb) * (255 if max(max(c) for c in rgb) <= 1 else 1)).astype(np.uint8)


def levels(norm: torch.Tensor, gamma: float) -> np.ndarray:
    """Weights scaled to 0..1 -> which of the MOSAIC_LEVELS colours of the weights scale each
    is drawn in, by norm^gamma: uint8 [...] (a palette image's pixels)."""
    return (norm.clamp(0, 1) ** gamma * (MOSAIC_LEVELS - 1)).round().to(torch.uint8).numpy()


def coloured(norm: torch.Tensor, gamma: float) -> np.ndarray:
    """Weights scaled to 0..1 -> RGB uint8 [..., 3] in one of MOSAIC_LEVELS colours of the
    weights scale, by norm^gamma (the mosaic's thumbnails, its focus bars, a long head's image)."""
    return colour_lut(WEIGHTS_SCALE, MOSAIC_LEVELS)[levels(norm, gamma)]


def scale_gamma(mode: str) -> float:
    """The γ a picture of weights is coloured with under a scale mode (PICTURE_GAMMA)."""
    return PICTURE_GAMMA[mode]
