"""A claim's record: what was claimed, by whom, what attnviz measured, and whether they agree.

| field     | meaning                                                                         |
|-----------|---------------------------------------------------------------------------------|
| claim     | the claim's name in attnviz.claims.CLAIMS ("sink", "knockout", ...)            |
| statement | the claim in one sentence                                                       |
| source    | the paper, and its table or figure                                              |
| model     | the bundled model's name it was measured on                                     |
| numbers   | attnviz's numbers: name -> value (floats, ints, short strings)                   |
| paper     | the paper's numbers for the same quantities, where it gives any                 |
| verdict   | "pass", "fail" or "not comparable"                                              |
| reason    | why that verdict: the criterion, with the numbers it compared                   |
| command   | the shell command that measures this record again                               |
| figure    | the figure's data: plain lists by name (per layer, per position, per k)         |
| link      | URL keys of the app view behind it (page and its keys)                          |
| seconds   | how long the measurement took                                                   |
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

VERDICTS = ("pass", "fail", "not comparable")


@dataclass
class Record:
    claim: str
    statement: str
    source: str
    model: str
    numbers: dict[str, Any]
    verdict: str
    reason: str
    command: str
    paper: dict[str, Any] = field(default_factory=dict)
    figure: dict[str, Any] = field(default_factory=dict)
    link: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict={self.verdict!r} must be one of {VERDICTS}")
        if not self.reason.strip():
            raise ValueError("a record says why it has its verdict: reason is empty")

    def as_json(self) -> dict[str, Any]:
        """The record as plain JSON values (NaN becomes None)."""
        return _plain(asdict(self))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else round(x, 6)
    if hasattr(x, "item"):  # a numpy or torch scalar
        return _plain(x.item())
    return x


def verdict(ok: bool | None, why: str, why_not: str | None = None) -> tuple[str, str]:
    """(verdict, reason): None is "not comparable" (why says why)."""
    if ok is None:
        return "not comparable", why
    return ("pass", why) if ok else ("fail", why_not or why)
