"""`pip install attnviz` from a built wheel, then `attnviz`: the app runs from any folder, offline.

The wheel is built from a copy of the tracked sources (pip wheel --no-deps --no-index
--no-build-isolation: nothing is downloaded) and installed into a fresh venv that has no pip of its
own and sees the shared venv's packages (torch, transformers, streamlit...) through a .pth file;
the source tree is never on its path (every command runs from a temporary folder, so `import
attnviz` can only find the installed copy). `attnviz` must then answer /_stcore/health and draw
the Pretrained-model page through Streamlit's websocket, as a browser would. About 30-60 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from attnviz import cli
from tests.apphelpers import ROOT
from tests.e2e.conftest import app_process
from tests.installs import unmet
from tests.wsclient import Session, chart_specs

pytestmark = pytest.mark.slow
OFFLINE = {"HF_HUB_OFFLINE": "1", "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, **OFFLINE}
    env.pop("PYTHONPATH", None)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from the tracked files (a copy: no build/ or egg-info left in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    tracked = run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    untracked = run(["git", "ls-files", "-z", "--others", "--exclude-standard"], cwd=ROOT)
    for name in filter(None, tracked + untracked.stdout.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
         "-w", str(out), str(src)],
        cwd=out,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (found,) = out.glob("attnviz-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("fresh") / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    assert made.returncode == 0, made.stderr
    py = where / "bin" / "python"
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    (Path(site.stdout.strip()) / "shared.pth").write_text(sysconfig.get_path("purelib") + "\n")
    done = run([py, "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=where)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return where


def test_the_wheel_carries_the_whole_app(wheel) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = {f"attnviz/app_pages/{p.name}" for p in (ROOT / "attnviz" / "app_pages").glob("*.py")}
    assert pages and pages <= names
    assert {
        "attnviz/app.py",
        "attnviz/cli.py",
        "attnviz/assets/i18n/en.toml",
        "attnviz/assets/i18n/zh.toml",
        "attnviz/assets/streamlit/config.toml",
    } <= names
    js = {f"attnviz/assets/js/{p.name}" for p in (ROOT / "attnviz" / "assets" / "js").glob("*.js")}
    assert js <= names
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt")))
    assert b"attnviz = attnviz.cli:main" in entry


def test_the_installed_package_imports_and_loads_the_bundled_model(venv) -> None:
    check = run([venv / "bin" / "python", "-m", "pip", "check"], cwd=venv)
    # every dependency is declared (tests/installs.py: the one left out on purpose)
    assert check.returncode == 0 or not unmet(check.stdout), check.stdout + check.stderr
    code = (
        "import attnviz, torch; torch.set_num_threads(1); print(attnviz.__file__);"
        "m = attnviz.load_model(device='cpu', progress=print);"
        "t = attnviz.trace_model(m, 'The cat sat.');"
        "w = attnviz.show(t, view='explore'); v = attnviz.show(t, view='lines');"
        "assert 'export default' in w._esm and '<svg' in v._repr_html_();"
        "print(len(t.layers), t.tokens[1])"
    )
    done = run([venv / "bin" / "python", "-c", code], cwd=venv)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith(str(venv)), lines[0]  # the installed copy, not the checkout
    assert lines[-1] == "6 the"


def test_the_apps_settings_travel_with_the_package() -> None:
    """The packaged settings are the repository's .streamlit/config.toml, passed as options."""
    repo = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert tomllib.loads(cli.SETTINGS.read_text()) == repo
    cmd = cli.command(["--server.port", "8600", "--runner.postScriptGC=true"])
    assert cmd[1:4] == ["-m", "attnviz.ui.launch", str(ROOT / "attnviz" / "app.py")]
    joined = " ".join(cmd)
    assert "--server.fileWatcherType none" in joined and "--server.maxMessageSize 16" in joined
    assert "--runner.postScriptGC false" not in joined  # the user's option wins
    assert cmd[-3:] == ["--server.port", "8600", "--runner.postScriptGC=true"]


def test_attnviz_starts_the_app_from_any_folder(venv, tmp_path) -> None:
    log = tmp_path / "attnviz.log"
    env = {**os.environ, **OFFLINE, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    with app_process([venv / "bin" / "attnviz"], log, tmp_path, env, timeout=150) as (_, port):
        session = Session(port)
        try:
            drawn = session.run(page="pretrained", timeout=120)
        finally:
            session.close()
        assert "exception" not in drawn, drawn["exception"][0].message
        specs = chart_specs(drawn)
        assert specs and specs[0]["data"], "the Pretrained-model page drew no chart"
        logged = log.read_text()
        assert "warm in" in logged, logged[-2000:]  # started through attnviz.ui.launch
        assert "Traceback" not in logged, logged[-3000:]


def test_an_incomplete_install_says_what_is_missing(tmp_path) -> None:
    (tmp_path / "app_pages").mkdir()
    with pytest.raises(ValueError, match=r"app\.py.*missing.*pip install"):
        cli.app_file(tmp_path)
    assert cli.app_file() == ROOT / "attnviz" / "app.py"


def test_the_engine_needs_no_ui_strings(monkeypatch, tmp_path) -> None:
    from attnviz import i18n

    monkeypatch.setattr(i18n, "ASSETS", tmp_path / "nowhere")
    i18n.table.cache_clear()
    try:
        message = i18n.Message("load.finding", name="x")
    finally:
        i18n.table.cache_clear()
    assert message == "load.finding name=x" and message.key == "load.finding"
