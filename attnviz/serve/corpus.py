"""A head atlas over a corpus, without Ray: the corpus file read and checked, one batch of texts
scored by a loaded model, and the folder of Parquet parts a run writes and a page opens.

A run's folder (`attnviz atlas --out FOLDER`):
    manifest.json         the model, --max-tokens, the batch size and the texts' sha256: a rerun
                          with other settings or other texts is refused, never mixed in
    parts/part-NNNNN.parquet  one batch of texts: attnviz.measures.roles.role_sums' rows (per text
                          and head the sums, counts and largest rows), written whole or not at all;
                          a rerun skips the parts that are there
    atlas.parquet         every part in one file, with the texts (source, tokens, a snippet) and
                          the skipped texts in its metadata: what the Atlas page opens
    heads.csv             the merged atlas, the DataFrame head_roles returns
Ray (attnviz.serve.corpus_ray) only schedules score_batch on workers; nothing here needs it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from attnviz.engine.budget import budget, size
from attnviz.measures import roles

FORMAT = 1
SNIPPET = 600  # characters of each text kept in atlas.parquet for the page
ROW_BYTES = 64  # an atlas.parquet of n bytes may hold n / ROW_BYTES rows (texts x heads): a row
# takes about 170 bytes on disk and 420 in memory, so 64 MiB opens to at most ~430 MB
ATLAS_DIR_ENV = "ATTNVIZ_ATLAS_DIR"  # a folder of saved corpus atlases the page may list
_META_KEY = b"attnviz"


@dataclass(frozen=True)
class Corpus:
    """Texts read from a corpus file, each with where it came from ("notes.txt:12")."""

    texts: tuple[str, ...]
    sources: tuple[str, ...]
    ignored: int = 0  # blank lines or empty files, which are not texts

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for text in self.texts:
            digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
        return digest.hexdigest()


def _decoded(data: bytes, name: str) -> str:
    """UTF-8 text, or a ValueError that says it is not (binary files hold NUL bytes)."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise ValueError(
            f"{name} is binary, not text (a NUL byte at {nul:,}): give UTF-8 text, one text a "
            'line (.txt), JSON lines with a "text" field (.jsonl) or a folder of .txt files'
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{name} is not UTF-8 text (byte {err.start:,} cannot be decoded): save it as UTF-8"
        ) from err


