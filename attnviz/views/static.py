"""A Plotly figure as a static, self-contained SVG: the fallback a notebook keeps beside the
interactive figure, so an exported notebook (nbconvert HTML, GitHub, a front end without plotly's
extension) still shows every view. No JavaScript, no network.

It draws what attnviz's views use: heatmaps (as one embedded PNG), images (the mosaic), bars and
scatter lines, markers and text, with the title and the axes' tick labels. Every text (tokens
included) is escaped. Hover, colour bars and legends are left to the interactive figure.
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from attnviz.views.images import png_data_uri

WIDTH, HEIGHT = 720, 420
MARGIN = {"l": 110, "r": 20, "t": 44, "b": 70}
MAX_TICKS = 40
_RGB = re.compile(r"rgba?\(([^)]*)\)")


def colour_rgb(colour: str) -> tuple[int, int, int]:
    """ "#2f6db3", "#333", "rgb(1,2,3)" or "rgba(1,2,3,0.5)" -> (r, g, b); anything else grey."""
    colour = str(colour).strip()
    if colour.startswith("#"):
        hexa = colour[1:]
        if len(hexa) == 3:
            hexa = "".join(c * 2 for c in hexa)
        return tuple(int(hexa[i : i + 2], 16) for i in (0, 2, 4))  # type: ignore[return-value]
    found = _RGB.match(colour)
    if found:
        parts = [float(p) for p in found.group(1).split(",")[:3]]
        return tuple(int(round(p)) for p in parts)  # type: ignore[return-value]
    return (128, 128, 128)


def _scale(trace: go.Heatmap) -> list[tuple[float, tuple[int, int, int]]]:
    scale = trace.colorscale or pio.templates["plotly"].layout.colorscale.sequential
    return [(float(at), colour_rgb(c)) for at, c in scale]


def heat_png(z: np.ndarray, scale: list, zmin: float, zmax: float) -> str:
    """A matrix coloured through a Plotly colour scale, one pixel a cell; NaN white."""
    z = np.asarray(z, dtype=np.float64)  # [rows, cols]
    span = zmax - zmin if zmax > zmin else 1.0
    t = np.clip((z - zmin) / span, 0, 1)
    stops = np.array([s for s, _ in scale])
    img = np.stack(
        [np.interp(np.nan_to_num(t), stops, [c[i] for _, c in scale]) for i in range(3)], -1
    )  # [rows, cols, rgb]
    img[np.isnan(z)] = 255
    return png_data_uri(np.round(img).astype(np.uint8))


def _num(values: object) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


class _Axes:
    """Data -> pixel mapping of one plot area."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float], box: tuple) -> None:
        self.x, self.y, (self.left, self.top, self.w, self.h) = x, y, box

    def px(self, v: np.ndarray | float) -> np.ndarray | float:
        return self.left + (np.asarray(v) - self.x[0]) / ((self.x[1] - self.x[0]) or 1) * self.w

    def py(self, v: np.ndarray | float) -> np.ndarray | float:
        # y[0] is drawn at the bottom; a reversed axis passes y = (top value, bottom value)
        return (
            self.top
            + self.h
            - (np.asarray(v) - self.y[0]) / ((self.y[1] - self.y[0]) or 1) * self.h
        )


def _range(axis: object, data: list[np.ndarray], reversed_: bool = False) -> tuple[float, float]:
    given = getattr(axis, "range", None)
    if given is not None:
        return float(given[0]), float(given[1])
    vals = np.concatenate([d[np.isfinite(d)] for d in data if d.size]) if data else np.zeros(1)
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 1.0)
    pad = (hi - lo) * 0.05 or 0.5
    lo, hi = lo - pad, hi + pad
    return (hi, lo) if reversed_ else (lo, hi)


def plain(label: object) -> str:
    """A Plotly label as the text it shows: the views escape tokens for Plotly (which reads some
    HTML), so undo that and drop Plotly's line breaks; the caller escapes it again for SVG."""
    return html.unescape(re.sub(r"<br\s*/?>", " ", str(label)))


def _text(x: float, y: float, s: object, anchor: str = "middle", size: int = 11, extra="") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {extra}>'
        f"{html.escape(plain(s))}</text>"
    )


