"""Running the claims: every claim on every shipped model it applies to, each model loaded once,
with progress and a stop request checked between claims; the records written as report.json and
report.md (attnviz.claims.report)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnviz.claims import bos, heads, induction, knockout, kobayashi, phase, report, sink
from attnviz.claims.record import Record
from attnviz.claims.report import write
from attnviz.claims.setting import Setting, command
from attnviz.engine.bundled import registry_file
from attnviz.engine.hooked.families import DEFAULT_NAME

CHAR = "attnviz-char-zh-en"
LLMS = ("smollm2-135m", "gemma-3-270m")


@dataclass(frozen=True)
class Claim:
    measure: Callable[..., Record]  # (model, name, setting, shared) -> Record
    models: tuple[str, ...]  # the shipped models it is measured on
    about: str  # one line for --help and the page


CLAIMS = {
    "sink": Claim(sink.sink_metric, (*LLMS, CHAR), "Gu et al. 2024: Sink_0.3 on 64-token prompts"),
    "sink_norms": Claim(sink.sink_norms, (*LLMS, CHAR), "the sink token's ‖h‖, ‖k‖, ‖v‖ by layer"),
    "kobayashi": Claim(kobayashi.special_tokens, (DEFAULT_NAME,),
                       "Kobayashi et al. 2020: moved shrinks [CLS]/[SEP]'s share"),
    "bos": Claim(bos.one_bos, LLMS, "one BOS on plain text and on a chat prompt (GGUF models)"),
    "in_context": Claim(induction.in_context, LLMS, "Olsson et al. 2022: the in-context score"),
    "prefix_matching": Claim(induction.prefix_matching, LLMS,
                             "Olsson et al. 2022: the atlas's induction heads' prefix matching"),
    "knockout": Claim(knockout.knockout, LLMS,
                      "top-k induction heads silenced against 20 random sets of k"),
    "phase_change": Claim(phase.phase_change, (phase.LAB,),
                          "Olsson et al. 2022: the lab's induction step against its loss bump"),
    "heads_needed": Claim(heads.heads_needed, (*LLMS, CHAR),
                          "arXiv 2605.08853: heads needed for 80 % of an induction task"),
}  # fmt: skip
MODELS = (DEFAULT_NAME, *LLMS, CHAR, phase.LAB)


def _checked(only: Iterable[str] | None, models: Iterable[str] | None) -> tuple[list, list]:
    names = list(CLAIMS) if only is None else list(only)
    wrong = [n for n in names if n not in CLAIMS]
    if wrong:
        raise ValueError(f"no claim named {', '.join(wrong)}: pick from {', '.join(CLAIMS)}")
    chosen = list(MODELS) if models is None else list(models)
    unknown = [m for m in chosen if m not in MODELS]
    if unknown:
        raise ValueError(
            f"{', '.join(unknown)}: not a shipped model; pick from {', '.join(MODELS)}"
        )
    return names, chosen


def _load(name: str, device: str):
    if name == phase.LAB:  # the lab trains its own model
        return None
    from attnviz.engine.hooked import load_model

    return load_model(None if name == DEFAULT_NAME else name, device=device)


def _missing(claim: str, name: str) -> Record:
    c = CLAIMS[claim]
    return Record(claim, c.about, "", name, {}, "not comparable",
                  f"{name} is not installed here: `attnviz models` fetches it",
                  command(claim, name))  # fmt: skip


def reproduce(
    only: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    out: str | Path | None = None,
    progress: Callable[[float, str], object] | None = None,
    setting: Setting | None = None,
    stop: Callable[[], bool] | None = None,
    device: str = "cpu",
) -> list[Record]:
    """Every claim in `only` (default: all of CLAIMS) on every model in `models` it applies to
    (default: all shipped), as Records; written to `out` (report.json, report.md) when given.
    `progress(fraction, message)` after each step; `stop()` true ends the run between claims
    (the records so far are returned and written)."""
    names, chosen = _checked(only, models)
    s = setting or Setting()
    # claim by claim (the knock-out, the slowest, last); each model loaded once a claim
    plan = [(m, c) for c in names for m in chosen if m in CLAIMS[c].models]
    records: list[Record] = []
    start = time.perf_counter()
    loaded: dict[str, object] = {}
    shared: dict[str, dict] = {m: {} for m in chosen}  # per model, across claims: its atlas
    for i, (name, claim) in enumerate(plan):
        if stop is not None and stop():
            break
        if progress is not None:
            progress(i / max(len(plan), 1), f"{claim} on {name}")
        if name not in (DEFAULT_NAME, CHAR, phase.LAB) and registry_file(name) is None:
            records.append(_missing(claim, name))
            continue
        if name not in loaded:
            loaded.clear()  # one model in memory at a time
            loaded[name] = _load(name, device)
        model = loaded[name]
        if progress is not None:  # within a claim (the knock-out's k), as a share of it
            shared[name]["progress"] = lambda x, i=i, m=f"{claim} on {name}": progress(
                (i + x) / len(plan), m
            )
        records.append(CLAIMS[claim].measure(model, name, s, shared[name]))
        if out is not None:  # after every record: a run stopped or killed keeps what it measured
            write(records, Path(out), s, time.perf_counter() - start)
    if progress is not None:
        progress(1.0, "done")
    if out is not None:
        write(records, Path(out), s, time.perf_counter() - start)
    return records


def merge(into: str | Path, *runs: str | Path) -> dict[str, Any]:
    """Put the records of later runs (folders `attnviz reproduce --only ... --out` wrote) into the
    report in folder `into`: a record of the same claim and model is replaced, the others kept,
    in the order of CLAIMS; each run is noted under "merged" (its date, claims, seconds, threads)
    and report.md is written again."""
    folder = Path(into)
    facts, records = report.read(folder / "report.json")
    merged = list(facts.get("merged", []))
    for run in runs:
        theirs, new = report.read(Path(run) / "report.json")
        keys = {(r.claim, r.model) for r in new}
        records = [r for r in records if (r.claim, r.model) not in keys] + new
        merged.append(
            {
                "date": theirs["date"],
                "seconds": theirs["seconds"],
                "threads": theirs["threads"],
                "setting": theirs["setting"],
                "claims": sorted({r.claim for r in new}, key=list(CLAIMS).index),
            }
        )
    order = {c: i for i, c in enumerate(CLAIMS)}
    records.sort(key=lambda r: order.get(r.claim, len(order)))  # stable: models keep their order
    merged_report = {**facts, "merged": merged, "records": [r.as_json() for r in records]}
    text = json.dumps(merged_report, indent=1, ensure_ascii=False) + "\n"
    (folder / "report.json").write_text(text, encoding="utf-8")
    (folder / "report.md").write_text(report.markdown(merged_report, records), encoding="utf-8")
    return merged_report
