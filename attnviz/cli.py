"""The `attnviz` command: start the app (`streamlit run app.py`) from any folder.

The app's files (app.py, app_pages/, assets/) sit inside the package, so the
command works from a checkout or an editable install (`pip install -e .`), which keeps the package
where it is. A regular wheel carries only the package: the command then says so and exits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
# Faster traces (see the Makefile): glibc keeps large freed buffers instead of re-mapping them.
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "268435456", "MALLOC_TRIM_THRESHOLD_": "536870912"}
HELP = """usage: attnviz [STREAMLIT OPTIONS]

Start the attnviz app in your browser (http://localhost:8501 by default). Options go to
`streamlit run`, e.g.  attnviz --server.port 8600 --server.headless true
"""


def app_file(package: Path = PACKAGE) -> Path:
    """app.py of this installation, or a ValueError that says how to get one."""
    app = package / "app.py"
    if not (app.is_file() and (package / "app_pages").is_dir() and (package / "assets").is_dir()):
        raise ValueError(
            f"attnviz's app files (app.py, app_pages/, assets/) are not in the package at "
            f"{package}: a regular wheel installs the engine and attnviz.show only. To run the "
            "app, clone the repository and `pip install -e .` there (or `make run`)."
        )
    return app


def command(args: list[str]) -> list[str]:
    """The streamlit command line that starts the app with `args`."""
    options = list(args)
    if not any(a.startswith("--browser.gatherUsageStats") for a in options):
        options += ["--browser.gatherUsageStats", "false"]
    return [sys.executable, "-m", "streamlit", "run", str(app_file()), *options]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    try:
        cmd = command(args)
    except ValueError as err:
        print(f"attnviz: {err}", file=sys.stderr)
        return 2
    env = {**MALLOC, **os.environ}
    os.chdir(ROOT)  # .streamlit/ config and relative asset paths resolve as with `make run`
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached: exec replaces this process


if __name__ == "__main__":
    raise SystemExit(main())
