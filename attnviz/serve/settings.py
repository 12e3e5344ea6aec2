"""The server's own knobs: how many forwards run at once, how many bytes of traces and figures it
keeps, how many training runs it allows at once. Each can be changed with an environment variable
named in its comment, read once per process (the engine's limits are attnviz.engine.budget)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from attnviz.engine.budget import MiB, from_env, positive_fields


@dataclass(frozen=True)
class Serving:
    trace_workers: int = 2  # ATTNVIZ_TRACE_WORKERS: forwards run at once (the rest wait, batched)
    cache_bytes: int = 512 * MiB  # ATTNVIZ_CACHE_BYTES: all cached traces and figures together
    lab_runs: int = 2  # ATTNVIZ_LAB_RUNS: training lab runs at once per process (more are refused)

    def __post_init__(self) -> None:
        positive_fields(self, "serving")


@cache
def serving() -> Serving:
    """This process's serving knobs: the defaults, overridden by ATTNVIZ_* environment variables."""
    return Serving(**from_env(Serving, {}))
