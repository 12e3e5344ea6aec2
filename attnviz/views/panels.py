"""The figures of the explorer's views, from a trace and a Selection (attnviz.views.selection).

One place for both callers: the app's explorer (attnviz/ui/explorer/ lays them out and adds the
widgets) and `attnviz.show` in a notebook, so a notebook shows exactly what the page shows. Titles
and labels are in the selection's language. No streamlit here.
"""

from __future__ import annotations

from dataclasses import replace

import plotly.graph_objects as go
import torch

from attnviz.engine.bands import THUMB
from attnviz.engine.budget import check_rollout
from attnviz.engine.trace import Trace, pooled_weights
from attnviz.measures.rollout import rollout
from attnviz.views import charts, grid, images
from attnviz.views.colour import GAMMA, colour_scale, scale_gamma
from attnviz.views.lines import LinesLook, LinesPick, default_threshold, is_cjk, layer_lines
from attnviz.views.maps import (
    PICTURE_SIDE,
    Axis,
    Colour,
    Frame,
    Marks,
    draw_map,
    mark_cells,
    values_fit,
)
from attnviz.views.selection import Selection, Tr
from attnviz.views.tokens import shown

LONG = 64  # past this many tokens the views switch to their long-input layout
LINES_HOVER_MOST = 160  # tokens the lines view's hover component draws at most


def is_long(n: int) -> bool:
    """Whether an input of n tokens gets the long-input layout (a window of positions, bigger
    maps, labels every k-th token): the views' size decision, here only."""
    return n > LONG


def needs_window(n: int) -> bool:
    """Whether views of an n-token input show a window of positions (and the page a picker)."""
    return is_long(n)


MAX_WINDOW = 512  # positions a side of a window of numbers (about 1 MB of float32 on the wire)


def default_window(n: int) -> tuple[int, int]:
    """The window a long input's views open on: its first MAX_WINDOW positions (both ends in)."""
    return 0, min(n - 1, MAX_WINDOW - 1)


def window_shown(lo: int, hi: int) -> tuple[int, int]:
    """Positions lo..end-1 the views show of a picked window lo..hi (both ends in): at most
    MAX_WINDOW of them, numbers for at most 512 x 512 cells a change."""
    return lo, min(hi + 1, lo + MAX_WINDOW)


def lines_hover_fits(trace: Trace) -> bool:
    """Whether the lines view's hover component (every line in the browser) draws this trace;
    past LINES_HOVER_MOST tokens the Plotly view's windows are the readable way in."""
    return size(trace) <= LINES_HOVER_MOST


def detail_stacked(window: tuple[int, int]) -> bool:
    """Whether Head detail puts the weights across the page and the scores and logits below
    (a long window) rather than its three maps side by side."""
    return is_long(window[1] - window[0])


def default_scale(n: int, short: str = "fixed") -> str:
    # Past LONG tokens a row's weights are too thin for a linear scale to show anything.
    return "log" if is_long(n) else short


def weights_colour(
    matrix, mode: str, tr: Tr, value: str | None = None, field: str = "weights"
) -> Colour:
    """The weights' (or moved's) Colour under `mode`, the colour bar saying which scale it is."""
    value = value or tr(f"w.{field}")
    mode = "max" if field == "moved" and mode == "fixed" else mode  # moved is not bounded by 1
    top = colour_scale(matrix, mode)["top"]
    bar = tr(f"lv.bar.{mode}", top=top, gamma=GAMMA, value=value)
    return Colour.weights(matrix, mode, value, bar, gamma=scale_gamma(mode))


def silenced(trace: Trace) -> set[tuple[int, int]]:
    """The (layer, head) pairs a what-if silenced in this trace."""
    return {(int(la), int(h)) for la, h in trace.meta.get("ablate", ())}


def size(trace: Trace) -> int:
    """The positions a view of this trace spans on its longer side: what a page passes to the
    size questions above (default_scale, needs_window)."""
    return max(len(trace.tokens), len(trace.key_tokens))


def query_table_is_top(trace: Trace) -> bool:
    """Whether One query's table lists only the keys with the largest weights (a long input:
    every key stays in its bars and its CSV)."""
    return is_long(len(trace.key_tokens or trace.tokens))


