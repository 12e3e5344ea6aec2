"""Server warm-up: load the bundled model in the background at start, then freeze the collector.

A cold server made its first visitor wait while the page loaded the model (bench/load.py --cold).
Here a daemon thread does it once per process, started when the server starts
(`python -m attnviz.ui.launch`, which `make run` uses) or, under a plain `streamlit run`, on the
first page run; pages show its progress until it is ready.

Once the imports and the model are loaded, `gc.freeze()` moves the objects they made (hundreds of
thousands) into the collector's permanent generation, so a collection walks only what the
sessions made since. ATTNVIZ_GC_FREEZE=0 turns this off (the baseline in bench/load.py).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

from attnviz.i18n import Message

_lock = threading.Lock()
_done = threading.Event()
_state: dict[str, Any] = {"thread": None, "model": None, "error": None, "message": "", "t0": 0.0}


def freeze_enabled() -> bool:
    return os.environ.get("ATTNVIZ_GC_FREEZE", "1").strip() != "0"


def freeze_gc() -> bool:
    """Collect once, then move every object alive now out of later collections' way."""
    if not freeze_enabled():
        return False
    gc.collect()
    gc.freeze()
    return True


def _say(message: str) -> None:
    _state["message"] = message


def preload_imports() -> None:
    """Import what the pages import (torch, transformers, plotly, pandas), so that neither the
    first visitor's script nor the loader waits on the other's imports, and the freeze covers
    them. `attnviz.ui.launch` calls this before the server starts."""
    import pandas  # noqa: F401
    import plotly.graph_objects  # noqa: F401

    import attnviz.engine.hooked.loading  # noqa: F401
    import attnviz.engine.hooked.tracing  # noqa: F401
    import attnviz.views.frames  # noqa: F401
    import attnviz.views.panels  # noqa: F401


def _load() -> None:
    try:
        _say(Message("load.imports"))
        preload_imports()
        from attnviz.engine.hooked import load_model
        from attnviz.serve import tracing

        _state["model"] = load_model(None, device="auto", progress=_say)
        tracing.register(_state["model"])  # a request names it by its key
        _say(Message("load.ready"))
    except Exception as err:  # shown to the visitor; the server keeps working
        _state["error"] = err
    finally:
        freeze_gc()
        _done.set()


def start() -> None:
    """Start loading the bundled model in a background thread (once per process)."""
    with _lock:
        if _state["thread"] is not None:
            return
        _state["t0"] = time.monotonic()
        thread = threading.Thread(target=_load, name="attnviz-warmup", daemon=True)
        _state["thread"] = thread
        thread.start()


def started() -> bool:
    return _state["thread"] is not None


def ready() -> bool:
    return _done.is_set()


def progress() -> tuple[str, float]:
    """The loader's last message and the seconds since it started."""
    return _state["message"], time.monotonic() - _state["t0"] if started() else 0.0


def bundled_model(timeout: float | None = None):
    """The bundled model once loaded (waits up to `timeout` s; None waits for it). Raises what the
    loader raised, or TimeoutError."""
    start()
    if not _done.wait(timeout):
        raise TimeoutError("the bundled model is still loading")
    if _state["error"] is not None:
        raise _state["error"]
    return _state["model"]
