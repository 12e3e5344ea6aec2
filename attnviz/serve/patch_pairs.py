"""Activation patching over a dataset of prompt pairs on Ray: `attnviz patch` and
`attnviz.patch_pairs`.

Each pair {"clean", "corrupt", optional "answer", "foil"} is patched on a Ray worker that holds
the model (attnviz.measures.patching.patch, one frame a pair), on the atlas's machinery
(attnviz.serve.corpus_ray: Ray here or on a cluster, the named workers, the run loop with its
progress and stall check; attnviz.serve.corpus: the manifest and the Parquet parts written
whole, so that a rerun goes on from the finished parts and a folder of another model or other
settings is refused). A pair patch refuses (other token counts, an answer of several tokens) is
skipped with its reason, in the part's metadata and effects.parquet's.

The folder (`--out`): manifest.json, parts/part-NNNNN.parquet (each pair's rows: pair, the
component's layer / head / position, metric, effect), then effects.parquet and effects.csv: per
component the mean, std (ddof 1), min, max and count of `effect` over the pairs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from attnviz.serve import corpus_ray
from attnviz.serve.corpus import Corpus, Manifest, Store, _decoded, _write

OVER = ("heads", "residual")
KEYS = ("clean", "corrupt", "answer", "foil")
STATS = ("mean", "std", "min", "max", "count")
KIND = "patch"


def _pair(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f'{where}: each pair is a JSON object with "clean" and "corrupt" texts')
    for key in ("clean", "corrupt"):
        if not isinstance(value.get(key), str) or not value[key].strip():
            raise ValueError(f'{where}: "{key}" must be a non-empty text')
    for key in ("answer", "foil"):
        if value.get(key) is not None and not isinstance(value[key], (str, int)):
            raise ValueError(f'{where}: "{key}" must be a token\'s text or id')
    return {k: value[k] for k in KEYS if value.get(k) is not None}


def read_pairs(pairs: str | Path | list[dict]) -> Corpus:
    """The pairs as a Corpus whose texts are each pair's canonical JSON (its sha256 names the
    dataset in the manifest); a malformed file or pair is a ValueError that says where."""
    if isinstance(pairs, (str, Path)):
        path = Path(pairs).expanduser()
        if not path.is_file():
            raise ValueError(f"no such pairs file: {str(path)!r}")
        found = []
        for number, line in enumerate(_decoded(path.read_bytes(), str(path)).splitlines(), 1):
            if line.strip():
                where = f"{path.name}:{number}"
                try:
                    found.append((_pair(json.loads(line), where), where))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{where} is not JSON ({err.msg}): one pair a line") from err
    elif isinstance(pairs, (list, tuple)):
        found = [(_pair(p, f"pairs[{i}]"), f"pairs[{i}]") for i, p in enumerate(pairs)]
    else:
        raise ValueError("pairs must be a .jsonl file or a list of dicts")
    if not found:
        raise ValueError("there are no pairs")
    texts = tuple(json.dumps(p, sort_keys=True, ensure_ascii=False) for p, _ in found)
    return Corpus(texts, tuple(w for _, w in found))


def patch_items(model, items: list[tuple[int, str]], over: str) -> dict:
    """What a worker does with a batch of (pair id, pair JSON): patch each pair; a pair patch
    refuses is skipped with its reason. Returns {"sums": the rows, "skipped", "tokens"}."""
    from attnviz.measures.patching import patch

    frames, skipped, tokens = [], [], {}
    for pair_id, text in items:
        pair = json.loads(text)
        try:
            frame = patch(model, pair["clean"], pair["corrupt"], pair.get("answer"),
                          pair.get("foil"), over=over)  # fmt: skip
        except ValueError as err:
            skipped.append((pair_id, str(err)))
            continue
        tokens[pair_id] = len(frame.attrs["clean_tokens"])
        frame.attrs = {}
        frame.insert(0, "pair", pair_id)
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame({"pair": []})
    return {"sums": rows, "skipped": skipped, "tokens": tokens}


def _worker_class():
    import os

    import ray

    @ray.remote(max_restarts=3, max_task_retries=3)
    class PatchWorker:
        """Holds one model; patches batches of pairs, one at a time."""

        def __init__(self, model: str, device: str, threads: int) -> None:
            import torch

            from attnviz.engine.hooked import load_model

            torch.set_num_threads(threads)
            self.model = load_model(model, device=device)
            self.calls = 0  # pairs patched (tests: a resumed run patches none again)

        def score(self, items: list[tuple[int, str]], over: str) -> dict:
            self.calls += len(items)
            return patch_items(self.model, items, over)

        def patched(self) -> int:
            return self.calls

        def pid(self) -> int:
            return os.getpid()

    return PatchWorker


def summary(store: Store, corpus: Corpus) -> pd.DataFrame:
    """effects.parquet and effects.csv from the parts: per component the mean, std, min, max and
    count of `effect` over the pairs patched."""
    frames = [pq.read_table(store.part_path(k)).to_pandas() for k in range(store.manifest.n_parts)]
    rows = pd.concat([f for f in frames if len(f)] or [pd.DataFrame({"pair": []})])
    keys = [c for c in ("layer", "head", "position") if c in rows.columns]
    if keys:
        frame = rows.groupby(keys, sort=True)["effect"].agg(list(STATS)).reset_index()
    else:  # every pair skipped
        frame = pd.DataFrame(columns=list(STATS))
    skipped = [[i, corpus.sources[i], r] for i, r in sorted(store.skipped.items())]
    meta = {"model": store.manifest.model, "settings": store.manifest.settings,
            "n_pairs": store.manifest.n_texts, "skipped": skipped}  # fmt: skip
    _write(store.out / "effects.parquet", frame, meta)
    tmp = store.out / "effects.csv.tmp"
    frame.to_csv(tmp, index=False)
    tmp.replace(store.out / "effects.csv")
    frame.attrs = {"skipped": skipped, "n_pairs": store.manifest.n_texts}
    return frame


def patch_pairs(
    model,
    pairs: str | Path | list[dict],
    out: str | Path,
    over: str = "heads",
    address: str | None = None,
    workers: int | None = None,
    progress: bool | Callable[[corpus_ray.Progress], object] | None = None,
) -> pd.DataFrame:
    """Activation patching (attnviz.patch, denoising) of `model` (a name load_model takes, or a
    model it returned) on every pair of `pairs` (a .jsonl file or a list of dicts with "clean",
    "corrupt" and optional "answer", "foil"), on Ray workers that hold the model, written to
    `out` as Parquet parts (a rerun with the same model, `over` and pairs skips the finished
    ones) and summed up: one row per component with the mean, std, min, max and count of
    `effect` over the pairs (also out/effects.parquet and effects.csv). A pair patch refuses is
    skipped, its reason in attrs["skipped"]. `progress`: True draws a bar on stderr, a function
    gets a Progress after each part."""
    from attnviz.engine.hooked import LoadedModel, load_model
    from attnviz.measures.patch_runs import check_decoder

    if over not in OVER:
        raise ValueError(f"--over {over!r}: give one of {', '.join(OVER)}")
    corpus = read_pairs(pairs)
    address = corpus_ray.check_address(address)
    corpus_ray._ray()
    corpus_ray.check_workers(workers)
    stall_s = corpus_ray.stall_seconds()
    loaded = model if isinstance(model, LoadedModel) else load_model(model, device="cpu")
    check_decoder(loaded)  # an encoder is refused here, not on every pair
    the_plan = corpus_ray.plan(loaded, None, 0)
    n = len(corpus.texts)
    manifest = Manifest(the_plan.model, the_plan.max_tokens, corpus_ray.batch_size(n), n,
                        corpus.sha256, settings=f"{KIND} over={over}")  # fmt: skip
    store = Store.open(out, manifest)
    if len(store.done()) < manifest.n_parts:  # a finished folder is only summed up: no Ray
        with corpus_ray.ray_session(address):
            actors = corpus_ray.start_workers(the_plan, workers, manifest.n_parts, KIND,
                                              _worker_class)  # fmt: skip
            report = partial(corpus_ray.bar, unit="pairs") if progress is True else progress
            corpus_ray.run(corpus, store, actors, report or None, stall_s, args=(over,))
    return summary(store, corpus)


__all__ = ["patch_pairs", "read_pairs", "summary"]
