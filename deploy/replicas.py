"""N attnviz replicas behind nginx on one machine, without Docker.

Each replica is `make run`'s server (`python -m attnviz.ui.launch`, the same allocator and OpenMP
settings), on a port of its own, pinned to cores of its own with `--pin`; nginx runs
deploy/nginx.conf (sticky sessions by a cookie) with its upstream listing the replicas. The
model files and their conversions are shared: every replica reads the same ATTNVIZ_HOME
(~/.cache/attnviz), and a model converted once is read by all.

    .venv/bin/python deploy/replicas.py --replicas 2 --port 8080 [--pin]

On several machines, run this (or `make run`) on each and list every machine's replicas in one
nginx's upstream (docs/serving.md). bench/load.py and tests/test_deploy.py start their replicas
here. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# `make run`'s SERVE_ENV (Makefile): the heap keeps freed trace memory, in two arenas; OpenMP's
# threads spin a little before they sleep.
SERVE_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "268435456",
    "MALLOC_TRIM_THRESHOLD_": "536870912",
    "MALLOC_ARENA_MAX": "2",
    "GOMP_SPINCOUNT": "10000",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_config(folder: Path, listen: int, ports: list[int], host: str = "127.0.0.1") -> Path:
    """deploy/nginx.conf with `ports` on `host` as its upstream, listening on `listen`, its pid,
    logs and temporary files in `folder` (nginx runs without root's folders)."""
    conf = (ROOT / "deploy" / "nginx.conf").read_text()
    servers = re.findall(r"^\s*server app\d+:8501;\n", conf, flags=re.M)
    if not servers:
        raise ValueError("deploy/nginx.conf has no `server appN:8501;` line in its upstream")
    listed = "".join(f"        server {host}:{port};\n" for port in ports)
    conf = conf.replace("".join(servers), listed, 1)
    conf = conf.replace("listen 80;", f"listen {host}:{listen};")
    head = f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
    if os.geteuid() == 0:
        head += "user root;\n"  # workers write the temporary folders below
    temps = "".join(
        f"    {kind}_temp_path {folder}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = conf.replace("http {\n", f"http {{\n    access_log {folder}/access.log;\n{temps}", 1)
    path = folder / "nginx.conf"
    path.write_text(head + conf)
    return path


LAUNCH = [sys.executable, "-m", "attnviz.ui.launch"]  # `make run`'s: streamlit run, warm


def replica_command(port: int, launcher: list[str] | None = None) -> list[str]:
    """`make run`'s server on `port`, headless, without the file watcher (`launcher`: another
    command in front of the app's options, e.g. plain `streamlit run`)."""
    return [
        *(launcher or LAUNCH), "attnviz/app.py", "--server.port", str(port),
        "--server.headless", "true", "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def start_replica(
    port: int, log: Path, cores: list[int] | None = None, env: dict | None = None
) -> subprocess.Popen:
    """One replica on `port`, its output in `log`; on `cores` only (and as many OpenMP threads)
    when given."""
    env = {**os.environ, **SERVE_ENV, "PYTHONPATH": str(ROOT), **(env or {})}
    cmd = replica_command(port)
    if cores:
        env["OMP_NUM_THREADS"] = str(len(cores))
        cmd = ["taskset", "-c", ",".join(map(str, cores)), *cmd]
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_healthy(url: str, procs: list[subprocess.Popen], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError(f"a process exited before {url} answered")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


class Replicas:
    """`n` replicas and nginx in front of them: `url` is nginx's, `ports` the replicas'.
    `pin`: replica i runs on core i (and on cores i*k .. i*k+k-1 with `cores_each` = k)."""

    def __init__(
        self, n: int, listen: int | None = None, pin: bool = False, cores_each: int = 1,
        folder: Path | None = None, env: dict | None = None,
    ) -> None:  # fmt: skip
        if n < 1:
            raise ValueError(f"replicas must be at least 1, not {n}")
        if pin and n * cores_each > (os.cpu_count() or 1):
            raise ValueError(f"{n} replicas x {cores_each} cores: this machine has "
                             f"{os.cpu_count()} cores")  # fmt: skip
        self.folder = folder or Path(tempfile.mkdtemp(prefix="attnviz-replicas-"))
        self.ports = [free_port() for _ in range(n)]
        self.listen = listen or free_port()
        self.url = f"http://127.0.0.1:{self.listen}"
        self.procs: list[subprocess.Popen] = []
        try:
            for i, port in enumerate(self.ports):
                cores = list(range(i * cores_each, (i + 1) * cores_each)) if pin else None
                log = self.folder / f"replica{i}.log"
                self.procs.append(start_replica(port, log, cores, env))
            self.replicas = list(self.procs)
            conf = nginx_config(self.folder, self.listen, self.ports)
            args = [NGINX, "-c", str(conf), "-p", str(self.folder)]
            check = subprocess.run([*args, "-t"], capture_output=True, text=True)
            if check.returncode:
                raise RuntimeError(f"nginx refused {conf}: {check.stderr.strip()}")
            self.procs.append(subprocess.Popen([*args, "-g", "daemon off;"]))
        except BaseException:
            self.stop()
            raise

    def wait(self, timeout: float = 300) -> None:
        for port in self.ports:
            wait_healthy(f"http://127.0.0.1:{port}", self.procs, timeout)
        wait_healthy(self.url, self.procs, timeout)

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> Replicas:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=2, help="replicas to start (default 2)")
    ap.add_argument("--port", type=int, default=8080, help="nginx's port (default 8080)")
    ap.add_argument("--pin", action="store_true", help="replica i on core i only")
    args = ap.parse_args()
    if not Path(NGINX).exists():
        sys.exit(f"nginx is not installed ({NGINX}): apt-get install nginx")
    with Replicas(args.replicas, args.port, args.pin) as group:
        group.wait()
        print(f"{args.replicas} replicas on ports {group.ports} behind {group.url} "
              f"(logs in {group.folder}); Ctrl-C stops them", flush=True)  # fmt: skip
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while all(p.poll() is None for p in group.procs):
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
