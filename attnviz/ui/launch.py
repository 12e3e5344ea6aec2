"""`python -m attnviz.ui.launch app.py [streamlit options]`: `streamlit run`, opened only once the
server is warm, so that the first visitor's page is drawn as fast as anyone's.

Before the server listens it imports what the pages import (torch, transformers, plotly), loads the
bundled model (attnviz.serve.warmup) and renders the Pretrained-model page and the landing page
once, in this process, with Streamlit's own AppTest: that computes the default sentence's trace into
the shared cache (pinned there) and does every first-time import and set-up a first script run would
otherwise do while a visitor waits. Then `gc.freeze()` moves all of it out of the collector's way.
The first visitor's page is then drawn in the time of a warm load (bench/load.py --cold). Progress
is printed on the console;
a failure to render is printed and the server opens anyway (the pages then say what is wrong).
ATTNVIZ_PRIME=0 skips the rendering (the model still loads in the background from the start).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from attnviz.serve import warmup

PRIMED = ("app_pages/pretrained.py", None)  # the Pretrained-model page, then the app's default page


def prime(app: str, timeout: float = 300) -> bool:
    """Render `app`'s pages in PRIMED once, in this process; True when every one ran cleanly."""
    from streamlit.testing.v1 import AppTest

    from attnviz.ui.caching import trace_cache

    app = str(Path(app).resolve())  # AppTest resolves a relative path against this file
    t0 = time.monotonic()
    try:
        warmup.bundled_model(timeout)
    except Exception as err:  # noqa: BLE001  (the page shows it to the visitor)
        print(f"attnviz: the bundled model did not load: {err}", file=sys.stderr)
        return False
    ok = True
    for page in PRIMED:
        at = AppTest.from_file(app, default_timeout=timeout)
        if page is not None:
            at.switch_page(page)
        try:
            at.run()
        except Exception as err:  # noqa: BLE001  (a warm-up, not the app: serve anyway)
            print(f"attnviz: could not pre-render {page or app}: {err}", file=sys.stderr)
            ok = False
            continue
        if at.exception:
            print(f"attnviz: pre-rendering {page or app} raised {at.exception[0].message}")
            ok = False
    pinned = trace_cache().pin()
    warmup.freeze_gc()
    print(f"attnviz: warm in {time.monotonic() - t0:.1f} s ({pinned} trace(s) cached); opening")
    return ok


# zlib's level for the websocket's per-message deflate (uvicorn leaves zlib's default, 6): a page
# is mostly the overview's PNG, which deflate barely shrinks; level 1 spends a third of the CPU
# for ~1 % more bytes (docs/serving.md).
WEBSOCKET_DEFLATE_LEVEL = 1


def fast_websocket_deflate(level: int = WEBSOCKET_DEFLATE_LEVEL) -> bool:
    """Have uvicorn's websockets (the server Streamlit runs) compress at `level`. False when that
    implementation is not the one installed (then nothing changes)."""
    try:
        from uvicorn.protocols.websockets import websockets_sansio_impl as impl
    except ImportError:
        return False
    made = getattr(impl.ServerPerMessageDeflateFactory, "_attnviz_made", None)
    base = made or impl.ServerPerMessageDeflateFactory

    def factory(**options):
        options["compress_settings"] = {**options.get("compress_settings", {}), "level": level}
        return base(**options)

    factory._attnviz_made = base
    impl.ServerPerMessageDeflateFactory = factory
    return True


def main(argv: list[str]) -> None:
    from streamlit.logger import get_logger
    from streamlit.web import cli

    # Streamlit warns "an update to the [server] config option section was detected, restart"
    # when it re-reads its options with the command-line flags: here that is the first start (the
    # pre-rendering read them without the flags), and the flags do apply. Drop that one warning.
    get_logger("streamlit.config").addFilter(
        lambda record: "config option section was detected" not in record.getMessage()
    )

    import attnviz.ui  # noqa: F401  (the pages' imports: streamlit, torch, plotly)

    warmup.preload_imports()
    fast_websocket_deflate()
    warmup.start()
    app = next((a for a in argv if a.endswith(".py")), "attnviz/app.py")
    if Path(app).is_file() and os.environ.get("ATTNVIZ_PRIME", "1").strip() != "0":
        prime(app)
    cli.main(args=["run", *argv], prog_name="streamlit")  # exits with streamlit's status


if __name__ == "__main__":
    main(sys.argv[1:])
