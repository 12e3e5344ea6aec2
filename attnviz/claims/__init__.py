"""Claims: published claims about attention, measured on the models attnviz ships.

Each claim is a small function (modules sink, kobayashi, bos, induction, knockout, phase, heads)
that measures one paper's statement on one loaded model (the lab's phase change: on a run of the
Training lab) and returns a Record (attnviz.claims.record): the claim in a sentence, its source,
attnviz's numbers, the paper's where one exists, a verdict (pass, fail, not comparable) with its
reason, the figure's data and the command that measures it again. `attnviz.reproduce()` runs
them over the shipped models and writes report.json and report.md. This job may import engine,
measures and training (the lab's own training run); the pages read its saved report through ui
(it never imports streamlit).
"""

from __future__ import annotations

from attnviz.claims.record import Record
from attnviz.claims.run import CLAIMS, reproduce

__all__ = ["CLAIMS", "Record", "reproduce"]
