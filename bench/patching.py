"""Does a head matter: exact activation patching and attribution patching on a real decoder.

Run: .venv/bin/python bench/patching.py [--model smollm2-135m] [--long 512] [--residual]
Prints tables; no assertions. Each measurement runs in a process of its own, so that its peak
RSS is its own (the model's weights included).

Clean: a short sentence, then the animal sentence said twice, cut before " tired" (the model
completes it by copying, an induction); corrupt: the same with the first "tired" replaced by
"hungry" (one token too: the lengths match). Metric: logit(" tired") − logit(" hungry") after the
last token. Measured: the exact head sweep (every head's z patched from clean into corrupt) at
~32 tokens, its time and peak RSS; attribution patching (AtP, one forward each and one backward)
at the same length and at --long tokens (filler text before the same ending), time and peak
RSS; which heads carry the answer, where AtP misses the exact effect by more than 10 % of the
clean − corrupt gap, and where the induction head the atlas finds (L18H6) ranks.

--residual: the residual stream instead (exact sweep of every (layer, position) and AtP) on a
short pair, "The cat was tired. The dog was happy. The cat was" and the same with "hungry":
AtP's estimate beside the exact effect at the edited token, layer by layer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attnviz  # noqa: E402

ANIMAL = "The animal didn't cross the street because it was too"
INTRO = "It was a long day at the farm. "
CLEAN = f"{INTRO}{ANIMAL} tired. {ANIMAL}"
CORRUPT = f"{INTRO}{ANIMAL} hungry. {ANIMAL}"
FILLER = "The farmer walked along the river and counted the geese before the sun went down. "


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def texts(model, n: int | None) -> tuple[str, str]:
    """The pair, with filler before it so that the clean text is about n tokens."""
    if n is None:
        return CLEAN, CORRUPT
    tok = model.tokenizer
    base = len(tok(CLEAN)["input_ids"])
    filler = ""
    while len(tok(filler + CLEAN)["input_ids"]) < n:
        filler += FILLER
    words = filler.split(" ")
    while words and len(tok(" ".join(words) + CLEAN)["input_ids"]) > n:
        words = words[1:]
    prefix = " ".join(words) if len(words) else ""
    assert base <= n
    return prefix + CLEAN, prefix + CORRUPT


def one_forward(model, text: str) -> float:
    """The baseline, measured in the same process: one plain forward of the clean text (median
    of 3, after a warm-up)."""
    import torch

    ids = model.tokenizer(text, return_tensors="pt")["input_ids"]
    times = []
    with torch.inference_mode():
        for _ in range(4):
            t0 = time.perf_counter()
            model.model(input_ids=ids, logits_to_keep=1)
            times.append(time.perf_counter() - t0)
    return sorted(times[1:])[1]


def part(name: str, model_name: str, n: int | None) -> dict:
    """One measurement, in this process: a frame saved as JSON records, time and peak RSS."""
    model = attnviz.load_model(model_name)
    clean, corrupt = texts(model, n)
    forward = one_forward(model, clean)
    rss0 = peak_rss()
    t0 = time.perf_counter()
    if name == "exact":
        frame = attnviz.patch(model, clean, corrupt, answer=" tired", foil=" hungry")
    else:
        frame = attnviz.attribution_patching(model, clean, corrupt, answer=" tired", foil=" hungry")
    seconds = time.perf_counter() - t0
    attrs = {k: v for k, v in frame.attrs.items() if k not in ("clean_tokens", "corrupt_tokens")}
    return {"seconds": seconds, "rss": peak_rss(), "rss_loaded": rss0, "forward": forward,
            "n": len(frame.attrs["clean_tokens"]), "attrs": attrs,
            "rows": frame.to_dict("records")}  # fmt: skip


def spawn(name: str, model: str, n: int | None) -> dict:
    cmd = [sys.executable, __file__, "--part", name, "--model", model]
    if n is not None:
        cmd += ["--n", str(n)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def report(model: str, long: int) -> None:
    import pandas as pd

    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} cores")
    exact = spawn("exact", model, None)
    atp = spawn("atp", model, None)
    atp_long = spawn("atp", model, long)
    mib = 2**20
    print(f"model {model}; clean {CLEAN!r}; corrupt: 'tired' -> 'hungry'")
    a = exact["attrs"]
    print(f"metric logit({a['answer']!r}) - logit({a['foil']!r}): clean {a['clean']:.3f}, "
          f"corrupt {a['corrupt']:.3f}; differ at positions {a['differ']}")  # fmt: skip
    for label, r in (("exact head sweep", exact), ("AtP", atp), (f"AtP at {long}", atp_long)):
        rss, loaded = r["rss"] / mib, r["rss_loaded"] / mib
        print(f"{label:18s} {r['n']:5d} tokens  {r['seconds']:7.2f} s  = "
              f"{r['seconds'] / r['forward']:6.0f} plain forwards ({r['forward']:.3f} s each)  "
              f"peak RSS {rss:7.0f} MiB (before the call {loaded:.0f} MiB)")  # fmt: skip
    print(f"exact sweep / AtP time ratio at {exact['n']} tokens: "
          f"{exact['seconds'] / atp['seconds']:.1f}x")  # fmt: skip
    ex = pd.DataFrame(exact["rows"])
    est = pd.DataFrame(atp["rows"]).merge(ex[["layer", "head", "effect"]], on=["layer", "head"],
                                          suffixes=("", "_exact"))  # fmt: skip
    est["name"] = [f"L{la}H{h}" for la, h in zip(est["layer"], est["head"], strict=True)]
    est["miss"] = (est["effect"] - est["effect_exact"]).abs() > 0.1
    est["miss_star"] = (est["effect_star"] - est["effect_exact"]).abs() > 0.1
    est["rank"] = est["effect_exact"].abs().rank(ascending=False).astype(int)
    cols = ["name", "effect_exact", "effect", "effect_star", "query", "key", "value", "rank"]
    print("\nheads with the largest exact effect (denoising: 1 = restores the clean answer):")
    print(est.sort_values("effect_exact", key=abs, ascending=False)[cols].head(12).to_string(
        index=False, float_format=lambda x: f"{x:.3f}"))  # fmt: skip
    print(f"\nAtP misses (|AtP − exact| > 0.1): {int(est['miss'].sum())} of {len(est)} heads; "
          f"with the q/k/v sum (AtP*): {int(est['miss_star'].sum())}")  # fmt: skip
    print(est[est["miss"] | est["miss_star"]][cols].to_string(index=False,
          float_format=lambda x: f"{x:.3f}"))  # fmt: skip
    corr = est["effect"].corr(est["effect_exact"])
    print(f"correlation AtP vs exact over heads: {corr:.3f}")
    row = est[est["name"] == "L18H6"].iloc[0]
    print(f"\nL18H6: exact effect {row['effect_exact']:.3f} (rank {row['rank']} of {len(est)} by "
          f"|effect|), AtP {row['effect']:.3f}, AtP* q/k/v {row['query']:.3f} / "
          f"{row['key']:.3f} / {row['value']:.3f} (metric units)")  # fmt: skip
    lo = pd.DataFrame(atp_long["rows"])
    lo["name"] = [f"L{la}H{h}" for la, h in zip(lo["layer"], lo["head"], strict=True)]
    top = lo.sort_values("effect", key=abs, ascending=False).head(8)
    print(f"\nAtP at {atp_long['n']} tokens (clean {atp_long['attrs']['clean']:.3f}, corrupt "
          f"{atp_long['attrs']['corrupt']:.3f}): top heads "
          + ", ".join(f"{r.name} {r.effect:.2f}" for r in top.itertuples()))  # fmt: skip


def residual(model_name: str) -> None:
    model = attnviz.load_model(model_name)
    clean = "The cat was tired. The dog was happy. The cat was"
    corrupt = clean.replace("tired", "hungry", 1)
    t0 = time.perf_counter()
    exact = attnviz.patch(model, clean, corrupt, over="residual")
    t1 = time.perf_counter()
    atp = attnviz.attribution_patching(model, clean, corrupt, over="residual", exact=exact)
    t2 = time.perf_counter()
    a = exact.attrs
    print(f"{clean!r} / 'tired' -> 'hungry'; logit({a['answer']!r}) - logit({a['foil']!r}): "
          f"clean {a['clean']:.3f}, corrupt {a['corrupt']:.3f}; {len(exact)} cells")  # fmt: skip
    print(f"exact residual sweep {t1 - t0:.1f} s; AtP {t2 - t1:.1f} s")
    at = a["differ"][0]
    rows = atp[atp["position"] == at][["layer", "effect", "exact", "miss"]]
    print(f"the edited token (position {at}), layer by layer (AtP effect, exact effect):")
    print(rows.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    elsewhere = int(atp[atp["position"] != at]["miss"].sum())
    print(f"misses: {int(atp['miss'].sum())} of {len(atp)} cells, {elsewhere} of them elsewhere")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--long", type=int, default=512, help="tokens of the long AtP run")
    parser.add_argument("--residual", action="store_true", help="the residual stream instead")
    parser.add_argument("--part", choices=["exact", "atp"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        print(json.dumps(part(args.part, args.model, args.n)))
        return
    if args.residual:
        residual(args.model)
        return
    report(args.model, args.long)


if __name__ == "__main__":
    main()
