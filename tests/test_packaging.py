"""`pip install -e .` in a fresh venv gives a working `attnviz` command, without downloading.

The fresh venv (made with --without-pip) sees the packages already installed here through a .pth
file (so nothing of torch's GBs is fetched), and pip runs with --no-index --no-deps
--no-build-isolation: any attempt to reach a package index would fail the test. `pip check` then
proves that the dependencies pyproject.toml declares are all satisfied by what is visible.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from tests.apphelpers import ROOT
from tests.e2e.conftest import app_process
from tests.installs import unmet

pytestmark = pytest.mark.slow  # a fresh venv, an editable install and an app start


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("fresh") / "venv"
    # No pip or setuptools of its own: the shared ones (setuptools >= 70 builds editable wheels
    # without the `wheel` package) come through the .pth file like every other dependency.
    made = run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    assert made.returncode == 0, made.stderr
    site = run(
        [where / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    )
    (Path(site.stdout.strip()) / "shared.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = run(
        [where / "bin" / "python", "-m", "pip", "install", "--no-index", "--no-deps",
         "--no-build-isolation", "-e", str(ROOT)],
        env=env, cwd=where.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return where


def test_editable_install_declares_what_it_needs(venv) -> None:
    check = run([venv / "bin" / "python", "-m", "pip", "check"])
    assert check.returncode == 0 or not unmet(check.stdout), check.stdout + check.stderr
    code = "import attnviz, attnviz.cli; print(attnviz.__file__); print(attnviz.show.__name__)"
    where = run([venv / "bin" / "python", "-c", code], cwd=venv.parent)
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(ROOT / "attnviz" / "__init__.py"), "show"]
    shown = run([venv / "bin" / "attnviz", "--help"])
    assert shown.returncode == 0 and "streamlit run" in shown.stdout


def test_attnviz_command_starts_the_app(venv) -> None:
    log = venv.parent / "attnviz.log"
    with app_process([venv / "bin" / "attnviz"], log, venv.parent) as (url, _):
        page = urllib.request.urlopen(f"{url}/", timeout=5).read().decode()
        assert "<title>Streamlit</title>" in page or "streamlit" in page.lower()
