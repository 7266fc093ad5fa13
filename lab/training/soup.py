"""Average the weights of ELMo runs that continued one model: a "model soup" (Wortsman et al.
2022, "Model soups: averaging weights of multiple fine-tuned models improves accuracy without
increasing inference time").

    python -m lab.training.soup --start assets/models/elmo-brown \\
        --out training_runs/elmo-soup-out RUN_OUT [RUN_OUT ...] [--weights 1,1,...]

Why: six continuations of elmo-brown's distillation (lab/training/README.md) each moved its
top layer's sense geometry a little and each lost a little held-out perplexity to noise of its
own (bfloat16 on a GPU, fresh optimizer moments at a warm restart, a larger distillation weight).
Runs fine-tuned from one start stay in one basin of the loss, where the average of their weights
is a model in its own right that keeps what they share and cancels much of what each got from
its own noise; it costs no training and serves like any other ELMo.

Every input is an exported ELMo folder (options.json, weights.hdf5, LM softmax and vocabulary,
as the trainers write them); they must share options and vocabulary (the same start), and a
training_report.json beside each is read for the record. The output is the same layout with a
training_report.json holding the soup's held-out Brown perplexity (the trainers' split), each
ingredient's, and the start's when --start is given.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Sequence

import torch
from tqdm import tqdm

from engine.corpus import brown as corpus
from lab.training.elmo import (BiLmWithSoftmax, Batches, evaluate, export, load_export,
                               sentence_words)


def load(folder: Path) -> tuple[BiLmWithSoftmax, list[str]]:
    """An exported ELMo with its LM softmax and its vocabulary."""
    model, vocab = load_export(Path(folder), why="a soup averages whole language models")
    return model.eval(), vocab


def shares(weights: Sequence[float] | None, n: int) -> list[float]:
    """Each run's share of the average: the weights (default: equal) normalised to sum to 1."""
    weights = [1.0] * n if weights is None else [float(w) for w in weights]
    if len(weights) != n or not n:
        raise SystemExit("give one weight for each of one or more runs")
    if min(weights) < 0 or sum(weights) <= 0:
        raise SystemExit("soup weights must be non-negative and not all zero")
    return [w / sum(weights) for w in weights]


def average(folders: Sequence[Path], weights: Sequence[float] | None = None,
            progress: bool = True) -> tuple[BiLmWithSoftmax, list[str]]:
    """The weighted mean (weights normalised to sum to 1) of every floating-point parameter and
    buffer of the models in `folders`."""
    share = shares(weights, len(folders))
    soup, vocab, options, acc = None, None, None, None
    for folder, w in tqdm(list(zip(folders, share)), desc="soup: reading runs",
                          disable=not progress):
        model, v = load(folder)
        if soup is None:
            soup, vocab, options = model, v, model.bilm.options.to_dict()
            acc = {k: t.double() * w for k, t in model.state_dict().items()
                   if t.is_floating_point()}
            continue
        if v != vocab:
            raise SystemExit(f"{folder} has another vocabulary than {folders[0]}: "
                             "a soup needs runs from one start")
        if model.bilm.options.to_dict() != options:
            raise SystemExit(f"{folder} has other options than {folders[0]}")
        for k, t in model.state_dict().items():
            if k in acc:
                acc[k] += t.double() * w
    state = soup.state_dict()
    soup.load_state_dict({k: acc[k].to(state[k].dtype) if k in acc else state[k] for k in state})
    return soup.eval(), vocab


def heldout_ppl(model: BiLmWithSoftmax, vocab: list[str], corpus_dir: Path,
                batch_size: int = 64) -> tuple[float, float]:
    """Forward and backward perplexity on the trainers' held-out split."""
    held = sentence_words(corpus.load_texts("heldout", corpus_dir))
    with torch.no_grad():
        ev = evaluate(model, Batches(held, vocab, batch_size, 0), held)
    return math.exp(ev["fwd_loss"]), math.exp(ev["bwd_loss"])


def _report(folder: Path) -> dict:
    path = Path(folder) / "training_report.json"
    return json.loads(path.read_text()) if path.exists() else {}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    folders = [Path(f) for f in args.runs]
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    share = shares(weights, len(folders))
    model, vocab = average(folders, share)
    fwd, bwd = heldout_ppl(model, vocab, args.corpus)
    ingredients = []
    for folder, w in zip(folders, share):
        r = _report(folder)
        ingredients.append({"from": str(folder), "weight": w,
                            "words_seen": r.get("words_seen"),
                            "heldout_ppl_forward": r.get("heldout_ppl_forward"),
                            "heldout_ppl_backward": r.get("heldout_ppl_backward"),
                            "teacher": r.get("teacher"), "config": r.get("config"),
                            # where each run started, as its trainer measured it: runs from one
                            # start show the same held-out perplexity there
                            "init": r.get("init")})
    report = {"words_seen": 0, "wall_s": 0.0, "vocab_size": len(vocab),
              "heldout_ppl_forward": fwd, "heldout_ppl_backward": bwd,
              "soup": {"method": "uniform" if len(set(share)) == 1 else "weighted",
                       "ingredients": ingredients},
              "teacher": None}
    if args.start:
        start, start_vocab = load(args.start)
        if start_vocab != vocab:
            raise SystemExit(f"{args.start} has another vocabulary than the runs")
        s_fwd, s_bwd = heldout_ppl(start, start_vocab, args.corpus)
        report["init"] = {"from": str(args.start), "heldout_ppl_forward": s_fwd,
                          "heldout_ppl_backward": s_bwd}
    args.out.mkdir(parents=True, exist_ok=True)
    export(model, vocab, args.out)
    (args.out / "training_report.json").write_text(json.dumps(report, indent=1))
    print(f"soup of {len(folders)}: held-out perplexity {fwd:.1f} / {bwd:.1f}"
          + (f" (start {report['init']['heldout_ppl_forward']:.1f} / "
             f"{report['init']['heldout_ppl_backward']:.1f})" if args.start else "")
          + f" -> {args.out}")
    return report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m lab.training.soup",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="exported ELMo folders continued from one start")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--weights", default="", help="comma-separated, one per run (default: equal)")
    ap.add_argument("--start", type=Path, default=None,
                    help="the model the runs started from, for its held-out perplexity")
    ap.add_argument("--corpus", type=Path, default=corpus.DATA / "corpus")
    ap.add_argument("--threads", type=int, default=2)
    return ap


def main(argv: list[str] | None = None) -> int:
    run(parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
