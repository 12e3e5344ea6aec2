"""Which attnviz modules a request passes through, and where it goes back into a module it called
out of (a module on the call stack entered again from below it: A -> B -> A).

    python scripts/call_path.py            # both paths below
    python scripts/call_path.py --only page

page: the Pretrained page opened on Head detail (a heatmap), through streamlit's AppTest.
corpus: a corpus job's batch of texts scored and written as one Parquet part (no Ray).
Prints, per path, the modules in the order first entered, the re-entries (module pairs with a
count), and the largest folder of the package (with its subfolders) in lines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class Recorder:
    """A profile function for every thread: a stack of module names per thread."""

    def __init__(self) -> None:
        self.order: dict[str, None] = {}
        self.reentries: Counter = Counter()
        self.stacks: dict[int, list[str]] = {}

    def __call__(self, frame, event, arg) -> None:
        stack = self.stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            mod = frame.f_globals.get("__name__", "")
            if mod.startswith("attnviz"):
                self.order.setdefault(mod, None)
                inner = next((m for m in reversed(stack) if m.startswith("attnviz")), None)
                if inner is not None and inner != mod and mod in stack:
                    self.reentries[(inner, mod)] += 1
            stack.append(mod)
        elif event == "return" and stack:
            stack.pop()

    def reset(self) -> None:
        """Forget what was seen (the threads' stacks stay: they are mid-call)."""
        self.order.clear()
        self.reentries.clear()

    def __enter__(self) -> Recorder:
        threading.setprofile(self)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


def page_path() -> None:
    from streamlit.testing.v1 import AppTest

    from attnviz.serve import warmup

    warmup.bundled_model()
    at = AppTest.from_file(str(ROOT / "attnviz" / "app.py"), default_timeout=120)
    at.query_params.update({"view": "detail", "layer": "3", "head": "1"})
    at.switch_page("app_pages/pretrained.py")
    # Recorded from the start, so that the trace workers the first run starts are followed too;
    # only the second run counts (a new sentence: traced, then drawn).
    with Recorder() as rec:
        at.run()
        assert not at.exception, at.exception
        rec.reset()
        at.text_area(key="text").set_value("The cat sat on the mat because it was warm.").run()
    assert not at.exception, at.exception
    report("page", rec)


def corpus_path() -> None:
    from attnviz.engine.hooked import load_model
    from attnviz.serve import corpus

    model = load_model("attnviz-char-zh-en", device="cpu")
    corpus.score_batch(model, [(0, "warm-up text")], 256)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "a.txt").write_text("床前明月光\n\nThe cat sat on the mat.\n", encoding="utf-8")
        with Recorder() as rec:
            texts = corpus.read_corpus(folder / "a.txt")
            manifest = corpus.Manifest("attnviz-char-zh-en", 256, 2, len(texts.texts), "x")
            store = corpus.Store.open(folder / "out", manifest)
            store.write_part(0, corpus.score_batch(model, list(enumerate(texts.texts)), 256))
    report("corpus", rec)


def report(name: str, rec: Recorder) -> None:
    mods = [m for m in rec.order if not m.startswith("attnviz.app_pages")]
    print(f"== {name}: {len(mods)} modules, {sum(rec.reentries.values())} re-entries")
    print("  " + " ".join(m.removeprefix("attnviz.") for m in mods))
    for (inner, mod), n in rec.reentries.most_common():
        print(f"  back into {mod} from {inner}: {n}")


def largest_folder() -> None:
    """Lines of Python in each folder of attnviz/ with its subfolders; the largest printed."""
    sizes, total = Counter(), 0
    for path in (ROOT / "attnviz").rglob("*.py"):
        n = len(path.read_text().splitlines())
        total += n
        parts = path.relative_to(ROOT / "attnviz").parts
        sizes[parts[0] if len(parts) > 1 else "(loose)"] += n
    folder, lines = sizes.most_common(1)[0]
    print(f"largest folder: attnviz/{folder} {lines} lines, {lines / total:.0%} of {total}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("page", "corpus"))
    args = ap.parse_args()
    if args.only in (None, "page"):
        page_path()
    if args.only in (None, "corpus"):
        corpus_path()
    largest_folder()
