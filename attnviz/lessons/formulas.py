"""The formulas the pages show, written from the knobs that produced the numbers beside them.

A formula that says ÷√d_k while the scale is off teaches the wrong thing: every page builds its
LaTeX here from the same settings it passed to the engine (scale on/off, temperature, mask).
No streamlit here.
"""

from __future__ import annotations

from dataclasses import dataclass

QK = r"Q K^\top"


@dataclass(frozen=True)
class Knobs:
    """What turns raw scores into logits: logits = scores · scale / temperature + M."""

    use_scale: bool = True  # divide by sqrt(d_k)
    temperature: float = 1.0  # divide by T as well
    masked: bool = False  # add M (0 where allowed, -inf where not)
    causal: bool = True  # the mask is the causal one (else: padding / hidden keys)

    def __post_init__(self) -> None:
        if not isinstance(self.temperature, (int, float)) or not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature!r} must be a number above 0")

    @property
    def plain(self) -> bool:
        """Nothing between QKᵀ and softmax."""
        return not self.use_scale and self.temperature == 1.0 and not self.masked


def _t(value: float) -> str:
    return f"{value:g}"


def logits(knobs: Knobs, qk: str = QK) -> str:
    """What softmax sees, e.g. QKᵀ/(√d_k · T) + M."""
    denominator = []
    if knobs.use_scale:
        denominator.append(r"\sqrt{d_k}")
    if knobs.temperature != 1.0:
        denominator.append("T")
    below = r" \cdot ".join(denominator)
    body = rf"\frac{{{qk}}}{{{below}}}" if denominator else qk
    return body + (" + M" if knobs.masked else "")


def where(knobs: Knobs) -> str:
    """The side conditions that name the numbers in the formula (T, M), or ""."""
    parts = []
    if knobs.temperature != 1.0:
        parts.append(rf"T = {_t(knobs.temperature)}")
    if knobs.masked:
        if knobs.causal:
            parts.append(r"M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}")
        else:
            parts.append(
                r"M_{ij} = \begin{cases} 0 & \text{key } j \text{ allowed} \\"
                r" -\infty & \text{key } j \text{ masked} \end{cases}"
            )
    return r",\qquad ".join(parts)


def lines(*rows: str) -> str:
    """Formulas stacked one under another (a single long line overflows a projected screen)."""
    rows = tuple(r for r in rows if r)
    if len(rows) == 1:
        return rows[0]
    return r"\begin{gathered}" + r" \\ ".join(rows) + r"\end{gathered}"


def _with_where(formula: str, knobs: Knobs) -> str:
    return lines(formula, where(knobs))


def step(name: str, knobs: Knobs) -> str:
    """The formula of one walkthrough step: "scores", "scaled", "weights" or "z"."""
    if name == "scores":
        return rf"S = {QK}"
    if name == "scaled":
        return _with_where(rf"S' = {logits(knobs)}", knobs)
    if name == "weights":
        return _with_where(rf"A = \mathrm{{softmax}}\!\left({logits(knobs)}\right)", knobs)
    if name == "z":
        return _with_where(rf"Z = \mathrm{{softmax}}\!\left({logits(knobs)}\right) V", knobs)
    raise ValueError(f"step={name!r}: pick scores, scaled, weights or z")


def column_form(knobs: Knobs) -> str:
    """Note 001's convention (tokens as columns): A = KᵀQ, softmax down each column."""
    inner = logits(knobs, qk="A").replace("+ M", r"+ M^\top")
    return lines(
        r"a_{i,j} = k^{i} \cdot q^{j}, \qquad A = K^\top Q",
        rf"A' = \mathrm{{softmax}}_{{\text{{column}}}}\!\left({inner}\right)",
        where(knobs),
    )


def head(knobs: Knobs) -> str:
    """One head and the multi-head concat, as note 000 writes them."""
    inner = logits(knobs, qk=r"X W_q^i (X W_k^i)^\top")
    return lines(
        rf"\mathrm{{head}}_i = \mathrm{{softmax}}\!\left({inner}\right) X W_v^i",
        r"\mathrm{MultiHead}(X) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W_O",
        where(knobs),
    )