def _ticks(labels: list, at: list[float], ax: _Axes, axis: str) -> list[str]:
    step = max(1, math.ceil(len(labels) / MAX_TICKS))
    widest = max((len(str(s)) for s in labels), default=0) * 6.5  # px at font size 11
    crowded = widest * len(labels) / step > ax.w
    out = []
    for i in range(0, len(labels), step):
        if axis == "x" and crowded:  # slanted, so neighbours do not overlap
            x, y = float(ax.px(at[i])), ax.top + ax.h + 12
            out.append(
                _text(x, y, labels[i], "end", extra=f'transform="rotate(-35 {x:.1f} {y:.1f})"')
            )
        elif axis == "x":
            out.append(_text(float(ax.px(at[i])), ax.top + ax.h + 14, labels[i]))
        else:
            y = float(ax.py(at[i])) + 4
            out.append(_text(ax.left - 6, y, labels[i], anchor="end"))
    return out


def _layout_ticks(layout: go.Layout, ax: _Axes) -> list[str]:
    out = []
    for name in ("x", "y"):
        axis = getattr(layout, f"{name}axis")
        if axis.tickvals is not None and axis.ticktext is not None and axis.showticklabels != False:  # noqa: E712
            out += _ticks(list(axis.ticktext), list(axis.tickvals), ax, name)
    return out


def _hbars(b, box: tuple) -> list[str]:
    """Horizontal bars (categories down the side, values along the bottom), the first at the
    bottom as Plotly draws them."""
    cats, vals = list(b.y), _num(b.x)
    lo, hi = min(0.0, float(np.nanmin(vals))), max(0.0, float(np.nanmax(vals))) or 1.0
    ax = _Axes((lo, hi), (-0.5, len(cats) - 0.5), box)
    colours = b.marker.color if b.marker and b.marker.color is not None else "#2f6db3"
    out = []
    for i, v in enumerate(vals):
        c = colours[i] if isinstance(colours, list | tuple) else colours
        x0, x1 = sorted((float(ax.px(0.0)), float(ax.px(v))))
        y0, y1 = sorted((float(ax.py(i - 0.4)), float(ax.py(i + 0.4))))
        out.append(
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
            f'fill="{html.escape(str(c))}"/>'
        )
    return out + _ticks(cats, list(range(len(cats))), ax, "y")


def figure_svg(fig: go.Figure) -> str:
    """One figure as an <svg> element (a string), sized like the figure."""
    layout = fig.layout
    width, height = int(layout.width or WIDTH), int(layout.height or HEIGHT)
    box = (MARGIN["l"], MARGIN["t"], width - MARGIN["l"] - MARGIN["r"],
           height - MARGIN["t"] - MARGIN["b"])  # fmt: skip
    body: list[str] = []
    title = layout.title.text if layout.title and layout.title.text else ""
    heat = [t for t in fig.data if t.type == "heatmap"]
    bars = [t for t in fig.data if t.type == "bar"]
    if heat:  # categorical axes: cell i at i
        z = np.asarray(heat[0].z, dtype=np.float64)  # [rows, cols]
        rows, cols = z.shape
        flip = layout.yaxis.autorange == "reversed"
        ax = _Axes((-0.5, cols - 0.5), (rows - 0.5, -0.5) if flip else (-0.5, rows - 0.5), box)
        for t in heat:
            zz = np.asarray(t.z, dtype=np.float64)
            lo = t.zmin if t.zmin is not None else float(np.nanmin(zz))
            hi = t.zmax if t.zmax is not None else float(np.nanmax(zz))
            uri = heat_png(zz if flip else zz[::-1], _scale(t), lo, hi)
            body.append(
                f'<image x="{box[0]}" y="{box[1]}" width="{box[2]}" height="{box[3]}" '
                f'preserveAspectRatio="none" style="image-rendering:pixelated" href="{uri}"/>'
            )
        xs = list(heat[0].x) if heat[0].x is not None else list(range(cols))
        ys = list(heat[0].y) if heat[0].y is not None else list(range(rows))
        body += _ticks(xs, list(range(cols)), ax, "x") + _ticks(ys, list(range(rows)), ax, "y")
    elif bars and bars[0].orientation == "h":
        body += _hbars(bars[0], box)
    elif bars:
        b = bars[0]
        cats = list(b.x) if b.x is not None else list(range(len(b.y)))
        vals = _num(b.y)
        ax = _Axes((-0.5, len(cats) - 0.5), (min(0.0, np.nanmin(vals)), np.nanmax(vals) or 1), box)
        colours = b.marker.color if b.marker and b.marker.color is not None else "#2f6db3"
        for i, v in enumerate(vals):
            c = colours[i] if isinstance(colours, list | tuple) else colours
            y0, y1 = sorted((float(ax.py(0.0)), float(ax.py(v))))
            x0 = float(ax.px(i - 0.4))
            body.append(
                f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{float(ax.px(i + 0.4)) - x0:.1f}" '
                f'height="{y1 - y0:.1f}" fill="{html.escape(str(c))}"/>'
            )
        body += _ticks(cats, list(range(len(cats))), ax, "x")
        body += [_text(box[0] - 6, float(ax.py(ax.y[1])) + 4, f"{ax.y[1]:.3g}", anchor="end")]
    else:  # numeric axes: images, lines, markers, text
        xs, ys = [], []
        for t in fig.data:
            if t.type == "image":
                h_, w_ = _image_size(t)
                x0, y0, dx, dy = t.x0 or 0, t.y0 or 0, t.dx or 1, t.dy or 1
                xs.append(np.array([x0 - dx / 2, x0 + (w_ - 0.5) * dx]))
                ys.append(np.array([y0 - dy / 2, y0 + (h_ - 0.5) * dy]))
            elif t.x is not None and t.y is not None:
                xs.append(_num(t.x))
                ys.append(_num(t.y))
        flip = any(t.type == "image" for t in fig.data) or layout.yaxis.autorange == "reversed"
        ax = _Axes(_range(layout.xaxis, xs), _range(layout.yaxis, ys, flip), box)
        for t in fig.data:
            body += _numeric_trace(t, ax)
        body += _layout_ticks(layout, ax)
    head = _text(8, 24, title, anchor="start", size=15, extra='font-weight="600"') if title else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" fill="#333">'
        f'<rect width="{width}" height="{height}" fill="white"/>{head}{"".join(body)}</svg>'
    )


