"""The figures of the explorer's views, from a trace and a Selection (attnviz.views.selection).

One place for both callers: the app's explorer (attnviz/ui/explorer/ lays them out and adds the
widgets) and `attnviz.show` in a notebook, so a notebook shows exactly what the page shows. Titles
and labels are in the selection's language. No streamlit here.
"""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from attnviz.engine.bands import THUMB
from attnviz.engine.budget import check_rollout
from attnviz.engine.lean import pooled_head
from attnviz.engine.rollout import rollout
from attnviz.engine.trace import Trace, pooled_weights
from attnviz.views import charts, heatmaps, images
from attnviz.views.colour import GAMMA, colour_scale
from attnviz.views.selection import Selection, Tr

LONG = 64  # past this many tokens the views switch to their long-input layout


def default_scale(n: int, short: str = "fixed") -> str:
    # Past LONG tokens a row's weights are too thin for a linear scale to show anything.
    return short if n <= LONG else "log"


def colour_kwargs(matrix, mode: str, tr: Tr, value: str | None = None) -> dict:
    """heatmap() keyword arguments for `mode`, with the colour bar saying which scale it is."""
    found = colour_scale(matrix, mode)
    value = value or tr("w.weights")
    bar = tr(f"lv.bar.{mode}", top=found["top"], gamma=GAMMA, value=value)
    return dict(
        colorscale=found["colorscale"],
        zmin=found["zmin"],
        zmax=found["zmax"],
        colorbar_title=bar,
    )


def silenced(trace: Trace) -> set[tuple[int, int]]:
    """The (layer, head) pairs a what-if silenced in this trace."""
    return {(int(la), int(h)) for la, h in trace.meta.get("ablate", ())}


def _n(trace: Trace) -> int:
    return max(len(trace.tokens), len(trace.key_tokens))


def heads_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """One softmax-weights heatmap per head of one layer; silenced heads say so in the title."""
    tr, layer, focus = sel.tr, sel.layer, sel.focus
    mode = sel.scale or default_scale(_n(trace))
    lt = trace.layers[layer]
    off = silenced(trace)
    per_row = heads_per_row(trace, layer)
    if lt.lean:  # a long input: each head as an image of its whole map, pooled
        return [
            images.weights_image(
                head_map(trace, layer, h, HEAD_IMAGE_SIDE)[0],
                trace.key_tokens,
                trace.tokens,
                shape=(lt.n_q, lt.n_k),
                title=tr("pg.head_title", h=h) + (tr("ex.silenced") if (layer, h) in off else ""),
                gamma=overview_gamma(trace, sel.scale),
                height=560,
                x_title=tr("w.key"),
                y_title=tr("w.query"),
            )
            for h in range(lt.n_heads)
        ]
    weights = [lt.head("weights", h) for h in range(lt.n_heads)]  # [q, k] each
    return [
        heatmaps.heatmap(
            weights[h],
            trace.key_tokens,
            trace.tokens,
            title=tr("pg.head_title", h=h) + (tr("ex.silenced") if (layer, h) in off else ""),
            value_name=tr("w.weights"),
            height=380 if _n(trace) <= LONG else 620,
            show_scale=mode != "fixed" or h % per_row == per_row - 1,
            x_title=tr("w.key"),
            y_title=tr("w.query"),
            highlight_row=focus,
            auto_ticks=True,
            **colour_kwargs(weights[h], mode, tr),
        )
        for h in range(lt.n_heads)
    ]


def heads_per_row(trace: Trace, layer: int) -> int:
    return min(trace.layers[layer].n_heads, 3 if _n(trace) <= LONG else 2)


MOSAIC_WIDTH = 900  # px: the widest the mosaic is drawn (the page of a 1440 x 900 laptop)
MOSAIC_WIDTH_PROJECTOR = 760  # px: the page's width at 1280 x 800 with projector mode's fonts


