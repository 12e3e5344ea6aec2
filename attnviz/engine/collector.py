"""Python's cyclic garbage collector, paused where attnviz makes many long-lived objects and no
garbage: the imports of torch and transformers' model code (about a million objects) and a
model's load (~10^5: modules, parameters, a tokenizer's added tokens).

Left running, the collector walks those young objects again and again while they are made, and
once more in the first collections after. Paused, and what the body made moved straight to the
oldest generation when it ends (gc.freeze then gc.unfreeze: two list splices, no walk), none of
that runs; the objects are then collected like any old object, at the next full collection, if
they ever become garbage. Nothing stays frozen and no thread is started.

Measured in fresh processes (one thread, this repository's 2-core machine), `import
attnviz.engine.hooked.loading` then Gemma 3's cached load: collections 0.45 s -> 0.01 s (gc
callbacks), the imports 3.4-3.6 s -> 2.6-3.1 s.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off for the body; then every tracked object moved to the oldest
    generation, unless the process froze objects itself (a server after its warm-up: unfreezing
    would put them back in the collector's way), and the collector back as the caller had it
    (also after an exception). Nested pauses leave it off until the outermost ends."""
    was, frozen = gc.isenabled(), gc.get_freeze_count()
    gc.disable()
    try:
        yield
    finally:
        if not frozen:  # a server's own gc.freeze() (serve/warmup.py) is left as it is
            gc.freeze()  # every tracked object into the permanent generation (a splice, no walk)
            gc.unfreeze()  # and from there into the oldest one: the next full collection sees it
        if was:
            gc.enable()