def _image_size(t: go.Image) -> tuple[int, int]:
    if t.z is not None:
        z = np.asarray(t.z)
        return z.shape[0], z.shape[1]
    import base64
    import io

    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(t.source.split(",", 1)[1]))) as im:
        return im.height, im.width


def _numeric_trace(t: object, ax: _Axes) -> list[str]:
    if t.type == "image":
        h_, w_ = _image_size(t)
        x0, y0, dx, dy = t.x0 or 0, t.y0 or 0, t.dx or 1, t.dy or 1
        uri = t.source or png_data_uri(np.asarray(t.z, dtype=np.uint8))
        left, right = float(ax.px(x0 - dx / 2)), float(ax.px(x0 + (w_ - 0.5) * dx))
        top, bottom = float(ax.py(y0 - dy / 2)), float(ax.py(y0 + (h_ - 0.5) * dy))
        y_, h = min(top, bottom), abs(bottom - top)
        return [
            f'<image x="{left:.1f}" y="{y_:.1f}" width="{right - left:.1f}" height="{h:.1f}" '
            f'preserveAspectRatio="none" style="image-rendering:pixelated" href="{uri}"/>'
        ]
    if t.x is None or t.y is None:
        return []
    x, y, mode = ax.px(_num(t.x)), ax.py(_num(t.y)), t.mode or "lines"
    out = []
    opacity = t.opacity if t.opacity is not None else 1
    if "lines" in mode:
        line = t.line or {}
        colour, width = line.color or "#2f6db3", line.width or 2
        path, pen = [], "M"
        for a, b in zip(x, y, strict=True):
            if not (np.isfinite(a) and np.isfinite(b)):
                pen = "M"
                continue
            path.append(f"{pen}{a:.1f},{b:.1f}")
            pen = "L"
        if path:
            out.append(
                f'<path d="{" ".join(path)}" fill="none" stroke="{html.escape(str(colour))}" '
                f'stroke-width="{width}" stroke-opacity="{opacity:.3f}"/>'
            )
    if "text" in mode and t.text is not None:
        right = "right" in (t.textposition or "")
        for a, b, s in zip(x, y, t.text, strict=False):
            if np.isfinite(a) and np.isfinite(b):
                out.append(_text(a + (8 if right else -8), b + 4, s, "start" if right else "end"))
    if "markers" in mode and t.marker is not None and t.marker.color != "rgba(0,0,0,0)":
        for a, b in zip(x, y, strict=True):
            if np.isfinite(a) and np.isfinite(b):
                out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="#333"/>')
    return out


def figures_html(figures: list[go.Figure]) -> str:
    """Every figure as inline SVG in one self-contained HTML fragment."""
    return "".join(f'<div class="attnviz-static">{figure_svg(f)}</div>' for f in figures)