def heads_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """One softmax-weights map per head of one layer; silenced heads say so in the title. A long
    input's head arrives pooled (a lean trace never holds it whole) and is drawn as a picture."""
    tr, layer, focus = sel.tr, sel.layer, sel.focus
    mode = sel.scale or default_scale(size(trace))
    lt = trace.layers[layer]
    off = silenced(trace)
    per_row = heads_per_row(trace, layer)
    # a picture names every k-th position: few enough that labels of ~17 px never touch in a
    # column of a 1280 px window (3 columns of ~300 px, 2 of ~450 px)
    named = 10 if per_row >= 3 else 16
    x = Axis(trace.key_tokens, tr("w.key"), ticks=None, picture_ticks=named)
    y = Axis(trace.tokens, tr("w.query"), ticks=None, picture_ticks=named)
    figs = []
    whole = Marks.of_mask(lt.mask if lt.holds_maps else None, row=focus)  # a pooled map: no cells
    if not values_fit(lt.n_heads, lt.n_q, lt.n_k):  # a long input: pictures, not MBs of numbers
        whole = replace(whole, values=False)
    for h in range(lt.n_heads):
        w, _ = head_map(trace, layer, h, PICTURE_SIDE, sel.field)  # [q, k], or pooled
        title = tr("pg.head_title", h=h) + (tr("ex.silenced") if (layer, h) in off else "")
        colour = weights_colour(w, mode, tr, field=sel.field)
        if tuple(w.shape) == (lt.n_q, lt.n_k):
            show = mode != "fixed" or h % per_row == per_row - 1
            colour = Colour(**{**colour.__dict__, "show_bar": show})
        height = 380 if not is_long(size(trace)) else 620
        if tuple(w.shape) != (lt.n_q, lt.n_k):
            height = 560
        figs.append(draw_map(w, x, y, colour, whole, Frame(title, height)))
    return figs


def layer_heads(trace: Trace, sel: Selection) -> list[go.Figure]:
    """All heads of a layer as the page draws them: a heatmap a head (hover gives each weight),
    or where every head is a picture (a long input) all of them in one chart (attnviz.views.grid:
    the browser sets up one chart, not one a head)."""
    figs = heads_figures(trace, sel)
    if len(figs) < 2 or any(fig.data[0].type != "image" for fig in figs):
        return figs
    return [grid.one_figure(figs, heads_per_row(trace, sel.layer), plot_px=460)]


def heads_per_row(trace: Trace, layer: int) -> int:
    return min(trace.layers[layer].n_heads, 2 if is_long(size(trace)) else 3)


MOSAIC_WIDTH = 900  # px: the widest the mosaic is drawn (the page of a 1440 x 900 laptop)
MOSAIC_WIDTH_PROJECTOR = 760  # px: the page's width at 1280 x 800 with projector mode's fonts


def overview_figure(trace: Trace, sel: Selection, width: int = MOSAIC_WIDTH) -> go.Figure:
    """Every layer x head in one image. No highlight of the chosen head in the picture: it stays
    the same when only the head changes, so the app can keep it in the browser. `width`: the
    widest the image may be drawn. The figure's height follows from it: in a narrower page the
    image keeps its shape and the rest of that height stays empty, so a page that is known to be
    narrower (projector mode) asks for less. `sel.focus` draws one query's row in each head."""
    tr, focus, n = sel.tr, sel.focus, size(trace)
    mode = sel.scale or default_scale(n)
    # Long inputs get bigger thumbnails (more pooled pixels) and a power colour scale.
    thumb = THUMB if is_long(n) else 48
    gamma = scale_gamma(mode)
    rows_px = trace.n_layers * (thumb + 4) + 4
    cols_px = trace.n_heads * (thumb + 4) + 4
    zoom = min(3.0, width / cols_px, 820 / rows_px)
    # Without a focus token only the pooled weights are needed (a GPU trace copies just those);
    # with one, only that row of each head (expanded, not copied, to the map's shape).
    field = sel.field
    weights = (
        focus_rows(trace, focus, field) if focus is not None
        else pooled_weights(trace, thumb, thumb, field)
    )  # fmt: skip
    drawn = images.thumb_drawn(thumb, zoom)  # a tall mosaic: fewer pixels, as drawn
    tiles = images.Tiles(drawn, shared=sel.shared, gamma=gamma, focus=focus,
                         marked=tuple(sorted(silenced(trace))))  # fmt: skip
    title = tr("ex.overview_title" if field == "weights" else "ex.overview_title_moved")
    return images.mosaic(weights, tiles, title, max(200, int(rows_px * zoom) + 70))