def overview_figure(trace: Trace, sel: Selection, width: int = MOSAIC_WIDTH) -> go.Figure:
    """Every layer x head in one image. No highlight of the chosen head in the picture: it stays
    the same when only the head changes, so the app can keep it in the browser. `width`: the
    widest the image may be drawn. The figure's height follows from it: in a narrower page the
    image keeps its shape and the rest of that height stays empty, so a page that is known to be
    narrower (projector mode) asks for less. `sel.focus` draws one query's row in each head."""
    tr, focus, n = sel.tr, sel.focus, _n(trace)
    mode = sel.scale or default_scale(n)
    # Long inputs get bigger thumbnails (more pooled pixels) and a power colour scale.
    thumb = 48 if n <= LONG else THUMB
    gamma = {"power": GAMMA, "log": GAMMA / 2, "fixed": 1.0, "max": 1.0}[mode]
    rows_px = trace.n_layers * (thumb + 4) + 4
    cols_px = trace.n_heads * (thumb + 4) + 4
    zoom = min(3.0, width / cols_px, 820 / rows_px)
    # Without a focus token only the pooled weights are needed (a GPU trace copies just those);
    # with one, only that row of each head (expanded, not copied, to the map's shape).
    weights = focus_rows(trace, focus) if focus is not None else pooled_weights(trace, thumb, thumb)
    return images.mosaic(
        weights,
        thumb=thumb,
        shared_scale=sel.shared,
        title=tr("ex.overview_title"),
        height=max(200, int(rows_px * zoom) + 70),
        focus=focus,
        gamma=gamma,
        marked=tuple(sorted(silenced(trace))),
    )


def focus_rows(trace: Trace, focus: int) -> torch.Tensor:
    """Query `focus`'s weights in every head, as a [layer, head, n_q, n_k] view of one row (only
    that row exists: a lean trace recomputes just it). Read only row `focus`."""
    n_q = len(trace.tokens)
    if not 0 <= focus < n_q:
        raise ValueError(f"focus={focus} must be a query position 0..{n_q - 1}")
    rows = torch.stack([
        torch.stack([lt.block("weights", h, [focus])[0] for h in range(lt.n_heads)])
        for lt in trace.layers
    ])  # [layer, head, k]  # fmt: skip
    return rows.unsqueeze(2).expand(-1, -1, n_q, -1)  # [layer, head, q, k] (a view)


def head_map(trace: Trace, layer: int, head: int, side: int) -> tuple[torch.Tensor, tuple]:
    """One head's weights for an image: the whole [q, k] map, or for a lean trace the map pooled
    to at most side x side, a band of rows at a time; and the map's (n_q, n_k)."""
    lt = trace.layers[layer]
    if lt.lean:
        return pooled_head(lt, head, side, side), (lt.n_q, lt.n_k)
    w = lt.head("weights", head)  # [q, k]
    return w, tuple(w.shape)


# Past this many positions a side, Head detail draws scores and logits as pictures (the wire's
# ~1 MB a change: bench/long_latency.py); the weights keep their numbers up to a 512 window.
NUMBERS_SIDE = 256
HEAD_IMAGE_SIDE = 256  # pixels a side of the overview's chosen head on a long input


def head_image_figure(trace: Trace, sel: Selection, side: int = HEAD_IMAGE_SIDE) -> go.Figure:
    """The overview's chosen head on a long input: its weights as a compact image (see
    images.weights_image), coloured like the thumbnails above it. Head detail has the numbers."""
    tr, layer, head, n = sel.tr, sel.layer, sel.head, _n(trace)
    w, shape = head_map(trace, layer, head, side)  # [q, k], or pooled for a lean trace
    return images.weights_image(
        w,
        trace.key_tokens,
        trace.tokens,
        shape=shape,
        title=tr("ex.overview_head_title", l=layer, h=head),
        side=side,
        gamma=overview_gamma(trace, sel.scale),
        height=min(900, max(560, 2 * min(n, side) + 160)),
        x_title=tr("w.key"),
        y_title=tr("w.query"),
    )


def overview_gamma(trace: Trace, mode: str | None) -> float:
    mode = mode or default_scale(_n(trace))
    return {"power": GAMMA, "log": GAMMA / 2, "fixed": 1.0, "max": 1.0}[mode]


