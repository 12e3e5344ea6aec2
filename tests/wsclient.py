"""A minimal Streamlit websocket client: a real `streamlit run` server, driven the way the browser
drives it (BackMsg.rerun_script with a query string, a page and widget states; ForwardMsgs back
until script_finished). Used by the concurrency test and the link benchmark."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(env: dict | None = None, log: Path | None = None):
    """`streamlit run app.py` on a free port of 127.0.0.1; yields (port, process), then stops it."""
    port = free_port()
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "attnviz" / "app.py"),
         "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1",
         "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                url = f"http://127.0.0.1:{port}/_stcore/health"
                if urllib.request.urlopen(url, timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            raise RuntimeError("streamlit did not start in 120 s")
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Session:
    """One browser tab: one websocket, one Streamlit session."""

    def __init__(self, port: int) -> None:
        self._connection = connect(
            f"ws://127.0.0.1:{port}/_stcore/stream",
            subprotocols=["streamlit"],
            max_size=None,
            open_timeout=30,
        )
        self.ws = self._connection.__enter__()
        self.elements: dict[str, tuple[str, object]] = {}

    def close(self) -> None:
        self._connection.__exit__(None, None, None)

    def run(self, page: str = "", query: str = "", widgets: list[WidgetState] = (), timeout=180):
        """One rerun; returns {kind: [element protos]} of the new elements it drew."""
        back = BackMsg()
        back.rerun_script.query_string = query
        back.rerun_script.page_name = page
        back.rerun_script.widget_states.widgets.extend(widgets)
        self.ws.send(back.SerializeToString())
        drawn: dict[str, list] = {}
        deadline = time.time() + timeout
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(self.ws.recv(timeout=max(1.0, deadline - time.time())))
            if fwd.HasField("delta") and fwd.delta.HasField("new_element"):
                element = fwd.delta.new_element
                kind = element.WhichOneof("type")
                proto = getattr(element, kind)
                drawn.setdefault(kind, []).append(proto)
                widget_id = getattr(proto, "id", "")
                if isinstance(widget_id, str) and widget_id.startswith("$$ID-"):
                    self.elements[widget_id.rsplit("-", 1)[-1]] = (widget_id, proto)
            if fwd.HasField("script_finished"):
                return drawn

    def widget(self, key: str) -> str:
        return self.elements[key][0]


def chart_specs(drawn: dict) -> list[dict]:
    return [json.loads(c.spec) for c in drawn.get("plotly_chart", [])]