def focus_rows(trace: Trace, focus: int, field: str = "weights") -> torch.Tensor:
    """Query `focus`'s weights (or moved) in every head, as a [layer, head, n_q, n_k] view of one
    row (only that row exists: a lean trace recomputes just it). Read only row `focus`."""
    n_q = len(trace.tokens)
    if not 0 <= focus < n_q:
        raise ValueError(f"focus={focus} must be a query position 0..{n_q - 1}")
    rows = torch.stack([
        torch.stack([lt.block(field, h, [focus])[0] for h in range(lt.n_heads)])
        for lt in trace.layers
    ])  # [layer, head, k]  # fmt: skip
    return rows.unsqueeze(2).expand(-1, -1, n_q, -1)  # [layer, head, q, k] (a view)


def head_map(
    trace: Trace, layer: int, head: int, side: int, field: str = "weights"
) -> tuple[torch.Tensor, tuple]:
    """One head's weights (or moved) to draw: the whole [q, k] map, or where the layer never
    holds it whole (a long input) the map pooled to at most side x side, a band of rows at a
    time; and the map's (n_q, n_k)."""
    lt = trace.layers[layer]
    return lt.head_map(field, head, side), (lt.n_q, lt.n_k)


def head_image_figure(trace: Trace, sel: Selection) -> go.Figure:
    """The overview's chosen head on a long input: its weights as a picture (pooled to at most
    PICTURE_SIDE a side), coloured like the thumbnails above it: tens of kilobytes on a head
    change where three maps of numbers were megabytes. Head detail has the numbers."""
    tr, layer, head, n = sel.tr, sel.layer, sel.head, size(trace)
    w, _ = head_map(trace, layer, head, PICTURE_SIDE, sel.field)
    colour = Colour(gamma=overview_gamma(trace, sel.scale))
    height = min(900, max(560, 2 * min(n, PICTURE_SIDE) + 160))
    title = "ex.overview_head_title" + ("_moved" if sel.field == "moved" else "")
    frame = Frame(tr(title, l=layer, h=head), height)
    x, y = Axis(trace.key_tokens, tr("w.key")), Axis(trace.tokens, tr("w.query"))
    return draw_map(w, x, y, colour, Marks(values=False), frame)


def overview_head_is_picture(trace: Trace) -> bool:
    """Whether the overview shows its chosen head as a picture (a long input) rather than as
    Head detail's three maps of numbers."""
    return is_long(size(trace))


def overview_gamma(trace: Trace, mode: str | None) -> float:
    return scale_gamma(mode or default_scale(size(trace)))


