"""Shared test setup: few torch threads (2-core machine), app paths."""

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
# Figures are built without plotly's validation in the app (attnviz.views.spec.figure); the
# tests build them with it, so a property plotly does not know fails here.
os.environ.setdefault("ATTNVIZ_VALIDATE_FIGURES", "1")

import torch  # noqa: E402

torch.set_num_threads(1)


def _scan_components_once() -> None:
    """A `streamlit run` server scans the installed packages for v2 components once, at start;
    AppTest scans them again for every new AppTest (0.8 s each here: the metadata of every
    installed distribution is parsed), which was a third of a URL round trip's cost. The
    installed packages do not change while the tests run, so the scan is done once per process,
    as the server does it."""
    import functools

    from streamlit.components.v2 import manifest_scanner

    if not hasattr(manifest_scanner.scan_component_manifests, "cache_info"):
        scan = functools.cache(manifest_scanner.scan_component_manifests)
        manifest_scanner.scan_component_manifests = scan


_scan_components_once()


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


# Files whose tests share nothing costly at module scope: their tests are spread over the
# workers one by one (each is a long walk or a browser run of its own). Every other file runs
# whole on one worker, so its module fixtures (a model, a server, a built wheel) are made once.
SPREAD = frozenset(
    {
        "test_url_roundtrip.py",
        "test_generate_lab_browser.py",
        "test_long_browser.py",
        "test_zh_browser.py",
        "test_pages_browser.py",
        "test_hostile.py",
    }
)


# Files that start a local Ray instance: one unit, so that one worker runs them one after the
# other (two Ray instances starting at once on this machine fail each other's start).
RAY = frozenset({"test_corpus_ray.py", "test_patch_pairs.py"})


def _unit(item: pytest.Item) -> str:
    path = item.nodeid.split("::")[0]
    name = path.rsplit("/", 1)[-1]
    if name in RAY:
        return "ray"
    return item.nodeid if name in SPREAD else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Units of work for `make test`'s workers (`--dist loadgroup`): a file, or one test of a
    SPREAD file. The slow units go first, then the browser files, then the rest, so the last
    unit a worker picks up is a short one (the longest-first rule) and both finish together.
    Within a file the tests keep their order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        unit = _unit(item)
        units.setdefault(unit, []).append(item)
        if unit != item.nodeid:
            item.add_marker(pytest.mark.xdist_group(unit))

    def rank(unit: str) -> int:
        if any(i.get_closest_marker("slow") for i in units[unit]):
            return 0
        return 1 if "/e2e/" in unit else 2

    items[:] = [i for unit in sorted(units, key=rank) for i in units[unit]]