def detail_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Raw scores, the logits softmax sees and the weights of one head (Head detail), for the
    positions window[0]..window[1]-1 on both axes; `sel.mark` outlines a (query, key) cell."""
    tr, head, shared, mark = sel.tr, sel.head, sel.shared, sel.mark
    lt = trace.layers[sel.layer]
    n = _n(trace)
    mode = sel.scale or default_scale(n, short="max")
    lo, hi = sel.window or (0, n)
    # A window of positions lo..hi-1 on both axes (clipped to each side's length).
    qs, ks = slice(lo, min(hi, len(trace.tokens))), slice(lo, min(hi, len(trace.key_tokens)))
    # Only the window is computed (a lean trace recomputes just that block).
    scores, logits = lt.block("scores", head, qs, ks), lt.block("logits", head, qs, ks)
    bound_scores = bound_logits = None
    if shared:  # one colour range for every head of the layer (in the window, for a lean one)
        every = range(lt.n_heads)
        all_logits = torch.stack([lt.block("logits", h, qs, ks) for h in every])  # [head, q, k]
        all_scores = torch.stack([lt.block("scores", h, qs, ks) for h in every])  # [head, q, k]
        if not lt.lean:
            all_logits, all_scores = lt.logits(), lt.scores  # [head, q, k]
        finite = all_logits[torch.isfinite(all_logits)]
        bound_scores = float(all_scores.abs().max())
        bound_logits = float(finite.abs().max()) if finite.numel() else None
    long = hi - lo > LONG
    # Short: three panels side by side. Long: the weights across the page, sized to n; the
    # scores and logits below, side by side. Labels every k-th token from the pixels there are.
    big = min(900, max(560, 2 * (hi - lo) + 160))
    side_h = 560 if long else 420
    common = dict(
        x_title=tr("w.key"), y_title=tr("w.query"), start=(lo, lo), x_tokens=trace.key_tokens[ks],
        y_tokens=trace.tokens[qs],
    )  # fmt: skip
    if mark is not None and lo <= mark[0] < hi and lo <= mark[1] < hi:
        # the query row and key column "open in Head detail" came from
        common.update(highlight_row=mark[0] - lo, highlight_col=mark[1] - lo)
    small = dict(common, height=side_h, auto_ticks=True)
    weights = lt.block("weights", head, qs, ks)  # [q, k] window
    if hi - lo > NUMBERS_SIDE:
        # A wide window: scores and logits in colour only (each ~1 MB as numbers at 512); the
        # weights keep their numbers, and the CSV has the window's.
        # a third of the page's width each: 12 labels a side stay apart at 1280 px
        picture = dict(
            start=(lo, lo), height=side_h, x_title=tr("w.key"), y_title=tr("w.query"),
            max_ticks=12,
        )  # fmt: skip
        note = tr("long.colour_only", most=NUMBERS_SIDE)
        pictures = [
            images.signed_image(
                matrix,
                trace.key_tokens[ks],
                trace.tokens[qs],
                bound=bound,
                title=title + note,
                **picture,
            )  # fmt: skip
            for matrix, bound, title in (
                (scores, bound_scores, tr("w.scores")),
                (logits, bound_logits, tr("w.logits") + f" · × {lt.scale:.4g}"),
            )
        ]
    else:
        pictures = [
            heatmaps.heatmap(
                scores,  # [q, k] window
                title=tr("w.scores"),
                value_name="q·k",
                signed=True,
                zmin=None if bound_scores is None else -bound_scores,
                zmax=bound_scores,
                **small,
            ),
            heatmaps.heatmap(
                logits,  # [q, k] window
                title=tr("w.logits") + f" · × {lt.scale:.4g}",
                value_name="logit",
                signed=True,
                zmin=None if bound_logits is None else -bound_logits,
                zmax=bound_logits,
                show_y_labels=long,
                **small,
            ),
        ]
    return [
        *pictures,
        heatmaps.heatmap(
            weights,
            title=tr("w.weights"),
            value_name=tr("w.weights"),
            show_y_labels=long,
            **dict(small, height=big if long else side_h),
            **colour_kwargs(weights, "fixed" if shared else mode, tr),
        ),
    ]


def rollout_figures(trace: Trace, sel: Selection, residual: bool = True) -> list[go.Figure]:
    """rollout(trace) at one layer as a heatmap, and which input tokens feed the query as bars.
    Raises ValueError for a trace whose layers do not compose (cross-attention)."""
    tr, layer, query = sel.tr, sel.layer, sel.query
    check_rollout(trace.n_layers, trace.n_heads, len(trace.tokens))  # long inputs: maybe not
    rolled = rollout(trace, residual=residual)  # [layer, q, k]
    n = len(trace.tokens)
    mode = sel.scale or default_scale(n)
    matrix = rolled[layer]  # [q, k]
    heat = heatmaps.heatmap(
        matrix,
        trace.key_tokens,
        trace.tokens,
        title=tr("lv.rollout_title", l=layer),
        value_name=tr("lv.rollout_value"),
        height=min(900, max(420, 12 * n + 160)) if n > 24 else 460,
        x_title=tr("lv.input_token"),
        y_title=tr("w.query"),
        highlight_row=query,
        auto_ticks=True,
        **colour_kwargs(matrix, mode, tr, tr("lv.rollout_value")),
    )
    bars = charts.bars(
        matrix[query],
        trace.key_tokens,
        title=tr("lv.rollout_bars", token=trace.tokens[query], l=layer),
        value_name=tr("lv.rollout_value"),
        highlight=query,
        auto_ticks=True,
        height=340,
    )
    if mode == "log":  # the same reading as the map: small shares stay visible
        bars.update_yaxes(type="log")
    return [heat, bars]


def query_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Where one query looks (bars), its q vector, and q_i·k_i for every key (One query)."""
    tr, head, query = sel.tr, sel.head, sel.query
    lt = trace.layers[sel.layer]
    kv = head // (lt.n_heads // lt.n_kv_heads)
    q = lt.head("q", head)[query]  # [d_head]
    k = lt.head("k", kv)  # [k, d_head]
    dims = [str(i) for i in range(q.shape[0])]
    return [
        charts.bars(
            lt.block("weights", head, [query])[0],  # [k]
            trace.key_tokens,
            title=tr("ex.query_bars", token=trace.tokens[query]),
            highlight=query if not trace.is_cross else None,
            value_name=tr("w.weights"),
        ),
        heatmaps.heatmap(
            q.unsqueeze(0),
            dims,
            [trace.tokens[query]],
            title=tr("ex.q_vector"),
            value_name="q",
            signed=True,
            height=200,
            max_ticks=8,
            x_title=tr("w.dim"),
            y_title=tr("w.query"),
        ),
        heatmaps.heatmap(
            k * q,  # [k, d_head]: each row sums to that key's q·k
            dims,
            trace.key_tokens,
            title=tr("ex.qk_products"),
            value_name="q_i·k_i",
            signed=True,
            # a long input: every key in a page-high map (22 px a key would be 90,000 px)
            height=max(260, 22 * k.shape[0]) if k.shape[0] <= LONG else 900,
            max_ticks=16 if k.shape[0] <= LONG else 32,
            x_title=tr("w.dim"),
            y_title=tr("w.key"),
        ),
    ]


