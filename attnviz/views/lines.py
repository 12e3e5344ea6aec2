"""The lines view (BertViz's head view, and past it): query tokens on one side, key tokens on the
other, one line per query -> key pair with opacity by weight, several heads overlaid in colour.

Lines are one trace per head and opacity band, each a single polyline broken by NaN gaps (float32
typed arrays), so 512 tokens x several heads stay cheap to send. Up to SVG_LINES lines they are
SVG (go.Scatter), past it WebGL (go.Scattergl): a browser without a GPU emulates WebGL in software,
where its context alone took seconds (plotly.js alone in headless Chromium, load 6-14: 697 lines
at 512 tokens drew in 6-7 s as WebGL, 0.5-0.8 s as SVG; SVG grows with the lines, 14,691: 7 s).
No streamlit here.
"""

from __future__ import annotations

import html
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from attnviz.engine.writes import row_shares
from attnviz.views.colour import HIGHLIGHT, PALETTE
from attnviz.views.spec import FONT, escape

HEAD_COLOURS = PALETTE  # a head keeps its colour: head h is PALETTE[h % 12]
BANDS = 8  # opacity levels: a line's opacity is its band's, from its weight
LABEL_PX = 16  # pixels one token label needs along its axis (font 12: glyphs never touch)
POSITION_LABEL_PX = 64  # ... and a "position: token" label side by side in two rows
MAX_LINES = 60_000
SVG_LINES = 4_000  # up to this many lines SVG; past it WebGL (see the module's docstring)


def default_threshold(n: int) -> float:
    """The weight below which no line is drawn, by default, for n tokens."""
    return 0.01 if n <= 40 else 0.02


def is_cjk(tokens: Sequence[str]) -> bool:
    """Mostly Chinese/Japanese/Korean characters: lay the tokens out in two rows, not columns."""
    words = [
        str(tok) for tok in tokens if not (str(tok).startswith("[") and str(tok).endswith("]"))
    ]
    chars = [c for tok in words for c in tok if not c.isspace() and c != "#"]  # no [CLS], ##
    wide = sum(unicodedata.east_asian_width(c) in ("W", "F") for c in chars)
    return bool(chars) and wide >= 0.5 * len(chars)


@dataclass(frozen=True)
class LinesPick:
    """Which lines: those of `heads` at or above `threshold` (and above 0, allowed by the mask),
    inside the query and key ranges (end exclusive; None: all), through one token when `focus` is
    ("q", i) or ("k", j)."""

    heads: tuple[int, ...]
    threshold: float = 0.0
    focus: tuple[str, int] | None = None
    q_range: tuple[int, int] | None = None
    k_range: tuple[int, int] | None = None


@dataclass(frozen=True)
class LinesLook:
    """How the lines are laid out: two rows (CJK) instead of two columns, the room in pixels along
    the token axis (None: grows with n), the side titles, the legend's word for a head, the
    figure's title."""

    rows: bool = False
    length_px: int | None = None
    q_title: str = "query"
    k_title: str = "key"
    head_name: str = "head"
    title: str = ""


def select_lines(
    weights: torch.Tensor,
    pick: LinesPick,
    mask: torch.Tensor | None = None,
    max_lines: int = MAX_LINES,
) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """The (head, q index, k index, weight) arrays of the lines `pick` keeps. At most `max_lines`
    in all: the heaviest."""
    heads = list(pick.heads)
    w = weights[heads].float()  # [h, q, k]
    keep = (w > 0) & (w >= pick.threshold)  # [h, q, k]
    if mask is not None:
        keep &= mask.bool().unsqueeze(0)
    n_q, n_k = w.shape[-2:]
    rows = torch.zeros(n_q, dtype=torch.bool)
    cols = torch.zeros(n_k, dtype=torch.bool)
    rows[slice(*(pick.q_range or (0, n_q)))] = True
    cols[slice(*(pick.k_range or (0, n_k)))] = True
    if pick.focus is not None:
        side, pos = pick.focus
        if side == "q":
            rows &= torch.arange(n_q) == pos
        else:
            cols &= torch.arange(n_k) == pos
    keep &= rows.view(1, -1, 1) & cols.view(1, 1, -1)
    h, q, k = keep.nonzero(as_tuple=True)  # [lines] each
    v = w[h, q, k]  # [lines]
    if v.numel() > max_lines:
        top = torch.topk(v, max_lines).indices
        h, q, k, v = h[top], q[top], k[top], v[top]
    out = []
    for i, head in enumerate(heads):
        sel = h == i
        out.append((head, q[sel].numpy(), k[sel].numpy(), v[sel].numpy()))
    return out


