"""`streamlit run app.py` from the repository root: the attnviz app, the same as `make run` starts
(attnviz/app.py, run here on every rerun). `make run` also warms the bundled model up before the
server opens (attnviz.ui.launch); this entry loads it on the first visit instead."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parent / "attnviz" / "app.py"))
