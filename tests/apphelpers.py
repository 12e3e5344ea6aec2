"""Helpers for AppTest tests: start the app, read figures back out of the page."""

from __future__ import annotations

import ast
import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent
APP_DIR = ROOT / "attnviz"  # the main script's folder: page paths ("app_pages/x.py") start here
APP = str(APP_DIR / "app.py")


def app(page: str | None = None, query: dict | None = None) -> AppTest:
    if page and ("pretrained" in page or "atlas" in page):
        # AppTest has no browser to rerun the page once the background load is done: wait here.
        from attnviz.serve import warmup

        warmup.bundled_model()
    at = AppTest.from_file(APP, default_timeout=90)
    if query:
        at.query_params.update(query)
    if page:
        at.switch_page(page)  # the first run lands on the page, as a deep link does
    return at.run()


def pretrained_view(model: str, text: str, view: str, **query: str) -> AppTest:
    """The Pretrained page on `view` of `text` with `model`, as a link opens it: drawn without
    an exception or an error message."""
    at = app("app_pages/pretrained.py", query={"model": model, "text": text, "view": view, **query})
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def titled(at: AppTest, start: str) -> dict:
    """The first chart whose title starts with `start`."""
    return next(s for s in specs(at) if s["layout"]["title"]["text"].startswith(start))


def specs(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def heatmap_specs(at: AppTest) -> list[dict]:
    """Only the charts that are heatmaps (gauges and bars are charts too)."""
    return [s for s in specs(at) if s["data"] and s["data"][0].get("type") == "heatmap"]


def decode(arr) -> np.ndarray:
    """A plotly array as numpy: plotly >= 6 sends numpy data as base64 typed arrays."""
    if isinstance(arr, dict) and "bdata" in arr:
        out = np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
        shape = arr.get("shape")
        if shape:
            dims = [int(s) for s in str(shape).split(",")] if isinstance(shape, str) else shape
            out = out.reshape(dims)
        return out
    return np.array(arr, dtype=float)


def z_of(spec: dict, trace: int = 0) -> np.ndarray:
    return decode(spec["data"][trace]["z"])


def page_text(at: AppTest) -> str:
    """All markdown, captions, titles and widget labels of the page, for language checks."""
    parts = []
    for kind in ("markdown", "caption", "title", "header", "subheader", "info", "warning"):
        parts += [str(e.value) for e in at.get(kind)]
    for kind in ("slider", "select_slider", "toggle", "selectbox", "radio", "number_input"):
        parts += [str(w.label) for w in at.get(kind)]
    return "\n".join(parts)


def pages() -> list[str]:
    """The page files app.py's navigation lists, in its order (page("app_pages/x.py", ...), its
    st.Page by absolute path)."""
    tree = ast.parse((ROOT / "attnviz" / "app.py").read_text())
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("Page", "page")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append(node.args[0].value)
    assert found, "no page(...) found in app.py"
    return found


def image_pixels(image) -> np.ndarray:
    """The RGB pixels [h, w, 3] of a mosaic go.Image, from a figure or its spec: the app sends
    it as a PNG data URI (`source`)."""
    import io

    from PIL import Image

    uri = image["source"] if isinstance(image, dict) else image.source
    assert uri.startswith("data:image/png;base64,"), uri[:40]
    png = base64.b64decode(uri.split(",", 1)[1])
    return np.array(Image.open(io.BytesIO(png)).convert("RGB"))


def small_atlas_probes(monkeypatch) -> None:
    """The Head atlas page measures its built-in probes (about 11 texts a language, one of them a
    200-word passage) plus the user's texts, again for every new set of texts. Tests that put many
    texts through the page (hostile texts, URL walks) measure with two probes a language instead
    (a natural sentence and a repeated sequence): the user's text is still measured, with the
    probes it joins, and the page is still drawn from that measurement."""
    from attnviz.measures import roles

    full = roles.probe_texts

    def two_probes(lang: str = "en") -> list[str]:
        if lang == "both":
            return [*two_probes("en"), *two_probes("zh")]
        texts = full(lang)
        return [texts["natural"][0], texts["repeated"][0]]

    monkeypatch.setattr(roles, "probe_list", two_probes)