def link_figure(trace: Trace, sel: Selection) -> go.Figure:
    """The weight from one query token to one key token in every head (Link two tokens)."""
    tr, query, key = sel.tr, sel.query, sel.key
    grid = torch.stack([
        torch.stack([lt.block("weights", h, [query], [key])[0, 0] for h in range(lt.n_heads)])
        for lt in trace.layers
    ])  # [layer, head]  # fmt: skip
    fig = heatmaps.heatmap(
        grid,
        [f"H{h}" for h in range(grid.shape[1])],
        [f"L{la}" for la in range(grid.shape[0])],
        title=tr("ex.link_title", q=trace.tokens[query], k=trace.key_tokens[key]),
        value_name=tr("w.weights"),
        zmin=0.0,
        zmax=max(float(grid.max()), 1e-6),
        show_values=grid.numel() <= 400,
        # a long input's weights are ~1/n: two decimals would print 0.00 in every cell
        value_format=".2f" if float(grid.max()) >= 0.05 else ".2g",
        height=90 + 34 * grid.shape[0],
        x_title=tr("ex.head"),
        y_title=tr("pg.layer"),
    )
    fig.update_xaxes(tickangle=0)
    heatmaps.mark_cells(fig, sorted(silenced(trace)))
    return fig


def outputs_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """One head's z and the block's output after W_O, token x dimension."""
    tr, head = sel.tr, sel.head
    lt = trace.layers[sel.layer]
    panels = (
        (lt.head("z", head), tr("ex.z_title", h=head), "z"),
        (lt.output, tr("ex.output_title"), "output"),
    )
    return [
        heatmaps.vectors(
            matrix,
            trace.tokens,
            title=title,
            value_name=name,
            y_title=tr("w.query"),
            x_title=tr("w.dim"),
        )
        for matrix, title, name in panels
    ]
