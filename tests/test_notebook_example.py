"""docs/notebook_example.ipynb, executed on a real Jupyter kernel (nbclient + ipykernel), offline:
every cell runs, every view's output carries Plotly's figure and a static SVG, the widget's output
carries the widget and its self-contained HTML, and an nbconvert HTML export shows them all."""

from __future__ import annotations

import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

from tests.apphelpers import ROOT

pytestmark = pytest.mark.slow
NOTEBOOK = ROOT / "docs" / "notebook_example.ipynb"
PLOTLY = "application/vnd.plotly.v1+json"
WIDGET = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        assert not cell.get("outputs"), "commit the notebook without outputs"
    env_before = dict(os.environ)
    # The kernel imports attnviz from this checkout (as after `pip install -e .`) and stays offline.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    os.environ.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    try:
        where = tmp_path_factory.mktemp("nb")
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(where)}}).execute()  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    return nb


def outputs(cell) -> list[dict]:
    return [
        o for o in cell.get("outputs", []) if o["output_type"] in ("display_data", "execute_result")
    ]


def text_of(nb) -> str:
    return "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


def test_every_cell_runs_and_prints_what_it_found(executed) -> None:
    errors = [
        o for c in executed.cells for o in c.get("outputs", []) if o["output_type"] == "error"
    ]
    assert not errors, errors[0]["evalue"] if errors else ""
    printed = text_of(executed)
    assert "6 layers x 12 heads" in printed
    assert "it -> animal, strongest head weight" in printed
    assert "k (2, 8, 8) (unexpanded), mask causal: True" in printed
    assert "unchanged=" in printed
    # the rows of head_logits add up to the model's logit (section 5)
    line = next(ln for ln in printed.splitlines() if "rows add up to" in ln)
    total, model = (float(x) for x in re.findall(r"-?\d+\.\d{4}", line)[-2:])
    assert abs(total - model) < 1e-3, line


def test_views_carry_plotly_and_a_static_picture(executed) -> None:
    code = [c for c in executed.cells if c.cell_type == "code"]
    figures = [o for c in code for o in outputs(c) if PLOTLY in o["data"]]
    assert len(figures) >= 8  # overview, link, weights, lines, 4 heads... and rollout
    for o in figures:
        assert o["data"]["text/html"].startswith('<div class="attnviz-static"><svg')
        assert o["data"]["image/svg+xml"].startswith("<svg")
    widgets = [o for c in code for o in outputs(c) if WIDGET in o["data"]]
    widgets = [o for o in widgets if "attnviz widget" in o["data"]["text/plain"]]  # not tqdm's
    assert len(widgets) == 1
    html = widgets[0]["data"]["text/html"]
    assert '<script type="module">' in html and "export default function attnviz" in html
    assert not any(isinstance(o["data"].get("text/plain"), str) and len(o["data"]) == 1
                   for c in code for o in outputs(c)), "a view printed as text only"  # fmt: skip


def test_an_html_export_shows_every_figure_offline(executed) -> None:
    from nbconvert import HTMLExporter

    # JupyterLab saves no widget state by default ("Save Widget State Automatically" is off);
    # with none, nbconvert shows the widget's own HTML. With state saved, nbconvert would load
    # the widget manager from unpkg instead (online only): README "In a notebook" says so.
    saved = nbformat.from_dict(executed)
    saved.metadata.pop("widgets", None)
    body, _ = HTMLExporter().from_notebook_node(saved)
    assert body.count('class="attnviz-static"') >= 8
    assert body.count('class="attnviz-static-widget"') == 1
    assert "export default function attnviz" in body  # the module itself, inlined
