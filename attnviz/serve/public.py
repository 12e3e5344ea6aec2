"""Public mode, for a server a whole class (or the internet) can reach: ATTNVIZ_PUBLIC=1.

In public mode the Pretrained page offers only the models of an allowlist (ATTNVIZ_MODELS, names
separated by commas; by default the bundled models that are installed: all-MiniLM-L6-v2, the
models attnviz trained and the registry LLMs fetched by `attnviz models`,
attnviz.bundled_models()), takes no paths (a .gguf file included), never looks a typed name up
on disk or on the Hub, and shows no paths or library errors in its messages. The budget's limits
(attnviz.engine.budget) apply in every mode; public mode lowers the token and text limits unless
they are set explicitly.
"""

from __future__ import annotations

import os

from attnviz.engine import validate
from attnviz.engine.budget import public
from attnviz.engine.bundled import bundled_models
from attnviz.engine.hooked.families import DEFAULT_NAME

__all__ = ["allowed_models", "check_model", "public"]


def allowed_models() -> list[str]:
    """The names public mode offers: ATTNVIZ_MODELS (comma-separated), else the bundled models
    (the default first, then those attnviz trained and the registry LLMs, each where installed)."""
    raw = os.environ.get("ATTNVIZ_MODELS", "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    installed = [m.name for m in bundled_models() if m.installed and m.name != DEFAULT_NAME]
    return names or [DEFAULT_NAME, *installed]


def check_model(name: str | None) -> str | None:
    """In public mode, refuse a name outside the allowlist without touching the disk or the Hub;
    the bundled model is None. Outside public mode, only the name's form is checked."""
    name = validate.model_name(name)
    if not public():
        return name
    allowed = allowed_models()
    if name is None:
        if DEFAULT_NAME in allowed:
            return None
        name = allowed[0]
    if name not in allowed:
        raise ValueError(
            f"model {validate.short(name)} is not available on this server: pick one of "
            f"{', '.join(allowed)}"
        )
    return None if name == DEFAULT_NAME else name
