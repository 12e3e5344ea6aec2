"""What one Streamlit element costs the server a rerun, by kind: a page of N captions, sliders,
select boxes, column rows... rerun by a client over Streamlit's websocket (bench/wsclient.py),
against the same page without them, in the same server.

Run:  .venv/bin/python bench/elements.py             (N = 40 of each kind, 40 reruns each)
      .venv/bin/python bench/elements.py --n 80 --reruns 60

A rerun changes a text box, as a student typing a sentence does; the server's CPU (user + system,
/proc) over the reruns, per rerun, minus the empty page's, over N: ms an element. The page is a
script of its own (written to a temporary folder), not attnviz's: Streamlit's own cost, apart from
what a page computes for its elements.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "deploy"))

from classroom import cpu_s  # noqa: E402
from replicas import free_port, wait_healthy  # noqa: E402
from wsclient import Session  # noqa: E402

# One element of each kind (a column row: a row of two columns with a caption in each, against
# the two captions alone).
PAGE = """
import streamlit as st

kind = st.query_params.get("kind", "")
n = int(st.query_params.get("n", "0"))
text = st.text_input("text", key="text")
for i in range(n):
    if kind == "caption":
        st.caption(f"{text} {i}: a caption of a few words")
    elif kind == "two captions":
        st.caption("left")
        st.caption("right")
    elif kind == "column row":
        left, right = st.columns(2)
        left.caption("left")
        right.caption("right")
    elif kind == "slider":
        st.slider(f"slider {i}", 0, 10, key=f"s{i}")
    elif kind == "selectbox":
        st.selectbox(f"box {i}", list(range(10)), key=f"b{i}")
    elif kind == "multiselect":
        st.multiselect(f"pick {i}", list(range(20)), key=f"m{i}")
    elif kind == "download button":
        st.download_button(f"file {i}", "abc", key=f"d{i}", on_click="ignore")
"""
KINDS = (
    "caption",
    "two captions",
    "column row",
    "slider",
    "selectbox",
    "multiselect",
    "download button",
)


async def cpu_a_rerun(url: str, pid: int, kind: str, n: int, reruns: int) -> float:
    """The server's CPU seconds a rerun of the page with n elements of `kind`."""
    async with Session(url, query=f"kind={kind}&n={n}") as s:
        await s.rerun()
        for i in range(5):  # warm: the widgets registered, the script compiled
            s.set("text", string_value=f"warm {i}")
            await s.rerun()
        before = cpu_s(pid)
        for i in range(reruns):
            s.set("text", string_value=f"sentence {i}")
            await s.rerun()
        return (cpu_s(pid) - before) / reruns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="elements of each kind on the page")
    ap.add_argument("--reruns", type=int, default=40, help="reruns timed for each kind")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "page.py"
        page.write_text(PAGE)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "streamlit", "run", str(page), "--server.port", str(port),
               "--server.headless", "true", "--browser.gatherUsageStats", "false"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(url, [proc], 120)
            empty = asyncio.run(cpu_a_rerun(url, proc.pid, "", 0, args.reruns))
            print(f"the page without them: {empty * 1e3:.2f} ms of server CPU a rerun")
            print(f"{'kind':<16} {'ms a rerun':>10} {'ms an element':>13}   (N = {args.n})")
            for kind in KINDS:
                cpu = asyncio.run(cpu_a_rerun(url, proc.pid, kind, args.n, args.reruns))
                print(f"{kind:<16} {cpu * 1e3:10.2f} {(cpu - empty) / args.n * 1e3:13.3f}")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
