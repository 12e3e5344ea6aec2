"""Train the models attnviz ships (attnviz/models/<name>/) from Debian's fortune texts.

    python scripts/make_models.py            # the shipped run: installs the texts if absent
    python scripts/make_models.py --steps 30 --out /tmp/x   # a short run (any folder)

Installs fortunes-zh and fortunes with apt-get when /usr/share/games/fortunes lacks them, reads
them (recording each file's size and sha256), trains the character-level decoder with a fixed
seed on the CPU, saves it as float16 safetensors with its tokenizer, and writes training.json and
MODEL_CARD.md next to the weights: corpus files, seed, steps, time, train and validation loss
(of the saved float16 weights, read back as float32) and the weights' sha256.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attnviz.training import chars, corpus, loop, save  # noqa: E402
from attnviz.training.model import TrainConfig, n_params  # noqa: E402

NAME = "char-zh-en"
# Two stages: stage 1 from a random start (warm-up, cosine), stage 2 goes on from its weights with
# a fresh optimizer, new data windows (seed 1), a lower peak rate and more sayings and English.
STAGES = (
    TrainConfig(),
    TrainConfig(
        seed=1,
        steps=200,
        lr=1.5e-3,
        warmup=10,
        mix=(("poems", 0.2), ("chinese", 0.4), ("english", 0.4)),
    ),
)
OUT = ROOT / "attnviz" / "models" / NAME
PACKAGES = ("fortunes-zh", "fortunes")
# The seed notes' example sentences (我爱水课, 狗咬人) show as characters, not [UNK], even where a
# character is rare in the text (课 occurs 3 times): its embedding is then barely trained.
ALWAYS = "我爱水课狗咬人猫"


def install_texts() -> None:
    if (corpus.FORTUNE_DIR / "tang300").is_file() and (corpus.FORTUNE_DIR / "cookie").is_file():
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print("installing", " ".join(PACKAGES), "with apt-get", flush=True)
    subprocess.run([*sudo, "apt-get", "update", "-q"], check=True)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-q", *PACKAGES], check=True)


def ids_of(texts: dict[str, str], ids: dict[str, int]) -> dict[str, torch.Tensor]:
    return {s: torch.tensor(chars.encode(t, ids), dtype=torch.long) for s, t in texts.items()}


def card(record: dict) -> str:
    c, v = record["config"], record["val_loss_saved"]
    stages = "; ".join(
        f"stage {st['stage']}: seed {st['config']['seed']}, {st['steps']} steps, peak rate "
        f"{st['config']['lr']}, mix {dict(st['config']['mix'])}, {st['train_seconds']:.0f} s"
        for st in record["stages"]
    )
    if record.get("stage_1_from"):
        stages = (
            "stage 1 (seed 0, 200 steps, peak rate 0.003) read from its saved folder; " + stages
        )
    files = "\n".join(
        f"| {f['path']} | {f['stream']} | {f['bytes']:,} | {f['records']} | `{f['sha256'][:16]}…` |"
        for f in record["corpus"]
    )
    return f"""# {NAME}: a character-level decoder trained by attnviz

A Llama-style decoder (RoPE, GQA, RMSNorm, SwiGLU): {c["n_layers"]} layers, {c["n_heads"]} query
heads, {c["n_kv_heads"]} key/value heads, d_model {c["d_model"]}, context {c["context"]} characters,
a vocabulary of {c["vocab_size"]} tokens ([PAD] [UNK] [BOS] [EOS] and the most frequent characters
of the training text), {record["parameters"]:,} parameters stored as float16.

Made by `make models` (`python scripts/make_models.py`) on {record["machine"]} with
{record["threads"]} torch thread(s), torch {record["torch"]}, in {stages}; windows of
{c["context"]} tokens, {c["batch"]} per step.

Validation loss (nats per character, the saved float16 weights, fixed held-out windows):
{", ".join(f"{k} {x:.4f}" for k, x in v.items())}; mean {record["val_loss_mean"]:.4f}.
Last training loss {record["train_loss_last"]:.4f}.

weights: `model.safetensors` sha256 `{record["weights_sha256"]}`

## Text (Debian packages; every {record["val_every"]}th record of a file held out for validation)
fortunes-zh (唐诗三百首, 宋词, Chinese sayings): GPL-3.0+, Copyright 2001-2009 Yu Guanghui,
2015-2019 Mo Zhou, 2020-2021 xiao sheng wen. fortunes (English): BSD-style licence of the
fortune-mod collection (see /usr/share/doc/fortunes/copyright). The weights are derived from
these texts.