def detail_figures(trace: Trace, sel: Selection) -> list[go.Figure]:
    """Raw scores, the logits softmax sees and the weights of one head (Head detail), for the
    positions window[0]..window[1]-1 on both axes; `sel.mark` outlines a (query, key) cell."""
    tr, head, shared, mark = sel.tr, sel.head, sel.shared, sel.mark
    lt = trace.layers[sel.layer]
    n = size(trace)
    mode = sel.scale or default_scale(n, short="max")
    lo, hi = sel.window or (0, n)
    # A window of positions lo..hi-1 on both axes (clipped to each side's length).
    qs, ks = slice(lo, min(hi, len(trace.tokens))), slice(lo, min(hi, len(trace.key_tokens)))
    if trace.unit != "pieces":  # words: their weights and moved add up, scores do not
        return [grouped_detail(trace, sel, (qs, ks), mode)]
    # Only the window is computed (a lean trace recomputes just that block).
    scores, logits = lt.block("scores", head, qs, ks), lt.block("logits", head, qs, ks)
    bound_scores = bound_logits = None
    if shared:  # one colour range for every head of the layer (in the window, for a lean one)
        every = range(lt.n_heads)
        all_logits = torch.stack([lt.block("logits", h, qs, ks) for h in every])  # [head, q, k]
        all_scores = torch.stack([lt.block("scores", h, qs, ks) for h in every])  # [head, q, k]
        if lt.holds_maps:  # the whole layer's range
            all_logits, all_scores = lt.logits(), lt.scores  # [head, q, k]
        finite = all_logits[torch.isfinite(all_logits)]
        bound_scores = float(all_scores.abs().max())
        bound_logits = float(finite.abs().max()) if finite.numel() else None
    long = is_long(hi - lo)
    # Short: three panels side by side. Long: the weights across the page, sized to n; the
    # scores and logits below, side by side. Labels every k-th token from the pixels there are;
    # drawn as pictures, a third of the page's width each: 12 labels a side stay apart at 1280 px.
    big = min(900, max(560, 2 * (hi - lo) + 160))
    side_h = 560 if long else 420
    x = Axis(trace.key_tokens[ks], tr("w.key"), lo, ticks=None, picture_ticks=12)
    y = Axis(trace.tokens[qs], tr("w.query"), lo, ticks=None, picture_ticks=12)
    marks = Marks()
    if mark is not None and lo <= mark[0] < hi and lo <= mark[1] < hi:
        # the query row and key column "open in Head detail" came from
        marks = Marks(row=mark[0] - lo, col=mark[1] - lo)
    note = tr("long.colour_only", most=PICTURE_SIDE)
    weights = lt.block(sel.field, head, qs, ks)  # [q, k] window
    logit_title = tr("w.logits") + f" · × {lt.scale:.4g}"
    unlabelled = Axis(**{**y.__dict__, "labels": long})  # the left map's labels serve all three
    return [
        draw_map(scores, x, y, Colour.diverging("q·k", bound_scores), marks,
                 Frame(tr("w.scores"), side_h, note)),
        draw_map(logits, x, unlabelled, Colour.diverging("logit", bound_logits), marks,
                 Frame(logit_title, side_h, note)),
        draw_map(weights, x, unlabelled,
                 weights_colour(weights, "fixed" if shared else mode, tr, field=sel.field),
                 Marks.of_mask(lt.block("mask", head, qs, ks), row=marks.row, col=marks.col),
                 Frame(tr(f"w.{sel.field}"), big if long else side_h)),
    ]  # fmt: skip


def grouped_detail(trace: Trace, sel: Selection, window: tuple[slice, slice], mode: str):
    """Head detail of a trace grouped into words: the weights (or moved) of the window alone; a
    word's scores and logits are no sums of its pieces', so there are none."""
    tr, (qs, ks) = sel.tr, window
    matrix = trace.layers[sel.layer].block(sel.field, sel.head, qs, ks)  # [q, k] window
    x = Axis(trace.key_tokens[ks], tr("w.key"), ks.start, ticks=None, picture_ticks=12)
    y = Axis(trace.tokens[qs], tr("w.query"), qs.start, ticks=None, picture_ticks=12)
    colour = weights_colour(matrix, "fixed" if sel.shared else mode, tr, field=sel.field)
    height = min(900, max(560, 2 * (qs.stop - qs.start) + 160))
    return draw_map(matrix, x, y, colour, Marks(), Frame(tr(f"w.{sel.field}"), height))


def lines_figures(trace: Trace, sel: Selection) -> go.Figure:
    """One head's weights as lines between the query and key tokens (the Lines view), with the
    page's default threshold and layout."""
    rows, tr = is_cjk(trace.tokens), sel.tr
    n = size(trace)
    pick = LinesPick((sel.head,), default_threshold(n))
    title = tr("lv.lines_title_rows" if rows else "lv.lines_title", l=sel.layer)
    look = LinesLook(rows, 1100 if rows else None, tr("w.query"), tr("w.key"), tr("ex.head"), title)
    return layer_lines(trace, sel.layer, pick, look, sel.field)


def reachable(trace: Trace) -> torch.Tensor | None:
    """Which inputs can reach which token through the layers (rollout's cells that are not 0 by
    the mask): a key no layer lets the query see, itself excepted, never is. [q, k] or None"""
    if any(lt.in_bands for lt in trace.layers) or all(lt.mask is None for lt in trace.layers):
        return None
    seen = torch.eye(len(trace.tokens), len(trace.key_tokens), dtype=torch.bool)  # the residual
    for lt in trace.layers:
        seen |= lt.block("mask", 0)
    return seen


