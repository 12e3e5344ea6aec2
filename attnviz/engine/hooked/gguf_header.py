"""What a GGUF file says about itself, read without trusting it and without dequantising.

A .gguf is untrusted input: every count and length in its header is checked against the bytes
that are really there before it is used, so a truncated, corrupt or hostile file is a ValueError
after reading at most MAX_HEADER_BYTES, never a crash or a long loop. The result is what the loader
weighs against the budget before any weight is dequantised: the architecture and the model size
once every tensor is float32.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
MAX_HEADER_BYTES = 256 * 2**20  # metadata + tensor table; a 262k vocabulary takes ~7 MB
MAX_KEYS = 4096
MAX_TENSORS = 1_000_000
MAX_DIMS = 4
KEPT_STRING = 4096  # longer string values are skipped, not kept (vocabularies, chat templates)
FLOAT = 4  # bytes per weight once converted (float32)
# GGUF value types: 0..12. Fixed-size ones: (struct format, bytes).
_SCALARS = {
    0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
    6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8),
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")
# llama.cpp's architecture name -> transformers' model_type, where they differ (transformers'
# GGUF loader does the same renaming).
MODEL_TYPES = {"gemma3": "gemma3_text", "qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe"}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: innermost dimension first
    kind: int  # GGML quantisation type
    offset: int  # from the start of the data section
    n_bytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    """A checked GGUF header: its metadata (scalars and short strings; arrays as their length) and
    tensor table, every tensor inside the file."""

    path: Path
    file_bytes: int
    version: int
    metadata: dict[str, object]
    tensors: tuple[TensorInfo, ...]
    data_start: int

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def model_type(self) -> str:
        """transformers' name for the architecture (gemma3 -> gemma3_text)."""
        return MODEL_TYPES.get(self.architecture, self.architecture)

    @property
    def n_elements(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def float32_bytes(self) -> int:
        """The weights once dequantised to float32 (a tied output layer counts once: a GGUF
        without output.weight stores it only as token_embd)."""
        return FLOAT * self.n_elements


class _Cursor:
    """Reads little-endian GGUF values from a buffer, refusing to read past `end`."""

    def __init__(self, buf: mmap.mmap | bytes, end: int, label: str) -> None:
        self.buf, self.pos, self.end, self.label = buf, 0, end, label

    def take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise ValueError(
                f"{self.label} is not a valid GGUF file: its {what} runs past the "
                f"{'end of the file' if self.end == len(self.buf) else 'header limit'} "
                f"(byte {self.pos:,} + {n:,}; truncated or corrupt)"
            )
        at = self.pos
        self.pos += n
        return at

    def scalar(self, kind: int, what: str) -> int | float | bool:
        fmt, n = _SCALARS[kind]
        return struct.unpack_from(fmt, self.buf, self.take(n, what))[0]

    def u32(self, what: str) -> int:
        return int(self.scalar(4, what))

    def u64(self, what: str) -> int:
        return int(self.scalar(10, what))

    def string(self, what: str, keep: bool = True) -> str | None:
        n = self.u64(f"{what}'s length")
        at = self.take(n, what)
        if not keep or n > KEPT_STRING:
            return None
        try:
            return bytes(self.buf[at : at + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.label}: the {what} is not UTF-8 text (corrupt file)") from None

    def skip_strings(self, count: int, key: str) -> None:
        """Step over `count` strings (a vocabulary: 262k of them), each inside the limit."""
        length, buf, end, pos = _LENGTH.unpack_from, self.buf, self.end, self.pos
        for _ in range(count):
            if pos + 8 > end or pos + 8 + length(buf, pos)[0] > end:
                self.pos = pos
                self.take(end - pos + 1, f"array {key!r}")  # past the end: raises
            pos += 8 + length(buf, pos)[0]
        self.pos = pos

    def value(self, kind: int, key: str, depth: int = 0) -> object:
        if kind in _SCALARS:
            return self.scalar(kind, f"value of {key!r}")
        if kind == _STRING:
            return self.string(f"value of {key!r}")
        if kind != _ARRAY or depth:
            raise ValueError(
                f"{self.label}: key {key!r} has an unknown value type {kind} (corrupt)"
            )
        inner, count = self.u32(f"type of {key!r}"), self.u64(f"length of {key!r}")
        if inner in _SCALARS:  # skipped in one step, its size checked
            self.take(count * _SCALARS[inner][1], f"array {key!r}")
        elif inner == _STRING:
            if count > self.end - self.pos:  # each string takes at least 8 bytes
                raise ValueError(f"{self.label}: array {key!r} claims {count:,} strings (corrupt)")
            self.skip_strings(count, key)
        else:
            raise ValueError(f"{self.label}: array {key!r} holds values of type {inner} (corrupt)")
        return count  # an array is kept as its length


def read_header(path: str | Path, label: str | None = None) -> GGUFHeader:
    """The checked header of a .gguf file (ValueError for anything that is not a whole, valid
    GGUF file: bad magic, version, counts or lengths; unknown tensor types; a tensor past the end
    of the file or overlapping another). Reads the header only, through a memory map."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # the block sizes of each type

    path = Path(path)
    label = label or path.name
    size = path.stat().st_size
    if size < 24:
        raise ValueError(f"{label} is not a GGUF file: {size} bytes")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != MAGIC:
            raise ValueError(f"{label} is not a GGUF file (it does not start with 'GGUF')")
        cur = _Cursor(buf, min(size, MAX_HEADER_BYTES), label)
        cur.take(4, "magic")
        version = cur.u32("version")
        if version not in (2, 3):
            raise ValueError(
                f"{label}: GGUF version {version} is not read here (versions 2 and 3, "
                "little-endian; a big-endian file shows a huge version)"
            )
        n_tensors, n_keys = cur.u64("tensor count"), cur.u64("key count")
        if n_keys > MAX_KEYS or n_tensors > MAX_TENSORS or n_tensors == 0:
            raise ValueError(f"{label}: {n_keys:,} keys and {n_tensors:,} tensors (corrupt file)")
        metadata: dict[str, object] = {}
        for _ in range(n_keys):
            key = cur.string("key name") or ""
            metadata[key] = cur.value(cur.u32(f"type of {key!r}"), key)
        infos = []
        for _ in range(n_tensors):
            name = cur.string("tensor name") or ""
            n_dims = cur.u32(f"dimensions of {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise ValueError(f"{label}: tensor {name!r} has {n_dims} dimensions (corrupt)")
            shape = tuple(cur.u64(f"shape of {name!r}") for _ in range(n_dims))
            kind, offset = cur.u32(f"type of {name!r}"), cur.u64(f"offset of {name!r}")
            infos.append((name, shape, kind, offset))
        header_end = cur.pos
    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or not 1 <= alignment <= 2**16:
        raise ValueError(f"{label}: general.alignment={alignment!r} (corrupt)")
    data_start = -(-header_end // alignment) * alignment
    known = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
    tensors, names = [], set()
    for name, shape, kind, offset in infos:
        if kind not in known:
            raise ValueError(f"{label}: tensor {name!r} has an unknown type {kind}")
        block, type_bytes = known[kind]
        n = 1
        for d in shape:
            if d < 1 or d > 2**40:
                raise ValueError(f"{label}: tensor {name!r} has shape {shape} (corrupt)")
            n *= d
        if shape[0] % block or n > 2**44 or name in names:
            raise ValueError(f"{label}: tensor {name!r} ({GGMLQuantizationType(kind).name}, "
                             f"shape {shape}) is not a valid tensor")  # fmt: skip
        names.add(name)
        tensors.append(TensorInfo(name, shape, kind, offset, n // block * type_bytes))
    end = 0
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.offset < end or t.offset % alignment:
            raise ValueError(f"{label}: tensor {t.name!r} overlaps another (corrupt file)")
        end = t.offset + t.n_bytes
    if data_start + end > size:
        raise ValueError(
            f"{label} is truncated: its tensors need {data_start + end:,} bytes, the file has "
            f"{size:,}"
        )
    return GGUFHeader(path, size, version, metadata, tuple(tensors), data_start)
