"""Figures as the JSON plotly.js reads: the layout every figure shares, plain-dict figures
(`figure`), and `Spec`, a figure kept as ready JSON for figures drawn again and again. No streamlit.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import html
import json
import os
import re
import threading
from collections.abc import Iterator, Sequence

import plotly.graph_objects as go
import plotly.io
from _plotly_utils.basevalidators import is_homogeneous_array
from _plotly_utils.utils import is_skipped_key, to_typed_array_spec
from plotly.basedatatypes import BaseFigure

from attnviz.views.tokens import shown

# Every chart's modebar exports a PNG at twice the on-screen size.
PLOTLY_CONFIG = {
    "displaylogo": False,
    "toImageButtonOptions": {"format": "png", "scale": 2, "filename": "attnviz"},
}

FONT = dict(family="Inter, 'Noto Sans CJK SC', 'Source Han Sans SC', sans-serif", size=13)


def escape(tokens: Sequence[str]) -> list[str]:
    """Tokens as tick and hover text: each as the one rule draws it (attnviz.views.tokens.shown:
    ␣ a space, ⏎ a line break, never Ġ or ▁), and escaped, since Plotly renders some HTML."""
    return [html.escape(shown(t), quote=False) for t in map(str, tokens)]


class Spec(BaseFigure):
    """A figure already turned into the JSON values plotly.js reads, for a figure drawn again and
    again (the overview's mosaic on every head change, a head's three maps that thirty students
    open): st.plotly_chart takes it like a go.Figure, but skips plotly's deep copy and numpy
    encoding of every property on every rerun, with the GIL held (bench/load.py). Read-only;
    `figure()` gives an editable go.Figure back."""

    def __init__(self, fig: go.Figure) -> None:  # noqa: D107 (BaseFigure's own __init__ is skipped)
        text = plotly.io.to_json(fig, validate=False)
        object.__setattr__(self, "_spec", json.loads(text))
        object.__setattr__(self, "nbytes", len(text))  # what it sends, roughly what it holds

    @classmethod
    def of(cls, data: list[dict], layout: dict) -> Spec:
        """What Spec(go.Figure(data=data, layout=layout)) holds, without the figure: building one
        and deep-copying it (with its theme template) cost most of a heatmap's encoding (tests pin
        the equality)."""
        # copied, numeric arrays as typed arrays (as go.Figure.to_dict does); arrays are shared
        spec = _copy_tree({"data": data, "layout": layout})
        text = plotly.io.json.to_json_plotly(spec)
        spec = json.loads(text)
        template = _template()
        if template is not None and "template" not in spec["layout"]:
            spec["layout"]["template"] = template[0]  # shared: nothing writes to a Spec
            text_bytes = len(text) + template[1]
        else:
            text_bytes = len(text)
        new = object.__new__(cls)
        object.__setattr__(new, "_spec", spec)
        object.__setattr__(new, "nbytes", text_bytes)
        return new

    def to_dict(self) -> dict:
        # New dicts for the traces: plotly.io.to_json pops each trace's "uid" in place.
        return {
            "data": [dict(trace) for trace in self._spec["data"]],
            "layout": self._spec["layout"],
        }

    def to_plotly_json(self) -> dict:
        return self.to_dict()

    def figure(self) -> go.Figure:
        return go.Figure(self.to_dict())

    def __repr__(self) -> str:
        return f"Spec({len(self._spec['data'])} traces, ~{self.nbytes} bytes)"


MAP_TRACES = frozenset({"heatmap", "image"})
SENT_BARE = MAP_TRACES | {"bar"}  # figures for_browser sends without a template
# What Streamlit's theme gave a chart (streamlit 1.67's light theme, read from a drawn chart's
# layout.template in Chromium), set on the layout itself for a figure sent without a template.
_TEXT, _LINES = "#808495", "#e6eaf1"
_AXIS = dict(
    automargin=True, gridcolor=_LINES, zerolinecolor=_LINES, tickcolor=_LINES, ticks="",
    tickfont=dict(color=_TEXT, size=12), ticklabeloverflow="allow",
)  # fmt: skip
# ticklabeloverflow "allow": plotly.js's default on a numeric axis ("hide past div") measures every
# tick label's box after the draw, a forced layout each: 0.21 s of One query's 0.8 s of plotly
# at 512 tokens (CDP profile, _adjustTickLabelsOverflow). automargin already makes room for them.
# (On the layout, not in a template, a tick colour would turn tick marks on (ticks="" keeps them
# off) and the template's minor.gridcolor would draw a minor grid: it is left out.)
_THEME = dict(
    font=dict(color=_TEXT),
    title=dict(font=dict(color="#2F2D2B", family='"Source Sans", sans-serif'), pad=dict(l=4)),
    margin=dict(pad=8),
    paper_bgcolor="#FFFFFF",
    plot_bgcolor="#FFFFFF",
    hoverlabel=dict(bgcolor="#FFFFFF", bordercolor="rgba(47, 45, 43, 0.2)",
                    font=dict(color=_TEXT, size=12)),
)  # fmt: skip
_AXES = {
    "x": dict(_AXIS, showgrid=False, zeroline=False, title=dict(font=dict(color=_TEXT, size=14),
                                                                  standoff=20)),
    "y": dict(_AXIS, ticklabelposition="outside", title=dict(font=dict(color=_TEXT, size=14),
                                                             standoff=24)),
}  # fmt: skip
_AXIS_KEY = re.compile(r"^([xy])axis\d*$")


def _under(defaults: dict, own: dict) -> dict:
    """`own` over `defaults`, dicts merged all the way down (own's values win)."""
    out = dict(defaults)
    for k, v in own.items():
        out[k] = _under(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _themed(layout: dict) -> dict:
    """A layout without its template, with what Streamlit's theme would have given it: its
    colours, fonts, automargin on every axis and the title in bold."""
    out = _under(_THEME, {k: v for k, v in layout.items() if k != "template"})
    for key, value in layout.items():
        found = _AXIS_KEY.match(key)
        if found and isinstance(value, dict):
            out[key] = _under(_AXES[found.group(1)], value)
    title = out.get("title")
    if isinstance(title, dict) and title.get("text"):  # bold, its text as the view wrote it
        out["title"] = _under(title, {"font": {"weight": "bold"}})
    return out


def _bare(trace: dict) -> bool:
    """Whether a trace looks the same without a template: a map's or a bar's, or a line whose
    colours are its own (charts.bars' step outline: the template's colorway never reaches it)."""
    kind = trace.get("type")
    if kind in SENT_BARE:
        return True
    line = trace.get("line") or {}
    filled = trace.get("fill") in (None, "none") or trace.get("fillcolor") is not None
    return kind == "scatter" and trace.get("mode") == "lines" and "color" in line and filled


def for_browser(fig: go.Figure | Spec) -> Spec | go.Figure:
    """A map (heatmap and image traces) or a bar chart as the browser should get it, drawn once
    instead of three times: Streamlit's chart applies its theme again after the first draw (a new
    layout.template object), and plotly.js's react then replots everything (the template is
    compared by identity) and, its arrays being new objects too, recomputes them. Without a
    template (what the theme gave is set on the layout: `_themed`) and with a `datarevision`
    that only changes with the data, that second react finds nothing to do (bench/
    browser_512.py: All heads at 512 tokens drew 3 times). Give it to st.plotly_chart with
    theme=None. Other figures come back as they are (their theme)."""
    if isinstance(fig, Spec):
        spec = fig
    elif all(trace.type in SENT_BARE or trace.type == "scatter" for trace in fig.data):
        spec = Spec(fig)
    else:
        return fig
    data, layout = spec._spec["data"], spec._spec["layout"]
    if not data or not all(_bare(trace) for trace in data):  # a scatter: its own colours?
        return fig
    digest = spec.__dict__.get("_digest")
    if digest is None:
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        object.__setattr__(spec, "_digest", digest)  # a Spec never changes: once per Spec
    new = object.__new__(Spec)
    shown = _themed(layout)
    shown["datarevision"] = digest
    object.__setattr__(new, "_spec", {"data": data, "layout": shown})
    object.__setattr__(new, "nbytes", spec.nbytes)
    return new


def tick_step(n: int, room: int = 48) -> int:
    return max(1, -(-n // room))


def apply_layout(fig: go.Figure, title: str, height: int | None) -> go.Figure:
    fig.update_layout(**layout_dict(title, height, {}))
    y_title = fig.layout.yaxis.title.text
    if y_title and WIDE.search(y_title):  # upright, above the axis (see `upright`)
        fig.update_yaxes(title_text="")
        fig.add_annotation(_upright_title(y_title))
        fig.update_layout(margin_t=fig.layout.margin.t + UPRIGHT_PX)
    return fig


# Chinese, Japanese and Korean characters (and their full-width forms)
WIDE = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
UPRIGHT_PX = 18  # room above the plot for a y title set upright


def _upright_title(text: str) -> dict:
    # From the plot's left edge rightwards: anchored at its right end (over the tick labels), a
    # title wider than the labels' margin was cut at the chart's left edge ("oftmax 权重").
    return dict(
        text=text, xref="paper", yref="paper", x=0, y=1, xanchor="left", yanchor="bottom",
        showarrow=False, font=dict(size=12),
    )  # fmt: skip


def upright(layout: dict) -> dict:
    """Plotly turns every y axis title by 90°, which lays Chinese characters on their side: a y
    title in CJK goes above the plot instead, upright, from its left edge."""
    for name in [k for k in layout if k.startswith("yaxis")]:
        title = layout[name].get("title")
        text = title.get("text") if isinstance(title, dict) else title
        if text and WIDE.search(text):
            layout[name] = dict(
                layout[name], title=dict(title, text="") if isinstance(title, dict) else ""
            )
            layout.setdefault("annotations", []).append(_upright_title(text))
            layout["margin"] = dict(layout["margin"], t=layout["margin"]["t"] + UPRIGHT_PX)
    return layout


def figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain dicts, without plotly's property-by-property validation: that was half
    of building a mosaic or a head's heatmap, with the GIL held while a class waits (bench/load.py).
    What these dicts hold is pinned by the tests, which build
    every figure with validation on (ATTNVIZ_VALIDATE_FIGURES=1, set in tests/conftest.py).
    Inside making_specs(), a Spec straight from the dicts."""
    if getattr(_as_specs, "on", False):
        if not _VALIDATE:
            return Spec.of(data, layout)  # type: ignore[return-value]
        return Spec(go.Figure(data=data, layout=layout))  # type: ignore[return-value]
    return go.Figure(data=data, layout=layout, _validate=_VALIDATE)


_as_specs = threading.local()


@contextlib.contextmanager
def making_specs() -> Iterator[None]:
    """Within it, every figure made (through heatmap, mosaic, weights_image...) is a Spec straight
    from its dicts: for figures the app keeps as ready JSON (the overview's mosaic, a head's three
    maps). Only around builders that return those figures untouched."""
    before = getattr(_as_specs, "on", False)
    _as_specs.on = True
    try:
        yield
    finally:
        _as_specs.on = before


def _copy_tree(value, convert: bool = True):
    """Dicts and lists copied all the way down, without a dict's None values (go.Figure leaves an
    attribute set to None unset); a numeric array that is a dict's value made a typed array, as
    plotly's convert_to_base64 does in place (not under the keys it skips, nor anything below
    them); everything else (other arrays, strings) shared. A list of plain values (a trace's x,
    a map's hover text row) is copied in one step: walking each value was most of a mosaic's."""
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            if v is None:
                continue
            here = convert and not is_skipped_key(key)
            out[key] = to_typed_array_spec(v) if here and is_homogeneous_array(v) else (
                _copy_tree(v, here)
            )  # fmt: skip
        return out
    if isinstance(value, (list, tuple)):
        if not any(isinstance(v, _NESTED) for v in value):
            return list(value)
        return [_copy_tree(v, convert) for v in value]
    return value


_NESTED = (dict, list, tuple)


def _template() -> tuple[dict, int] | None:
    """The default plotly template (Streamlit's, once streamlit is imported) as go.Figure puts it
    in a figure's layout, and its JSON length; None when there is no default."""
    default = plotly.io.templates.default
    if default is None:
        return None
    return _template_of(default) if isinstance(default, str) else _template_json(default)


@functools.cache
def _template_of(name: str) -> tuple[dict, int]:
    return _template_json(plotly.io.templates[name])


def _template_json(template) -> tuple[dict, int]:
    text = plotly.io.to_json(go.Figure(layout=dict(template=template)), validate=False)
    found = json.loads(text)["layout"]["template"]
    return found, len(json.dumps(found, separators=(",", ":")))


_VALIDATE = os.environ.get("ATTNVIZ_VALIDATE_FIGURES", "0").strip() == "1"


TITLE_LINE_PX = 20  # one more line of a title (15 px font) above the plot


def title_pad(lines: int, size: float) -> int:
    """The room above a title hung from the top: plotly.js lifts a title of several lines by
    half of each further line (1.3 em), which cut the first line at the chart's top edge."""
    return 8 + round((lines - 1) * 1.3 * size / 2)


def layout_dict(title: str, height: int | None, extra: dict) -> dict:
    # A "\n" in a title breaks its line: plotly never wraps one, and a title wider than a chart
    # in a third of a 1280 px page was cut off ("Size of the softmax gradient ‖diag(p) − p…").
    text = html.escape(title, quote=False).replace("\n", "<br>")
    return upright(
        dict(
            # hung from the top (plotly centres it in the margin): a second line, or a bigger
            # font in projector mode, grows down into the room made for it, not into the plot
            title=dict(
                text=text,
                x=0,
                xanchor="left",
                y=1,
                yanchor="top",
                pad=dict(t=title_pad(text.count("<br>") + 1, 15)),
                font=dict(size=15),
            ),
            margin=dict(
                l=10, r=10, t=40 + TITLE_LINE_PX * title.count("\n") if title else 10, b=10
            ),
            font=FONT,
            height=height,
            plot_bgcolor="white",
            **extra,
        )
    )