def _segments(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[a0, b0, nan, a1, b1, nan, ...] as float32: one polyline that draws separate segments."""
    seg = np.full((len(a), 3), np.nan, dtype=np.float32)  # [line, 3]
    seg[:, 0], seg[:, 1] = a, b
    return seg.reshape(-1)


def layer_lines(
    trace, layer: int, pick: LinesPick, look: LinesLook, field: str = "weights"
) -> go.Figure:
    """The Lines view of one layer of a trace: a lean trace (a long input, whose n x n weights it
    never holds) gives only the window's block of the picked heads, positions counted from it.
    field="moved": each line's opacity is its key's share of what the query's row moves."""
    lt = trace.layers[layer]
    if lt.holds_maps:
        w = lt.weights if field == "weights" else row_shares(lt.moved)  # [head, q, k]
        return lines_figure(w, (trace.tokens, trace.key_tokens), lt.mask, pick, look)
    lo, hi = pick.q_range or (0, len(trace.tokens))
    klo, khi = pick.k_range or (0, len(trace.key_tokens))
    weights = torch.zeros(lt.n_heads, hi - lo, khi - klo)  # [head, q, k] the window
    for h in pick.heads:
        if field == "moved":  # a row's share needs the whole row's sum
            weights[h] = row_shares(lt.block(field, h, slice(lo, hi)))[:, klo:khi]
        else:
            weights[h] = lt.block(field, h, slice(lo, hi), slice(klo, khi))
    mask = lt.block("mask", 0, slice(lo, hi), slice(klo, khi))  # [q, k]
    focus = pick.focus
    if focus is not None:
        focus = (focus[0], focus[1] - (lo if focus[0] == "q" else klo))
    window = LinesPick(pick.heads, pick.threshold, focus)
    tokens = (trace.tokens[lo:hi], trace.key_tokens[klo:khi])
    return lines_figure(weights, tokens, mask, window, look)


def lines_figure(
    weights: torch.Tensor,
    tokens: tuple[Sequence[str], Sequence[str]],
    mask: torch.Tensor | None,
    pick: LinesPick,
    look: LinesLook = LinesLook(),
) -> go.Figure:
    """weights [head, q, k] as lines between two columns (or two rows for CJK) of the (query,
    key) tokens.

    Clicking a token marker selects it (customdata [side, position]); hover shows its whole label.
    The figure grows with n along the token axis (or takes `look.length_px`) and labels every
    k-th token that fits.
    """
    q_tokens, k_tokens = tokens
    if not pick.heads:
        raise ValueError("pick at least one head to draw")
    n_q, n_k = weights.shape[-2:]
    if len(q_tokens) != n_q or len(k_tokens) != n_k:
        raise ValueError(f"{len(q_tokens)} / {len(k_tokens)} tokens for weights of {n_q} x {n_k}")
    q_range = pick.q_range or (0, n_q)
    k_range = pick.k_range or (0, n_k)
    picked = select_lines(weights, pick, mask)
    n_show = max(q_range[1] - q_range[0], k_range[1] - k_range[0], 1)
    length_px = look.length_px or min(1800, max(360, 16 * n_show))
    fig = go.Figure()
    n_lines = _add_lines(fig, picked, (q_range[0], k_range[0]), look, n_show)
    # With few lines (a focused token), label every token a line ends at, whatever the step.
    ends = {"q": set(), "k": set()}
    if n_lines <= 80:
        for _, q, k, _ in picked:
            ends["q"].update(q.tolist())
            ends["k"].update(k.tolist())
    _token_markers(fig, tokens, (q_range, k_range), pick.focus, (look.rows, length_px), ends)
    _lay_out(fig, look, n_show, length_px, n_lines)
    return fig


def _add_lines(
    fig: go.Figure, picked: list, origin: tuple[int, int], look: LinesLook, n_show: int
) -> int:
    """The picked lines as traces, one per head and opacity band (and a legend entry per head);
    positions counted from `origin` (the first query, the first key shown). Returns how many."""
    rows, head_name = look.rows, look.head_name
    top = max((float(v.max()) for *_, v in picked if v.size), default=1.0)
    n_lines = sum(v.size for *_, v in picked)
    line_trace = go.Scatter if n_lines <= SVG_LINES else go.Scattergl
    for head, q, k, v in picked:
        colour = HEAD_COLOURS[head % len(HEAD_COLOURS)]
        band = np.minimum((v / top * BANDS).astype(int), BANDS - 1)  # [lines] 0..BANDS-1
        # the legend's entry: an empty trace at full opacity (the bands' own would be faint)
        fig.add_trace(
            line_trace(
                x=[np.nan], y=[np.nan], mode="lines", line=dict(color=colour, width=4),
                name=f"{html.escape(head_name)} {head}", legendgroup=str(head),
            )
        )  # fmt: skip
        for b in range(BANDS):
            sel = band == b
            if not sel.any():
                continue
            qs, ks = q[sel] - origin[0], k[sel] - origin[1]
            side = _segments(np.zeros(sel.sum()), np.ones(sel.sum()))  # [3 * lines]
            pos = _segments(qs, ks)  # [3 * lines]
            # Down the page = -position: Streamlit's plotly.js draws no WebGL line on a reversed
            # axis (range [n, -1]); SVG traces are fine either way.
            x, y = (pos, 1 - side) if rows else (side, -pos)
            fig.add_trace(
                line_trace(
                    x=x,
                    y=y,
                    mode="lines",
                    line=dict(color=colour, width=2 if n_show <= 80 else 1.5),
                    opacity=0.95 * (b + 0.5) / BANDS,  # ~ weight / heaviest, as BertViz
                    name=f"{html.escape(head_name)} {head}",
                    legendgroup=str(head),
                    showlegend=False,
                    hoverinfo="skip",
                    connectgaps=False,
                )
            )
    return n_lines


def _lay_out(fig: go.Figure, look: LinesLook, n_show: int, length_px: int, n_lines: int) -> None:
    """The axes (tokens along one, the query and key sides on the other), size and legend."""
    rows = look.rows
    axis_tokens = dict(showgrid=False, zeroline=False, showticklabels=False)
    axis_sides = dict(
        showgrid=False,
        zeroline=False,
        tickmode="array",
        tickvals=[0, 1],
        ticktext=[f"<b>{html.escape(look.q_title)}</b>", f"<b>{html.escape(look.k_title)}</b>"],
        fixedrange=True,
    )
    if rows:
        fig.update_xaxes(range=[-1, n_show], **axis_tokens)
        sides = dict(axis_sides, tickvals=[1, 0], range=[-0.35, 1.35])
        fig.update_yaxes(**sides)
        height = 420
    else:
        pad = max(1.0, 12 * n_show / length_px)  # 12 px above the first token and below the last
        fig.update_yaxes(range=[-(n_show - 1) - pad, pad], **axis_tokens)
        fig.update_xaxes(range=[-0.9, 1.9], side="top", **axis_sides)
        height = length_px + 90
    fig.update_layout(
        title=dict(text=html.escape(look.title), x=0, xanchor="left", font=dict(size=15)),
        height=height,
        # two rows: room at both ends for the first and last labels (drawn whole, unclipped)
        margin=dict(l=40 if rows else 10, r=40 if rows else 10, t=60 if look.title else 30, b=10),
        font=FONT,
        plot_bgcolor="white",
        legend=dict(orientation="h", y=-0.02 if rows else 1.0, yanchor="top"),
        dragmode="pan",
        clickmode="event+select",
        meta=dict(lines=int(n_lines)),
    )


def _token_markers(fig, tokens, ranges, focus, layout, ends) -> None:
    """One marker per token (hover: its whole label; click: focus it), every k-th labelled, and
    the `ends` of the drawn lines labelled with the others around them cleared so none overlap.
    `tokens`, `ranges`: (query, key) each; `layout`: (rows, length_px)."""
    rows, length_px = layout
    for side, side_tokens, (lo, hi) in zip("qk", tokens, ranges, strict=True):
        n = hi - lo
        step = max(1, -(-n * LABEL_PX // max(length_px, 1)))
        labels = escape(side_tokens[lo:hi])
        if step > 1:
            # every k-th token only: its position says where it is (a long input's sparse labels
            # read like a sentence otherwise); in two rows a label takes its width, not a line
            labels = [f"{lo + i}: {lab}" for i, lab in enumerate(labels)]
            if rows:
                step = max(step, -(-n * POSITION_LABEL_PX // max(length_px, 1)))
        text = [lab if (i % step == 0) else "" for i, lab in enumerate(labels)]
        focused = focus[1] - lo if focus and focus[0] == side and lo <= focus[1] < hi else None
        # the focused token first, then line ends, each at least `step` from those kept
        kept: list[int] = []
        for i in ([focused] if focused is not None else []) + sorted(p - lo for p in ends[side]):
            if all(abs(i - k) >= step for k in kept):
                kept.append(i)
        for i in kept:
            text[max(0, i - step + 1) : i + step] = [""] * (min(n, i + step) - max(0, i - step + 1))
        for i in kept:
            text[i] = labels[i]
        colour = ["#333"] * n
        if focused is not None:
            colour[focused] = HIGHLIGHT
            text[focused] = f"<b>{labels[focused]}</b>"
        pos = np.arange(n, dtype=np.float32)
        fixed = np.full(n, 0.0 if side == "q" else 1.0, dtype=np.float32)
        if rows:
            x, y = pos, 1 - fixed
            where = "top center" if side == "q" else "bottom center"
        else:
            x, y = fixed, -pos
            where = "middle left" if side == "q" else "middle right"
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="markers+text",
                text=text,
                textposition=where,
                textfont=dict(size=12, color=colour),
                marker=dict(size=7 if n <= 80 else 4, color=colour),
                customdata=[
                    [side, lo + i, tok] for i, tok in enumerate(escape(side_tokens[lo:hi]))
                ],
                hovertemplate="%{customdata[1]}: %{customdata[2]}<extra></extra>",
                showlegend=False,
                cliponaxis=False,  # a label at either end ([BOS], [SEP]) is drawn whole
            )
        )