| file | stream | bytes | records | sha256 |
|---|---|---|---|---|
{files}
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=None, help="override the shipped config's steps")
    p.add_argument("--out", type=Path, default=OUT, help=f"folder to write (default {OUT})")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: steadiest here)")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--stage-1",
        type=Path,
        default=None,
        help="a folder this script wrote after stage 1 (--stages 1): go on from its weights",
    )
    p.add_argument("--stages", type=int, default=len(STAGES), help="how many stages to run")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    stages = list(STAGES[: args.stages])
    if args.steps is not None:
        stages = [
            dataclasses.replace(c, steps=args.steps, eval_every=min(c.eval_every, args.steps))
            for c in stages
        ]
    cfg = stages[0]
    install_texts()
    t0 = time.perf_counter()
    texts = corpus.read()
    vocab = chars.vocabulary(texts.chars(), cfg.vocab_size, ALWAYS)
    ids = chars.encoder(vocab)
    streams = [s for s, _ in cfg.mix]
    train_ids = ids_of({s: texts.text("train", s) for s in streams}, ids)
    val_ids = ids_of({s: texts.text("val", s) for s in streams}, ids)
    sizes = {s: int(t.numel()) for s, t in train_ids.items()}
    print(f"corpus read in {time.perf_counter() - t0:.1f} s: train characters {sizes}", flush=True)

    def progress(step: int, loss: float) -> None:
        if step % 10 == 0 or step + 1 == cfg.steps:
            print(f"step {step:5d} loss {loss:.4f} {time.perf_counter() - t0:7.1f} s", flush=True)

    from transformers import LlamaForCausalLM

    runs, model = [], None
    for i, stage in enumerate(stages):
        if i == 0 and args.stage_1 is not None:
            # What stage 1 wrote: float16 weights, read back as float32.
            model = LlamaForCausalLM.from_pretrained(str(args.stage_1), dtype=torch.float32)
            print(f"stage 1 from {args.stage_1}", flush=True)
            continue
        cfg = stage
        run = loop.train(stage, train_ids, val_ids, args.device, progress, init=model)
        for step, v in run.val_loss:
            print(f"stage {i + 1} val at {step}: {v}", flush=True)
        runs.append((i + 1, run))
        # Between stages the weights are rounded to float16, as stage 1's folder stores them, so
        # going on from a saved stage-1 folder gives the same weights as one run of every stage.
        model = run.model.to(torch.float16).to(torch.float32)
    run = runs[-1][1]
    tmp = args.out.with_name(args.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    weights = save.save(run.model.cpu(), vocab, tmp)
    # The loss of what ships: the float16 weights read back as float32 on the same windows.
    shipped = LlamaForCausalLM.from_pretrained(str(tmp), dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(loop.VAL_SEED)
    val_batches = {s: loop.windows(val_ids[s], cfg.eval_windows, cfg.context, gen) for s in streams}
    val_saved = loop.evaluate(shipped, val_batches)
    record = {
        "name": NAME,
        "config": cfg.record(),
        "stages": [
            {
                "stage": i,
                "config": r.config.record(),
                "steps": r.steps_done,
                "train_seconds": round(r.seconds, 1),
                "train_loss": r.train_loss,
                "val_loss": r.val_loss,
            }
            for i, r in runs
        ],
        "stage_1_from": None if args.stage_1 is None else str(args.stage_1),
        "parameters": n_params(run.model),
        "steps": run.steps_done,
        "train_seconds": round(run.seconds, 1),
        "total_seconds": round(time.perf_counter() - t0, 1),
        "threads": args.threads,
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {args.device}",
        "torch": torch.__version__,
        "corpus": [dataclasses.asdict(f) for f in texts.files],
        "val_every": 20,
        "always_in_vocabulary": ALWAYS,
        "train_characters": sizes,
        "train_loss_last": run.train_loss[-1][1],
        "val_loss_saved": val_saved,
        "val_loss_mean": round(sum(val_saved.values()) / len(val_saved), 5),
        "weights_sha256": save.sha256(weights),
        "command": "python scripts/make_models.py " + " ".join(argv or sys.argv[1:]),
    }
    save.write_record(tmp, record)
    (tmp / "MODEL_CARD.md").write_text(card(record), encoding="utf-8")
    shutil.rmtree(args.out, ignore_errors=True)
    tmp.rename(args.out)
    print(f"wrote {args.out} in {record['total_seconds']} s; val {val_saved}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
