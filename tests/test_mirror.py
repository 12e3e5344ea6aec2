"""A classroom without the Hugging Face hub: HF_ENDPOINT pointed at a mirror. Here the mirror is a
local HTTP server that answers the routes huggingface_hub calls (GET /api/models/<id> for the
file list, HEAD and GET /<id>/resolve/<rev>/<file> with the commit and ETag headers, 404 with
X-Error-Code: EntryNotFound for the optional files transformers probes) and serves a tiny random
BERT's real files (save_pretrained, and the bundled model's tokenizer saved beside it). Nothing
leaves the machine: load_model and the app's model box fetch from the mirror into a fresh cache,
and a second, offline load reads that cache."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch
from transformers import BertConfig, BertModel

import attnviz
from tests.apphelpers import ROOT

pytestmark = pytest.mark.slow

REPO = "tiny-org/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Mirror(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    seen: list[str] = []

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
        self.send_response(code)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _answer(self, head: bool) -> None:
        path = self.path.split("?", 1)[0]
        self.seen.append(f"{self.command} {path}")
        missing = {"X-Error-Code": "EntryNotFound", "Content-Type": "application/json"}
        if path in (f"/api/models/{REPO}", f"/api/models/{REPO}/revision/main"):
            info = {"id": REPO, "modelId": REPO, "sha": COMMIT, "private": False,
                    "siblings": [{"rfilename": f} for f in sorted(self.files)]}  # fmt: skip
            body = json.dumps(info).encode()
            return self._send(200, body, {"Content-Type": "application/json"}, head)
        if path.startswith(f"/api/models/{REPO}/tree/"):
            return self._send(200, b"[]", {"Content-Type": "application/json"}, head)
        prefix = f"/{REPO}/resolve/"
        if path.startswith(prefix):
            name = path[len(prefix) :].split("/", 1)[1]
            if name in self.files:
                body = self.files[name]
                etag = f'"{hashlib.sha256(body).hexdigest()}"'
                headers = {"X-Repo-Commit": COMMIT, "ETag": etag,
                           "Content-Type": "application/octet-stream"}  # fmt: skip
                return self._send(200, body, headers, head)
            return self._send(404, b'{"error": "Entry not found"}', missing, head)
        return self._send(404, b'{"error": "Repository not found"}',
                          {**missing, "X-Error-Code": "RepoNotFound"}, head)  # fmt: skip

    def do_GET(self) -> None:  # noqa: N802
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64)  # fmt: skip
    BertModel(config).save_pretrained(folder)
    attnviz.load_model(device="cpu").tokenizer.save_pretrained(folder)
    Mirror.files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    Mirror.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", folder
    server.shutdown()


def run(code: str, env: dict) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        full.pop(name, None)
    full.update({k: v for k, v in env.items() if v is not None})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env=full, cwd=ROOT)  # fmt: skip


def test_load_model_fetches_from_hf_endpoint_then_works_offline(mirror, tmp_path) -> None:
    url, folder = mirror
    env = {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    code = f"""
        import attnviz, torch
        m = attnviz.load_model({REPO!r}, device="cpu")
        t = attnviz.trace_model(m, "the cat sat")
        ref = attnviz.trace_model(attnviz.load_model({str(folder)!r}, device="cpu"), "the cat sat")
        print(m.name, m.n_layers, m.n_heads, t.tokens)
        print("same", all(torch.equal(a.weights, b.weights) for a, b in zip(t.layers, ref.layers)))
    """
    done = run(code, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{REPO} 2 4 ['[CLS]', 'the', 'cat', 'sat', '[SEP]']" in done.stdout
    assert "same True" in done.stdout  # the mirror's weights are the saved ones
    fetched = {s.rsplit("/", 1)[1] for s in Mirror.seen if s.startswith(f"GET /{REPO}/resolve/")}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= fetched, Mirror.seen
    assert f"GET /api/models/{REPO}" in Mirror.seen  # the file list came from the mirror too
    # The cache now holds it: offline, the same name loads without asking the mirror.
    Mirror.seen.clear()
    again = run(f"import attnviz; print(attnviz.load_model({REPO!r}, device='cpu').n_layers)",
                {**env, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.strip().endswith("2") and Mirror.seen == []


def test_the_model_box_loads_through_the_mirror(mirror, tmp_path) -> None:
    url, _ = mirror
    env = {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    code = f"""
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("attnviz/app.py", default_timeout=120)
        at.query_params.update({{"model": {REPO!r}}})
        at.switch_page("app_pages/pretrained.py")
        at.run()
        print("exceptions", len(at.exception), "errors", [e.value for e in at.error])
        print("charts", len(at.get("plotly_chart")))
    """
    done = run(code, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "exceptions 0 errors []" in done.stdout, done.stdout
    assert "charts 0" not in done.stdout
    assert any(s.endswith("/model.safetensors") for s in Mirror.seen), Mirror.seen


def test_an_unreachable_mirror_says_so(tmp_path) -> None:
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")}
    done = run(f"import attnviz; attnviz.load_model({REPO!r}, device='cpu')", env)
    assert done.returncode != 0
    assert "the Hub cannot be reached" in done.stderr and "ValueError" in done.stderr


def test_any_loader_failure_is_a_message_not_a_traceback(monkeypatch) -> None:
    """A mirror that serves broken files can make transformers raise anything (KeyError
    'added_tokens' was one): the page says what failed and stops, without a traceback."""
    from streamlit.testing.v1 import AppTest

    from attnviz.ui import models

    def broken(*args, **kwargs):
        raise KeyError("added_tokens")

    monkeypatch.setattr(models, "get_model", broken)
    at = AppTest.from_file(str(ROOT / "attnviz" / "app.py"), default_timeout=60)
    at.query_params.update({"model": REPO})
    at.switch_page("app_pages/pretrained.py")
    at.run()
    assert not at.exception
    (error,) = [e.value for e in at.error]
    assert error.startswith(f"Could not load ` {REPO} `: KeyError") and "added" in error, error
    assert not at.get("plotly_chart")  # the page stopped there
