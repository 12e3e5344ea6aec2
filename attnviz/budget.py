"""The resource budget of one server, in one place: every limit on tokens, bytes and work.

Defaults fit a classroom server (2 cores, a few GB for attnviz). Each limit can be changed with an
environment variable named in its comment, read once per process. The engine checks a request
against it before doing the work and refuses what is over with a ValueError that names the size.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import cache

MiB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Budget:
    max_tokens: int = 512  # ATTNVIZ_MAX_TOKENS: tokens in one input (both sentences together)
    max_weight_bytes: int = 1 * GiB  # ATTNVIZ_MAX_WEIGHT_BYTES: the toy stack's weights, all layers
    max_trace_bytes: int = 512 * MiB  # ATTNVIZ_MAX_TRACE_BYTES: the tensors of one trace
    max_model_bytes: int = 8 * GiB  # ATTNVIZ_MAX_MODEL_BYTES: a pretrained model's parameters
    cache_bytes: int = 512 * MiB  # ATTNVIZ_CACHE_BYTES: all cached traces and figures together
    trace_workers: int = 2  # ATTNVIZ_TRACE_WORKERS: traces computed at once (the rest wait)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"budget {f.name}={value!r} must be a positive whole number")


def _from_env() -> dict[str, int]:
    found = {}
    for f in fields(Budget):
        raw = os.environ.get(f"ATTNVIZ_{f.name.upper()}")
        if raw is None or not raw.strip():
            continue
        try:
            found[f.name] = int(raw)
        except ValueError as e:
            raise ValueError(f"ATTNVIZ_{f.name.upper()}={raw!r} must be a whole number") from e
    return found


@cache
def budget() -> Budget:
    """This process's budget: the defaults, overridden by ATTNVIZ_* environment variables."""
    return Budget(**_from_env())