def read_corpus(path: str | Path) -> Corpus:
    """The texts of a corpus: a .txt file (one text a line; blank lines ignored), a .jsonl file
    (a JSON string or an object with a "text" string per line) or a folder of .txt files (one
    text each, in name order). Refuses a missing, empty or binary file with a clear ValueError."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ValueError(f"no such corpus file or folder: {str(path)!r}")
    texts, sources, ignored = [], [], 0
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"the folder {str(path)!r} holds no .txt files")
        for file in files:
            text = _decoded(file.read_bytes(), str(file)).strip()
            if text:
                texts.append(text)
                sources.append(str(file.relative_to(path)))
            else:
                ignored += 1
    else:
        body = _decoded(path.read_bytes(), str(path))
        jsonl = path.suffix.lower() in (".jsonl", ".ndjson")
        for number, line in enumerate(body.splitlines(), 1):
            if not line.strip():
                ignored += 1
                continue
            text = _json_text(line, f"{path.name}:{number}") if jsonl else line.strip()
            if text.strip():
                texts.append(text)
                sources.append(f"{path.name}:{number}")
            else:
                ignored += 1
    if not texts:
        raise ValueError(f"{str(path)!r} holds no texts (empty, or only blank lines)")
    return Corpus(tuple(texts), tuple(sources), ignored)


def _json_text(line: str, where: str) -> str:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        raise ValueError(f"{where} is not JSON ({err.msg}): one JSON value a line") from err
    if isinstance(value, dict):
        value = value.get("text")
    if not isinstance(value, str):
        raise ValueError(f'{where}: each line must be a JSON string or hold a "text" string')
    return value


def score_batch(model, items: list[tuple[int, str]], max_tokens: int) -> dict:
    """What a worker does with one batch of (text id, text): each text traced alone (lean past
    the budget's full-trace size) and scored. A text over `max_tokens` tokens or the budget's
    characters is skipped and listed, never cut. Each text is tokenized once: its count and its
    trace's tokens come from one `prepare`. Returns {"sums": role_sums rows, "skipped":
    [(id, reason)], "tokens": {id: n}}."""
    from attnviz.engine.hooked import prepare, trace_batch
    from attnviz.engine.request import TraceRequest

    skipped, tokens, parts = [], {}, []
    most_chars = budget().max_text_chars
    for text_id, text in items:
        if len(text) > most_chars:
            skipped.append((text_id, f"{len(text):,} characters > {most_chars:,}"))
            continue
        try:
            prepared = prepare(model, TraceRequest(model.key, text, max_length=max_tokens))
            tokens[text_id] = n = prepared.n_input
            if n > prepared.limit:  # never trace a cut text
                # prepare counts what is left after validate's cheap cut of a long text (a few
                # words a token): a skipped text's listed length is its whole count
                tokens[text_id] = n = len(model.call_tokenizer(text, verbose=False)["input_ids"])
                skipped.append((text_id, f"{n:,} tokens > --max-tokens {max_tokens:,}"))
                continue
            trace = trace_batch(model, [prepared])[0]
        except ValueError as err:  # over the trace budget, a lone surrogate ...
            skipped.append((text_id, str(err)))
            continue
        parts.append(roles.role_sums([trace], text_ids=[text_id]))  # one trace held at a time
        del trace
    sums = pd.concat(parts, ignore_index=True) if parts else roles.role_sums([])
    return {"sums": sums, "skipped": skipped, "tokens": tokens}


@dataclass(frozen=True)
class Manifest:
    """What a run's folder holds: a rerun must match it to add to it."""

    model: str
    max_tokens: int
    batch: int
    n_texts: int
    texts_sha256: str
    format: int = FORMAT
    settings: str = ""  # another job's settings (patch_pairs: "patch over=heads"); the atlas's: ""

    @property
    def n_parts(self) -> int:
        return -(-self.n_texts // self.batch)

    def part_ids(self, k: int) -> range:
        return range(k * self.batch, min(self.n_texts, (k + 1) * self.batch))


@dataclass
class Store:
    """A run's folder: the manifest, the parts written atomically, the merged atlas."""

    out: Path
    manifest: Manifest
    skipped: dict[int, str] = field(default_factory=dict)
    tokens: dict[int, int] = field(default_factory=dict)

    @classmethod
    def open(cls, out: str | Path, manifest: Manifest) -> Store:
        """The folder, created or checked against `manifest` (another run's is refused)."""
        out = Path(out).expanduser()
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {str(out)!r} is a file: give a folder")
        (out / "parts").mkdir(parents=True, exist_ok=True)
        path = out / "manifest.json"
        if path.exists():
            try:
                found = Manifest(**json.loads(path.read_text()))
            except (ValueError, TypeError) as err:
                raise ValueError(f"{str(path)!r} is not an attnviz run's manifest") from err
            if found != manifest:
                diff = [k for k, v in asdict(manifest).items() if asdict(found)[k] != v]
                raise ValueError(
                    f"{str(out)!r} holds the parts of another run ({', '.join(diff)} differ: "
                    f"{', '.join(f'{k}={asdict(found)[k]!r}' for k in diff)}): give a new --out "
                    "folder, or delete this one"
                )
        else:
            _atomic(path, json.dumps(asdict(manifest), indent=1).encode())
        return cls(out, manifest)

    def part_path(self, k: int) -> Path:
        return self.out / "parts" / f"part-{k:05d}.parquet"

    def done(self) -> set[int]:
        """The parts already written whole (their metadata names the batch's texts)."""
        found = set()
        for k in range(self.manifest.n_parts):
            meta = _meta(self.part_path(k))
            if meta is not None and meta.get("texts") == list(self.manifest.part_ids(k)):
                found.add(k)
                self._remember(meta)
        return found

    def _remember(self, meta: dict) -> None:
        self.skipped.update({int(i): reason for i, reason in meta.get("skipped", [])})
        self.tokens.update({int(i): n for i, n in meta.get("tokens", {}).items()})

    def write_part(self, k: int, result: dict) -> None:
        meta = {"part": k, "texts": list(self.manifest.part_ids(k)),
                "skipped": result["skipped"], "tokens": result["tokens"]}  # fmt: skip
        _write(self.part_path(k), result["sums"], meta)
        self._remember(json.loads(json.dumps(meta)))

    def sums(self) -> pd.DataFrame:
        """Every part's rows, in text order (the same bytes from any order of writing)."""
        frames = [
            pq.read_table(self.part_path(k)).to_pandas() for k in range(self.manifest.n_parts)
        ]
        frames = [f for f in frames if len(f)]
        if not frames:
            return roles.role_sums([])
        return roles.sorted_sums(pd.concat(frames, ignore_index=True))

    def finish(self, corpus: Corpus) -> pd.DataFrame:
        """atlas.parquet and heads.csv from the parts; the merged atlas."""
        sums = self.sums()
        texts = [
            {"id": i, "source": corpus.sources[i], "tokens": self.tokens.get(i),
             "text": corpus.texts[i][:SNIPPET], "whole": len(corpus.texts[i]) <= SNIPPET}
            for i in range(len(corpus.texts)) if i not in self.skipped
        ]  # fmt: skip
        skipped = [[i, corpus.sources[i], r] for i, r in sorted(self.skipped.items())]
        meta = {"format": FORMAT, "model": self.manifest.model,
                "max_tokens": self.manifest.max_tokens, "n_texts": self.manifest.n_texts,
                "texts": texts, "skipped": skipped}  # fmt: skip
        _write(self.out / "atlas.parquet", sums, meta)
        frame = roles.merge_sums(sums)
        tmp = self.out / "heads.csv.tmp"
        frame.to_csv(tmp, index=False)
        os.replace(tmp, self.out / "heads.csv")
        return frame


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write(path: Path, frame: pd.DataFrame, meta: dict) -> None:
    """A Parquet file with `meta` as JSON in its schema metadata, whole or not at all."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           _META_KEY: json.dumps(meta).encode()})  # fmt: skip
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _meta(path: Path) -> dict | None:
    """A part's metadata, or None where the file is missing or unreadable."""
    try:
        raw = pq.read_schema(path).metadata or {}
        return json.loads(raw[_META_KEY])
    except (OSError, KeyError, ValueError, pa.ArrowException):
        return None


@dataclass(frozen=True)
class SavedAtlas:
    """An atlas.parquet read back: role_sums' rows and the run's metadata (model, texts,
    skipped)."""

    sums: pd.DataFrame
    meta: dict

    def text(self, text_id: int) -> dict | None:
        return next((t for t in self.meta.get("texts", []) if t.get("id") == text_id), None)


def open_atlas(source: bytes | str | Path, max_bytes: int | None = None) -> SavedAtlas:
    """An atlas.parquet (its bytes, an upload, or a path), checked before it is read: at most
    `max_bytes` (default: the budget's max_atlas_bytes), at most max_bytes / ROW_BYTES rows and
    8 x max_bytes unpacked, attnviz's columns and metadata. A ValueError says what is wrong."""
    most = budget().max_atlas_bytes if max_bytes is None else max_bytes
    n_bytes = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
    if n_bytes > most:
        raise ValueError(
            f"the atlas file is {size(n_bytes)}; this server opens at most {size(most)}"
        )
    if isinstance(source, bytes):
        source = pa.BufferReader(source)
    try:
        handle = pq.ParquetFile(source)
        rows, schema = handle.metadata.num_rows, handle.schema_arrow
        unpacked = sum(handle.metadata.row_group(g).total_byte_size
                       for g in range(handle.metadata.num_row_groups))  # fmt: skip
    except (OSError, pa.ArrowException) as err:
        raise ValueError(
            "this is not a Parquet file: open an atlas.parquet that attnviz wrote"
        ) from err
    missing = [c for c in roles.SUM_COLUMNS if c not in schema.names]
    raw = (schema.metadata or {}).get(_META_KEY)
    if missing or raw is None:
        raise ValueError("this Parquet file is not an attnviz corpus atlas (atlas.parquet)")
    if rows > most // ROW_BYTES or unpacked > 8 * most:
        raise ValueError(
            f"the atlas holds {rows:,} rows ({size(unpacked)} unpacked): too large here"
        )
    try:
        meta = json.loads(raw)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise ValueError("format")
    except ValueError as err:
        raise ValueError("the atlas's metadata is not attnviz's (format 1)") from err
    sums = handle.read(columns=list(roles.SUM_COLUMNS)).to_pandas()
    return SavedAtlas(sums, meta)


def atlas_folders() -> list[Path]:
    """The saved corpus atlases the page may list: */atlas.parquet under ATTNVIZ_ATLAS_DIR (none
    when it is unset; public mode lists none, attnviz.ui.atlas checks)."""
    root = os.environ.get(ATLAS_DIR_ENV, "").strip()
    if not root or not Path(root).is_dir():
        return []
    return sorted(p.parent for p in Path(root).glob("*/atlas.parquet") if p.is_file())
