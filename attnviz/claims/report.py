"""A run's records as files: report.json (everything, read back by the Reproduce page) and
report.md (the table of claims a person reads)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnviz.claims.record import Record
from attnviz.claims.setting import Setting

FORMAT = 1


def as_report(records: list[Record], s: Setting, seconds: float, threads: int) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seconds": round(seconds, 1),
        "threads": threads,
        "setting": asdict(s),
        "records": [r.as_json() for r in records],
    }


def read(path: str | Path) -> tuple[dict[str, Any], list[Record]]:
    """A saved report.json: (its run's facts, its records); a ValueError says what is wrong."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not a readable report: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a report of format {FORMAT}")
    try:
        records = [Record.from_json(r) for r in data["records"]]
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: a record is incomplete ({err})") from err
    return {k: v for k, v in data.items() if k != "records"}, records


def _number(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}"
    return "—" if x is None else str(x)


def _cell(text: str) -> str:
    """Text in a Markdown table cell: a "|" (SmolLM2's <|im_start|>) would end the cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: dict[str, Any], records: list[Record]) -> str:
    """The table of claims: one row per (claim, model), with the verdict and its reason."""
    lines = [
        "# attnviz reproduce",
        "",
        f"Measured {report['date']} in {report['seconds']:.0f} s on {report['threads']} CPU "
        "threads by `attnviz reproduce --out DIR`.",
        "",
        "| claim | model | attnviz's numbers | paper | verdict | why |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        numbers = ", ".join(f"{k} {_number(v)}" for k, v in r.numbers.items())
        paper = ", ".join(f"{k} {_number(v)}" for k, v in r.paper.items()) or "—"
        cells = [_cell(x) for x in (r.claim, r.model, f"`{numbers}`", f"`{paper}`")]
        lines.append(f"| {' | '.join(cells)} | **{r.verdict}** | {_cell(r.reason)} |")
    for m in report.get("merged", []):
        lines += ["", f"Merged in: {', '.join(m['claims'])}, measured {m['date']} in "
                  f"{m['seconds']:.0f} s on {m['threads']} CPU threads by `attnviz reproduce "
                  f"--only {' '.join(m['claims'])}`."]  # fmt: skip
    lines += ["", "Each row again: its command, e.g. `" + (records[0].command if records else "")]
    lines[-1] += "`."
    lines += ["", "Sources:", ""]
    lines += sorted({f"- {r.claim}: {r.source}" for r in records})
    return "\n".join(lines) + "\n"


def write(records: list[Record], out: Path, s: Setting, seconds: float) -> dict[str, Any]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    report = as_report(records, s, seconds, torch.get_num_threads())
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                     encoding="utf-8")  # fmt: skip
    (out / "report.md").write_text(markdown(report, records), encoding="utf-8")
    return report
