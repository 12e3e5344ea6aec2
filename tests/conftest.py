"""Shared test setup: few torch threads (2-core machine), app paths."""

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Figures are built without plotly's validation in the app (attnviz.views.spec.figure); the
# tests build them with it, so a property plotly does not know fails here.
os.environ.setdefault("ATTNVIZ_VALIDATE_FIGURES", "1")

import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium per test process. Playwright's sync API runs its own event loop in
    the thread that starts it, so a second sync_playwright() in the same process fails ("Sync API
    inside the asyncio loop"): every browser test shares this one."""
    from tests.e2e.conftest import CHROME_ARGS, CHROMIUM

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        yield b
        b.close()
