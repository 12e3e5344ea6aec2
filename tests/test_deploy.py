"""deploy/nginx.conf in front of two replicas, on this machine: Debian's nginx with the real
config (only the addresses changed), two `python -m attnviz.ui.launch` servers, and a client that
speaks Streamlit's websocket protocol (bench/wsclient.py) through the proxy."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two app replicas behind nginx

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
sys.path.insert(0, str(ROOT / "bench"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, cookie: str | None = None) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}


def _wait_ok(url: str, procs: list[subprocess.Popen], timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            pytest.fail(f"a server exited before {url} answered (logs in the test's tmp folder)")
        try:
            if _get(url)[0] == 200:
                return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"{url} did not answer within {timeout} s")


def nginx_config(tmp: Path, listen: int, replicas: list[int]) -> Path:
    """deploy/nginx.conf with this machine's ports and a private pid, log and temp folder."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    servers = re.findall(r"^\s*server app\d+:8501;\n", conf, flags=re.M)
    assert len(servers) == 2, "deploy/nginx.conf should list app1 and app2"
    conf = conf.replace(servers[0], f"        server 127.0.0.1:{replicas[0]};\n")
    conf = conf.replace(servers[1], f"        server 127.0.0.1:{replicas[1]};\n")
    conf = conf.replace("listen 80;", f"listen 127.0.0.1:{listen};")
    head = f"pid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\n"
    if os.geteuid() == 0:
        head += "user root;\n"  # workers write the temp folders below
    temps = "".join(
        f"    {kind}_temp_path {tmp}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = conf.replace("http {\n", f"http {{\n    access_log {tmp}/access.log;\n{temps}", 1)
    path = tmp / "nginx.conf"
    path.write_text(head + conf)
    return path


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    if not Path(NGINX).exists():
        reason = f"Debian's nginx is not installed at {NGINX} (`make test` installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("deploy")
    ports = [_port(), _port()]
    procs = []
    try:
        for i, port in enumerate(ports):
            log = open(tmp / f"replica{i}.log", "w")  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "attnviz.ui.launch", "attnviz/app.py", "--server.port",
                     str(port), "--server.headless", "true", "--server.fileWatcherType", "none",
                     "--browser.gatherUsageStats", "false"],
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        listen = _port()
        conf = nginx_config(tmp, listen, ports)
        check = subprocess.run([NGINX, "-t", "-c", str(conf), "-p", str(tmp)], capture_output=True)
        assert check.returncode == 0, check.stderr.decode()
        procs.append(
            subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp), "-g", "daemon off;"])
        )
        for port in ports:
            _wait_ok(f"http://127.0.0.1:{port}/_stcore/health", procs)
        url = f"http://127.0.0.1:{listen}"
        _wait_ok(f"{url}/_stcore/health", procs)
        yield url, {f"127.0.0.1:{p}" for p in ports}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


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
