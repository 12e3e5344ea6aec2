"""deploy/nginx.conf in front of two replicas, on this machine (deploy/replicas.py): Debian's
nginx with the real config (only the addresses changed), two `python -m attnviz.ui.launch`
servers, and a client that speaks Streamlit's websocket protocol (bench/wsclient.py) through the
proxy."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two app replicas behind nginx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "deploy"))

from replicas import NGINX, Replicas, nginx_config  # noqa: E402


def _get(url: str, cookie: str | None = None) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}


@pytest.fixture(scope="module")
def proxy():
    if not Path(NGINX).exists():
        reason = f"Debian's nginx is not installed at {NGINX} (`make test` installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    # deploy/replicas.py: the real deploy/nginx.conf (only the addresses changed) in front of
    # two `make run` servers
    with Replicas(2) as group:
        group.wait(timeout=180)
        yield group.url, {f"127.0.0.1:{p}" for p in group.ports}


def test_the_config_lists_every_replica_it_is_given(tmp_path) -> None:
    conf = nginx_config(tmp_path, 8080, [9001, 9002, 9003]).read_text()
    assert re.findall(r"server 127\.0\.0\.1:(\d+);", conf) == ["9001", "9002", "9003"]
    assert "hash $attnviz_route consistent;" in conf and "app1" not in conf
    check = subprocess.run([NGINX, "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path)],
                           capture_output=True, text=True)  # fmt: skip
    if Path(NGINX).exists():
        assert check.returncode == 0, check.stderr


def _run_async(coro):
    """asyncio.run in a thread of its own: the browser tests (Playwright's sync API) leave an
    event loop running in the main thread when they run first in the same process."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as err:  # noqa: BLE001 - raised again in the caller
            box["error"] = err

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_a_session_works_through_nginx_and_stays_on_one_replica(proxy) -> None:
    from wsclient import Session

    url, replicas = proxy
    status, headers = _get(url + "/")
    assert status == 200
    route = re.search(r"attnviz_route=([^;]+)", headers["set-cookie"]).group(1)
    first = headers["x-attnviz-replica"]
    assert first in replicas
    cookie = f"attnviz_route={route}"

    async def visit() -> tuple[str, str, list[bool]]:
        async with Session(url, headers={"Cookie": cookie}, timeout=180) as s:
            handshake = s.ws.response
            upgraded = (handshake.status_code, handshake.headers.get("Upgrade", "").lower())
            ran = [(await s.rerun()).ok]
            s.set("text", string_value="the teacher reads a book to the class")
            ran.append((await s.rerun()).ok)
            s.set("layers", double_array_value=[2])
            run = await s.rerun()
            ran.append(run.ok and "layer" in run.elements)  # a second layer: its slider appears
            return upgraded, handshake.headers["X-Attnviz-Replica"], ran

    upgraded, ws_replica, ran = _run_async(visit())
    assert upgraded == (101, "websocket")
    assert ws_replica == first  # the websocket went where the page came from
    assert ran == [True, True, True]
    for _ in range(5):  # and so does everything after it
        assert _get(url + "/", cookie)[1]["x-attnviz-replica"] == first


def test_visitors_are_spread_over_the_replicas(proxy) -> None:
    url, replicas = proxy
    seen = {_get(url + "/_stcore/health", f"attnviz_route=student{i}")[1]["x-attnviz-replica"]
            for i in range(16)}  # fmt: skip
    assert seen == replicas
