"""`python -m attnviz.ui.serve app.py [streamlit options]`: `streamlit run`, with the bundled model
loading in the background from the moment the server starts (attnviz.warmup), so the first
visitor sees the page and a progress message at once instead of a white page. The pages' imports
are done first, before the server answers: a first script run that had to wait for torch's import
in another thread would keep the page white for seconds."""

from __future__ import annotations

import sys

from attnviz import warmup


def main(argv: list[str]) -> None:
    from streamlit.web import cli

    import attnviz.ui  # noqa: F401  (the pages' imports: streamlit, torch, plotly)

    warmup.preload_imports()
    warmup.start()
    cli.main(args=["run", *argv], prog_name="streamlit")  # exits with streamlit's status


if __name__ == "__main__":
    main(sys.argv[1:])
