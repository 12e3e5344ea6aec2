"""What a view shows of a trace: the explorer's pickers in the app, keyword arguments of
`attnviz.show` in a notebook. One object for both, so a notebook draws what the page draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from attnviz.engine.trace import Trace
from attnviz.i18n import translate

Tr = Callable[..., str]
FIELDS = ("weights", "moved")  # what a map of a head shows (moved: attnviz.engine.writes)
UNITS = ("pieces", "word", "char")  # the tokens a view is over (attnviz.measures.words)


@dataclass(frozen=True)
class Selection:
    """The layer, head and tokens a view is about, and how it colours them."""

    layer: int = 0
    head: int = 0
    query: int = 0  # a query position (One query, Link, Rollout)
    key: int = 0  # a key position (Link)
    focus: int | None = None  # a query whose row every head shows (overview, All heads)
    window: tuple[int, int] | None = None  # positions lo..hi-1 on both axes (Head detail)
    mark: tuple[int, int] | None = None  # a (query, key) cell Head detail outlines
    shared: bool = False  # one colour range for every head (the "shared scale" toggles)
    scale: str | None = None  # weights' colour scale: fixed, max, power, log (None: the view's)
    lang: str = "en"  # the language of titles and labels
    field: str = "weights"  # what the maps show: "weights", or "moved" (value-weighted)
    token: str | None = None  # the token whose logit the heads push (None: the top next one)
    unit: str = "pieces"  # the tokens: "pieces", or grouped into "word" or "char" (show only)
    threshold: float | None = None  # the flow graph's threshold (None: its default, 0.04)

    @property
    def tr(self) -> Tr:
        """translate(key, **fields) in this selection's language."""
        lang = self.lang
        return lambda key, **fmt: translate(key, lang, **fmt)

    def check(self, trace: Trace) -> Selection:
        """This selection, or a ValueError naming the first position outside `trace`."""
        n_q, n_k = len(trace.tokens), len(trace.key_tokens)
        for name, value, hi in (
            ("layer", self.layer, trace.n_layers),
            ("head", self.head, trace.n_heads),
            ("query", self.query, n_q),
            ("key", self.key, n_k),
            ("focus", self.focus, n_q),
        ):
            if value is not None and not 0 <= value < hi:
                raise ValueError(f"{name}={value} is outside the trace: pick 0..{hi - 1}")
        for name, value, allowed in (
            ("field", self.field, FIELDS),
            ("unit", self.unit, UNITS),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} must be one of {', '.join(allowed)}")
        if self.threshold is not None and not 0 <= self.threshold < 1:
            raise ValueError(f"threshold={self.threshold} must be at least 0 and below 1")
        return self

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
