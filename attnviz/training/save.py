"""Writing a trained model as a folder load_model reads: safetensors (float16 by default, to keep
the repository small), config.json, the tokenizer, and a record of how it was made."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from attnviz.training import chars


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def save(model: torch.nn.Module, vocab: list[str], folder: Path, dtype=torch.float16) -> Path:
    """Write weights, config and tokenizer into `folder`; returns the safetensors file."""
    folder.mkdir(parents=True, exist_ok=True)
    model.to(dtype).save_pretrained(str(folder), safe_serialization=True)
    model.to(torch.float32)
    chars.save(vocab, folder, model.config.max_position_embeddings)
    return folder / "model.safetensors"


def write_record(folder: Path, record: dict) -> None:
    """training.json: corpus files, seed, steps, time, losses, the weights' sha256."""
    text = json.dumps(record, ensure_ascii=False, indent=1, sort_keys=True)
    (folder / "training.json").write_text(text + "\n", encoding="utf-8")