def rollout_figures(trace: Trace, sel: Selection, residual: bool = True) -> list[go.Figure]:
    """rollout(trace) at one layer as a heatmap, and which input tokens feed the query as bars.
    Raises ValueError for a trace whose layers do not compose (cross-attention)."""
    tr, layer, query = sel.tr, sel.layer, sel.query
    check_rollout(trace.n_layers, trace.n_heads, len(trace.tokens))  # long inputs: maybe not
    rolled = rollout(trace, residual=residual)  # [layer, q, k]
    n = len(trace.tokens)
    mode = sel.scale or default_scale(n)
    matrix = rolled[layer]  # [q, k]
    height = min(900, max(420, 12 * n + 160)) if n > 24 else 460
    heat = draw_map(
        matrix,
        Axis(trace.key_tokens, tr("lv.input_token"), ticks=None),
        Axis(trace.tokens, tr("w.query"), ticks=None),
        weights_colour(matrix, mode, tr, tr("lv.rollout_value")),
        Marks.of_mask(reachable(trace), row=query),
        Frame(tr("lv.rollout_title", l=layer), height),
    )
    bars = charts.bars(
        matrix[query],
        trace.key_tokens,
        title=tr("lv.rollout_bars", token=shown(trace.tokens[query]), l=layer),
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
    kv = lt.kv_head(head)
    q = lt.head("q", head)[query]  # [d_head]
    k = lt.head("k", kv)  # [k, d_head]
    dims = [str(i) for i in range(q.shape[0])]
    long = is_long(k.shape[0])
    return [
        charts.bars(
            lt.block("weights", head, [query])[0],  # [k]
            trace.key_tokens,
            title=tr("ex.query_bars", token=shown(trace.tokens[query])),
            highlight=query if not trace.is_cross else None,
            value_name=tr("w.weights"),
        ),
        draw_map(
            q.unsqueeze(0),
            Axis.dims(len(dims), tr("w.dim"), ticks=8),
            Axis([trace.tokens[query]], tr("w.query")),
            Colour.diverging("q"),
            Marks(),
            Frame(tr("ex.q_vector"), 200),
        ),
        draw_map(
            k * q,  # [k, d_head]: each row sums to that key's q·k
            Axis.dims(len(dims), tr("w.dim"), ticks=16 if not long else 32),
            Axis(trace.key_tokens, tr("w.key"), ticks=16 if not long else 32),
            Colour.diverging("q_i·k_i"),
            Marks(),
            # a long input: every key in a page-high map (22 px a key would be 90,000 px)
            Frame(tr("ex.qk_products"), 900 if long else max(260, 22 * k.shape[0])),
        ),
    ]


def link_figure(trace: Trace, sel: Selection) -> go.Figure:
    """The weight from one query token to one key token in every head (Link two tokens)."""
    tr, query, key = sel.tr, sel.query, sel.key
    grid = torch.stack([
        torch.stack([lt.block(sel.field, h, [query], [key])[0, 0] for h in range(lt.n_heads)])
        for lt in trace.layers
    ])  # [layer, head]  # fmt: skip
    top = float(grid.max())
    # a layer whose mask hides the key from the query: "–" in all its heads, not 0.00
    allowed = torch.stack([lt.block("mask", 0, [query], [key])[0, 0] for lt in trace.layers])
    allowed = allowed.unsqueeze(1).expand_as(grid)  # [layer, head]
    fig = draw_map(
        grid,
        Axis([f"H{h}" for h in range(grid.shape[1])], tr("ex.head")),
        Axis([f"L{la}" for la in range(grid.shape[0])], tr("pg.layer")),
        # a long input's weights are ~1/n: two decimals would print 0.00 in every cell
        Colour(zmin=0.0, zmax=max(top, 1e-6), value=tr(f"w.{sel.field}"),
               digits=".2f" if top >= 0.05 else ".2g"),
        Marks.of_mask(allowed, numbers=True),
        Frame(tr("ex.link_title" + ("_moved" if sel.field == "moved" else ""),
                 q=shown(trace.tokens[query]), k=shown(trace.key_tokens[key])),
              90 + 34 * grid.shape[0]),
    )  # fmt: skip
    fig.update_xaxes(tickangle=0)
    mark_cells(fig, sorted(silenced(trace)))
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
        draw_map(matrix, Axis.dims(matrix.shape[-1], tr("w.dim")),
                 Axis(trace.tokens, tr("w.query"), ticks=16), Colour.diverging(name), Marks(),
                 Frame(title, 420))
        for matrix, title, name in panels
    ]  # fmt: skip
