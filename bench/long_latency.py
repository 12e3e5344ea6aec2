"""A long document where users feel it: a real `streamlit run` of the app (as `make run` starts it),
driven over Streamlit's websocket protocol (bench/wsclient.py) like a browser tab.

Run:  OMP_NUM_THREADS=1 .venv/bin/python bench/long_latency.py [--tokens 4096] [--documents 2]

The model is bench/long_context.py's (a random Llama: 4 layers, 8 heads, 2 K/V heads,
d_model 256, random, saved to a folder and opened with ?model=<folder> on the Pretrained page).
Each document (a different one each time, so no trace or figure is cached from before) is pasted
into the page's "Long document" box while the view is "One query" (cheap), then:
  view -> Overview       the pooled mosaic of every head (its first draw: the pass over bands)
  head -> 5              the overview's image of one head (256 x 256, pooled from the whole map)
  view -> Head detail    numbers of a 512-wide window (positions 0-511)
  window -> middle       a 512-wide window in the middle of the document
  view -> Head statistics  every head's statistics (the same pass: done by now)
  (what a head writes)
  show -> moved          the statistics of moved and the Kobayashi shares
  view -> Overview (moved)  the mosaic of moved (pooled in the same pass as the weights)
  tokens -> words        every view over words: the overview of the words' pooled maps
  tokens -> pieces, view -> Head logits  each head's push on the top next token (the model
                         run again at 4,096 tokens, read at the last one)
  view -> Logit lens     the residual stream after each layer (the same run, kept)
  view -> Compare, compare with a second document  its trace and every head's change (no
                         target: a trace, as a paste)
  show -> weights (Compare)  the same comparison of weights instead of moved
  paste another on the Overview  a second document pasted while the overview is open (the
                         trace and the pass in one rerun: no target, as for the first paste)
The pass over bands starts in the background as soon as the server has made a long trace
(attnviz.serve.bandpool), one layer per core; a view that asks for it mid-way waits for it.
Time: from sending the rerun to its script_finished (what the browser waits for). Bytes: what
arrived on the client's socket for that change (websocket compression on, as the app serves it).
Targets: each change within 2 s and at most 1 MB, at 4,096 tokens on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from load import NEW, Server  # noqa: E402
from long_context import WORDS, build  # noqa: E402
from wsclient import Session  # noqa: E402

TARGET_S, TARGET_BYTES = 2.0, 2**20


def document(n_tokens: int, shift: int) -> str:
    # One WordPiece token a word; [CLS] and [SEP] make up the rest.
    return " ".join(WORDS[(i + shift) % len(WORDS)] for i in range(n_tokens - 2))


async def write_steps(s, step, n_tokens: int, shift: int) -> None:
    """The views of what a head writes at this length (the page is on Head statistics, weights
    shown)."""
    s.set("field", string_array_value=["moved"])
    await step("show -> moved (Head statistics)", "csv_stats")
    s.set("view", string_array_value=["Overview"])
    await step("view -> Overview (moved)", "mosaic")
    s.set("unit", string_array_value=["words"])
    await step("tokens -> words (Overview, moved)", "mosaic")
    s.set("unit", string_array_value=["pieces"])
    await s.rerun()
    s.set("view", string_array_value=["Head logits"])
    await step("view -> Head logits", "dla_grid")
    s.set("view", string_array_value=["Logit lens"])
    await step("view -> Logit lens", "lens_grid")
    s.set("view", string_array_value=["Compare"])
    await s.rerun()
    s.set("cmp", string_value=document(n_tokens, shift + len(WORDS) // 3))
    await step("compare with (trace + compare)", "cmp_grid")
    s.set("field", string_array_value=["weights"])
    await step("show -> weights (Compare)", "cmp_grid")


async def one_document(
    url: str, folder: str, n_tokens: int, shift: int, writes: bool = True
) -> list[tuple]:
    """The steps above for one new document: (name, seconds, bytes, drew, error) each."""
    out = []
    async with Session(url, page="pretrained", query=f"model={folder}", timeout=300) as s:
        run = await s.rerun()
        deadline = time.perf_counter() + 180
        while "view" not in run.elements and time.perf_counter() < deadline:
            await asyncio.sleep(1)  # the model loads in the background on a cold server
            run = await s.rerun()
        s.set("view", string_array_value=["One query, in numbers"])
        await s.rerun()

        async def step(name: str, expect: str, fragment: str = "") -> None:
            run = await s.rerun(fragment)
            error = "; ".join(run.exceptions) or ("" if run.ok else f"status {run.status}")
            out.append((name, run.seconds, run.wire_bytes, expect in run.elements, error))

        s.set("long_doc", string_value=document(n_tokens, shift))
        await step("paste document (trace)", "query_bars")
        s.set("view", string_array_value=["Overview"])
        await step("view -> Overview", "mosaic")
        await step("head -> 5 (head image)", "overview_head", s.set("head", double_array_value=[5]))
        s.set("view", string_array_value=["Head detail"])
        await step("view -> Head detail (512 window)", "detail_weights")
        mid = n_tokens // 2 - 256
        fragment = s.set("window", double_array_value=[mid, mid + 511])
        await step("window -> 512 in the middle", "detail_weights", fragment)
        s.set("view", string_array_value=["Head statistics"])
        await step("view -> Head statistics", "csv_stats")
        if writes:
            await write_steps(s, step, n_tokens, shift)
        # A user who pastes while the overview is open waits for the trace and the pass at once.
        s.set("view", string_array_value=["Overview"])
        await s.rerun()
        s.set("long_doc", string_value=document(n_tokens, shift + len(WORDS) // 2))
        await step("paste another on the Overview", "mosaic")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--documents", type=int, default=2)
    parser.add_argument(
        "--no-writes", action="store_true", help="leave out the views of what a head writes"
    )
    args = parser.parse_args()
    if not 1 <= args.documents <= len(WORDS) // 2:  # each needs two rotations no other one uses
        parser.error(f"--documents: 1 to {len(WORDS) // 2}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        server = Server(NEW, "long")
        try:
            server.wait_healthy()
            print(f"streamlit run attnviz/app.py (as `make run`), OMP_NUM_THREADS="
                  f"{os.environ['OMP_NUM_THREADS']}; the random Llama; {args.tokens:,} tokens; "
                  f"{os.cpu_count()} cores")  # fmt: skip
            print(f"targets: each change <= {TARGET_S} s and <= {TARGET_BYTES / 2**20:.0f} MiB")
            flags = " ".join(sys.argv[1:])
            threads = os.environ["OMP_NUM_THREADS"]
            print(f"command: OMP_NUM_THREADS={threads} python bench/long_latency.py {flags}")
            for d in range(args.documents):
                load = os.getloadavg()[0]
                steps = asyncio.run(
                    one_document(server.url, folder, args.tokens, d + 1, not args.no_writes)
                )
                print(f"\ndocument {d + 1} (load average {load:.2f} -> {os.getloadavg()[0]:.2f})")
                print(f"  {'change':<34} {'s':>6} {'KiB':>8}  drawn  target")
                for name, sec, nbytes, drew, error in steps:
                    trace_step = name.startswith(("paste", "compare with"))
                    met = sec <= TARGET_S and nbytes <= TARGET_BYTES
                    over = [f"+{sec - TARGET_S:.2f} s"] if sec > TARGET_S else []
                    over += [f"+{(nbytes - TARGET_BYTES) / 1024:.0f} KiB"] * (nbytes > TARGET_BYTES)
                    verdict = (
                        "-" if trace_step else ("met" if met else f"NOT met ({', '.join(over)})")
                    )
                    print(f"  {name:<34} {sec:6.2f} {nbytes / 1024:8.0f}  "
                          f"{'yes' if drew else 'NO':<5}  {verdict}")  # fmt: skip
                    if error:
                        print(f"    error: {error[:300]}")
            print(f"\nserver peak RSS {server.peak:.0f} MB")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
