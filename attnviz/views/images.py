"""Images: every head as one mosaic, as a compact PNG (a 512 x 512 map is tens of kilobytes as a
palette PNG, ~1.5 MB as numbers; one map as a picture is attnviz.views.maps'). No streamlit."""

from __future__ import annotations

import base64
import functools
import io
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.views.colour import (
    HIGHLIGHT,
    MOSAIC_LEVELS,
    WEIGHTS_SCALE,
    colour_lut,
    levels,
    rgb,
)
from attnviz.views.spec import figure, layout_dict


@dataclass(frozen=True)
class Tiles:
    """How a mosaic draws each layer x head: average-pooled to at most `thumb` pixels a side,
    `gap` pixels apart, each scaled to its own maximum (so faint heads still show their pattern)
    unless `shared`, coloured by (w/max)^gamma (gamma < 1: weights spread thin over a long row
    still show). `focus` (a query position) draws only that token's row in each, as bars over
    the keys; `marked` heads (silenced ones) are crossed out with a dark grey X; `selected` is
    outlined."""

    thumb: int = 48
    gap: int = 4
    shared: bool = False
    gamma: float = 1.0
    focus: int | None = None
    marked: tuple[tuple[int, int], ...] = ()
    selected: tuple[int, int] | None = None


def mosaic(
    weights: torch.Tensor, tiles: Tiles = Tiles(), title: str = "", height: int | None = None
) -> go.Figure:
    """Every layer x head of weights [layer, head, q, k] as a thumbnail in one RGB image (one
    go.Image: fast even at n = 512)."""
    n_layers, n_heads, n_q, n_k = weights.shape
    th, tw = _thumb_size(n_q, n_k, tiles.thumb)
    shared_scale, gamma = tiles.shared, tiles.gamma
    if tiles.focus is not None:  # `weights` may be one row expanded to n_q (a lean trace's focus)
        return _focus_mosaic(weights, (th, tw), tiles, (title, height))
    flat = weights.reshape(n_layers * n_heads, 1, n_q, n_k).float()  # [L*H, 1, q, k]
    # Long inputs are average-pooled down; short ones are blown up with nearest (crisp cells).
    if th >= n_q and tw >= n_k:
        pooled = flat.repeat_interleave(th // n_q, 2).repeat_interleave(tw // n_k, 3)[:, 0]
    else:
        pooled = torch.nn.functional.adaptive_avg_pool2d(flat, (th, tw))[:, 0]  # [L*H, th, tw]
    if shared_scale:
        norm = pooled / pooled.amax().clamp_min(1e-12)
    else:
        norm = pooled / pooled.amax(dim=(1, 2), keepdim=True).clamp_min(1e-12)
    level = levels(norm, gamma).reshape(n_layers, n_heads, th, tw)  # [L, H, th, tw] palette
    return _mosaic_figure(level, tiles, title, height)


def _focus_mosaic(weights, size: tuple[int, int], tiles: Tiles, frame: tuple) -> go.Figure:
    """One query's row in every head: a bar per key (max-pooled to tw columns, so peaks survive)."""
    n_layers, n_heads, n_q, n_k = weights.shape
    (th, tw), focus = size, tiles.focus
    if not 0 <= focus < n_q:
        raise ValueError(f"focus={focus} must be a query position 0..{n_q - 1}")
    row = weights[:, :, focus, :].reshape(n_layers * n_heads, 1, n_k).float()  # [L*H, 1, k]
    if tw >= n_k:
        pooled = row.repeat_interleave(tw // n_k, 2)[:, 0]  # [L*H, tw]
    else:
        pooled = torch.nn.functional.adaptive_max_pool1d(row, tw)[:, 0]  # [L*H, tw]
    top = pooled.amax() if tiles.shared else pooled.amax(dim=1, keepdim=True)
    norm = (pooled / top.clamp_min(1e-12)).clamp(0, 1)  # [L*H, tw] bar heights: linear
    level = levels(norm, tiles.gamma)  # [L*H, tw] palette
    # a bar fills pixel row y of a column when it reaches above it (at least 1 px for any weight)
    bar = (norm * th).ceil().clamp(min=1) * (pooled > 0)  # [L*H, tw]
    ys = torch.arange(th, 0, -1).view(1, th, 1)  # [1, th, 1] height of each pixel row's top
    filled = (ys <= bar.unsqueeze(1)).numpy()  # [L*H, th, tw]
    img = np.where(filled, level[:, None], np.uint8(BARS_BACKGROUND))  # [L*H, th, tw] palette
    return _mosaic_figure(img.reshape(n_layers, n_heads, th, tw), tiles, *frame)


def _mosaic_figure(tile_levels, tiles: Tiles, title: str, height: int | None) -> go.Figure:
    """`tile_levels` [L, H, th, tw]: each pixel's index into PALETTE (a weight level, or the
    focus bars' background). The image is built and written as palette indices: one byte a
    pixel, no colour looked up and found again (bench/load.py: a class's page script)."""
    n_layers, n_heads, th, tw = tile_levels.shape
    gap, selected, marked = tiles.gap, tiles.selected, tiles.marked
    cell_h, cell_w = th + gap, tw + gap
    img = np.full((n_layers * cell_h + gap, n_heads * cell_w + gap), WHITE, dtype=np.uint8)
    # every tile at once: a [layer, row, head, column] grid of cells, each a tile and its gap
    cells = np.full((n_layers, cell_h, n_heads, cell_w), WHITE, dtype=np.uint8)
    cells[:, :th, :, :tw] = np.asarray(tile_levels).transpose(0, 2, 1, 3)  # [L, th, H, tw]
    img[gap:, gap:] = cells.reshape(n_layers * cell_h, n_heads * cell_w)
    for layer, head in marked:
        if 0 <= layer < n_layers and 0 <= head < n_heads:
            y0, x0 = gap + layer * cell_h, gap + head * cell_w
            steps = np.arange(max(th, tw))
            ys = y0 + steps * th // max(th, tw)
            xs = x0 + steps * tw // max(th, tw)
            for dx in (0, 1):  # two pixels wide, so it shows on small thumbnails
                img[ys, np.minimum(xs + dx, x0 + tw - 1)] = CROSS
                img[ys, np.maximum(x0 + tw - 1 - (xs - x0) - dx, x0)] = CROSS
    if selected is not None:
        layer, head = selected
        y0, x0 = gap + layer * cell_h, gap + head * cell_w
        colour = SELECTED
        for d in range(1, min(gap, 2) + 1):
            img[y0 - d, x0 - d : x0 + tw + d] = colour
            img[y0 + th + d - 1, x0 - d : x0 + tw + d] = colour
            img[y0 - d : y0 + th + d, x0 - d] = colour
            img[y0 - d : y0 + th + d, x0 + tw + d - 1] = colour
    # A compressed image, not the raw RGB array: plotly would send that as base64 JSON (~1.9 MB
    # at any n); as PNG it is tens of kilobytes and the browser decodes it.
    image = dict(type="image", source=_png_uri(img, _palette()), hoverinfo="skip")
    # One invisible marker per thumbnail: hovering names the head, clicking selects it.
    centres = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    markers = dict(
        type="scatter",
        x=[gap + h * cell_w + tw / 2 for _, h in centres],
        y=[gap + la * cell_h + th / 2 for la, _ in centres],
        mode="markers",
        marker=dict(size=max(12, min(th, tw)), symbol="square", color="rgba(0,0,0,0)"),
        customdata=centres,
        hovertemplate="layer %{customdata[0]}, head %{customdata[1]}<extra></extra>",
        showlegend=False,
    )
    xaxis = dict(
        tickmode="array",
        tickvals=[gap + h * cell_w + tw / 2 for h in range(n_heads)],
        ticktext=[f"H{h}" for h in range(n_heads)],
        side="bottom",
        showgrid=False,
        zeroline=False,
        range=[-0.5, img.shape[1] - 0.5],
        constrain="domain",
    )
    yaxis = dict(
        tickmode="array",
        tickvals=[gap + layer * cell_h + th / 2 for layer in range(n_layers)],
        ticktext=[f"L{layer}" for layer in range(n_layers)],
        showgrid=False,
        zeroline=False,
        range=[img.shape[0] - 0.5, -0.5],  # image rows run downwards
        scaleanchor="x",
        constrain="domain",
    )
    if height is None:
        # Keep thumbnails near their pixel size: no tall empty band around a one-layer mosaic.
        height = min(900, max(180, int(img.shape[0] * 1.6) + 70))
    return figure([image, markers], layout_dict(title, height, dict(xaxis=xaxis, yaxis=yaxis)))


def png_data_uri(img: np.ndarray) -> str:
    """An RGB uint8 image [h, w, 3] as a PNG data URI, lossless. An image of at most 256 colours
    (the mosaic: its weight levels, white, greys and the selection's orange) is written with a
    palette: one byte a pixel. zlib level 1: several times faster than level 6 for ~10% more bytes
    (bench/load.py measures what a mosaic sends). The mosaic itself is built as indices."""
    h, w, _ = img.shape
    flat = img.reshape(-1, 3).astype(np.uint32)  # [h*w, rgb]
    packed = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]  # [h*w]
    colours, index = _palette_index(packed)
    if len(colours) > 256:
        return _png_uri(np.ascontiguousarray(img, dtype=np.uint8))
    rgb = np.stack([(colours >> 16) & 255, (colours >> 8) & 255, colours & 255], axis=1)
    return _png_uri(index.reshape(h, w).astype(np.uint8), rgb.astype(np.uint8))


def _png_uri(img: np.ndarray, palette: np.ndarray | None = None) -> str:
    """A PNG data URI of an RGB image [h, w, 3], or of palette indices [h, w] into `palette`
    [colours, 3] (uint8 both), zlib level 1."""
    from PIL import Image

    im = Image.fromarray(img)
    if palette is not None:
        im.putpalette(palette.tobytes())
    buf = io.BytesIO()
    im.save(buf, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# The colours the mosaic and a long head's image are drawn in: the weights scale's levels, white,
# the focus bars' background, the crossed-out heads' grey and the selection's orange; the mosaic's
# palette indices of the four after the levels.
_KNOWN_EXTRA = ((255, 255, 255), (246, 246, 246), (60, 60, 60), rgb(HIGHLIGHT))
WHITE, BARS_BACKGROUND, CROSS, SELECTED = range(MOSAIC_LEVELS, MOSAIC_LEVELS + 4)


@functools.cache
def _palette() -> np.ndarray:
    """The mosaic's palette: MOSAIC_LEVELS colours of the weights scale, then _KNOWN_EXTRA."""
    rgb = np.concatenate([colour_lut(WEIGHTS_SCALE, MOSAIC_LEVELS), np.array(_KNOWN_EXTRA)])
    return rgb.astype(np.uint8)


@functools.cache
def _known_palette() -> tuple[np.ndarray, int, np.ndarray]:
    """The known colours packed as 0xRRGGBB (sorted), a modulus under which they all differ, and
    the table from (colour % modulus) to the colour's index: one gather instead of a sort."""
    rgb = _palette().astype(np.uint32)
    colours = np.unique((rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2])
    modulus = next(
        m for m in range(len(colours), 1 << 20) if len(np.unique(colours % m)) == len(colours)
    )
    table = np.zeros(modulus, dtype=np.int64)
    table[colours % modulus] = np.arange(len(colours))
    return colours, modulus, table


def _palette_index(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct colours, each pixel's index into them) for packed 0xRRGGBB pixels: by the known
    palette when every pixel is in it (~4x faster than np.unique at 510 tokens), else np.unique."""
    colours, modulus, table = _known_palette()
    index = table[packed % modulus]
    if np.array_equal(colours[index], packed):
        return colours, index
    return np.unique(packed, return_inverse=True)


def thumb_drawn(thumb: int, zoom: float, gap: int = 4) -> int:
    """The thumbnail's side in the image: `thumb`, or where the mosaic is drawn at `zoom` < 1/2
    (30 layers in 820 px: SmolLM2) the side that gives twice the pixels drawn (a 2x screen's),
    at most: a third of the bytes and of the PNG's time for the same look (bench/words.py)."""
    return max(8, min(thumb, int(2 * zoom * (thumb + gap)) - gap))


def _thumb_size(n_q: int, n_k: int, thumb: int) -> tuple[int, int]:
    def side(n: int) -> int:
        return n * max(1, thumb // n) if n <= thumb else thumb

    return side(n_q), side(n_k)
