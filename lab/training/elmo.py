"""Train the ELMo biLM (Peters et al. 2018, section 3; bilm-tf) on the Brown corpus.

    python -m lab.training.elmo --budget-minutes 35 --max-words 300000

The network is engine.families.elmo.modules.ElmoBiLm (char CNN, highway, projection, 2 LSTM
layers per direction with projection, cell/projection clipping, residual between the layers).
Forward and backward LMs share the char CNN and one softmax over a word vocabulary (inputs stay
character based), as in bilm-tf; the loss is the mean of the two directions' cross-entropies.
The export is AllenNLP's options.json + weights.hdf5 with the lm_softmax.safetensors + vocab.txt
companion that the engine reads for next/previous-word predictions.
"""
from __future__ import annotations

import argparse
import collections
import functools
import json
import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from engine.corpus import brown as corpus
from engine.families.elmo.chars import BOS_TOKEN, EOS_TOKEN, batch_char_ids
from engine.families.elmo.modules import CharCNN, ElmoBiLm
from engine.families.elmo.weights import Softmax, load_allennlp, load_softmax, save_allennlp
from engine.text import WORD_RE
from lab.training.bigram import KneserNeyBigram
from lab.training.loop import (RunConfig, count_parameters, model_device, plot_curves,
                               seed_everything, to_device, train, trainer_parser, run_settings)

UNK = "<UNK>"
IGNORE = -100
MAX_SENTENCE_WORDS = 60

# AllenNLP's small ELMo (2x1024_128_2048cnn_1xhighway) shrunk for a shared 2-core CPU: the char
# CNN keeps widths 1-5 of its filter bank (512 filters instead of 2048: widths 6 and 7 held 3/4
# of the filters and, with the 2048-wide highway, 3/4 of the step time) and the LSTM cells have
# 512 units instead of 1024; projection 128, clipping 3 and the residual connection are kept.
SMALL_ELMO = {
    "lstm": {"dim": 512, "projection_dim": 128, "n_layers": 2, "cell_clip": 3.0,
             "proj_clip": 3.0, "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": 16},
                 "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256]],
                 "n_highway": 1, "activation": "relu", "n_characters": 262,
                 "max_characters_per_token": 50},
}


class UniqueWordCharCNN(CharCNN):
    """The same char CNN (same parameters and names), run once per distinct word of a batch:
    a training speed-up only, the numbers are those of CharCNN."""

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        batch, steps, chars = char_ids.shape
        unique, inverse = torch.unique(char_ids.reshape(-1, chars), dim=0, return_inverse=True)
        emb = super().forward(unique[None])[0]                          # (U, P)
        return emb[inverse].reshape(batch, steps, -1)


def with_unique_word_cnn(bilm: ElmoBiLm) -> ElmoBiLm:
    """The biLM with its char CNN swapped for the training-time UniqueWordCharCNN (same weights)."""
    fast = UniqueWordCharCNN(bilm.options)
    fast.load_state_dict(bilm.char_cnn.state_dict())
    bilm.char_cnn = fast
    return bilm


def sentence_words(docs: list[list[str]]) -> list[list[str]]:
    """Engine words (engine.text) per sentence; long sentences split into pieces."""
    out = []
    for doc in docs:
        for s in doc:
            words = WORD_RE.findall(s)
            out.extend(words[i:i + MAX_SENTENCE_WORDS] for i in range(0, len(words), MAX_SENTENCE_WORDS))
    return [w for w in out if w]


def build_vocab(sentences: list[list[str]], min_count: int, max_size: int) -> list[str]:
    counts = collections.Counter(w for s in sentences for w in s)
    words = [w for w, n in counts.most_common(max_size) if n >= min_count]
    return [BOS_TOKEN, EOS_TOKEN, UNK, *words]


def run_vocab(run_dir: Path, build: Callable[[], list[str]]) -> list[str]:
    """The softmax vocabulary a run trains with, kept in its run folder: a resumed run must keep
    the rows its checkpoint learned (a rebuilt vocabulary can shift ranks, e.g. after a change
    to the word splitter, which would hand each row to another word)."""
    path = Path(run_dir) / "vocab.txt"
    if path.exists():
        return path.read_text(encoding="utf-8").split("\n")
    vocab = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(vocab), encoding="utf-8")
    return vocab


class Batches:
    """Sentences batched by similar length; the batch list of each epoch is seeded."""

    def __init__(self, sentences: list[list[str]], vocab: list[str], batch_size: int, seed: int):
        self.sentences, self.batch_size, self.seed = sentences, batch_size, seed
        self.index = {w: i for i, w in enumerate(vocab)}

    @functools.lru_cache(maxsize=2)
    def epoch(self, e: int) -> list[list[int]]:
        rng = np.random.default_rng(self.seed * 1000 + e)
        perm = rng.permutation(len(self.sentences))
        chunk = 50 * self.batch_size
        batches = []
        for i in range(0, len(perm), chunk):
            group = sorted(perm[i:i + chunk], key=lambda j: len(self.sentences[j]))
            batches += [group[k:k + self.batch_size] for k in range(0, len(group), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def tensors(self, sents: list[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        chars = torch.from_numpy(batch_char_ids(sents))
        targets = torch.full(chars.shape[:2], IGNORE, dtype=torch.long)
        for b, s in enumerate(sents):
            ids = [0, *(self.index.get(w, 2) for w in s), 1]
            targets[b, :len(ids)] = torch.tensor(ids)
        return chars, targets

    def batch(self, step: int):
        per_epoch = len(self.epoch(0))
        idx = self.epoch(step // per_epoch)[step % per_epoch]
        sents = [self.sentences[j] for j in idx]
        return self.tensors(sents), sum(len(s) for s in sents)


def lm_nll(bilm: ElmoBiLm, softmax: torch.nn.Linear, chars, targets) -> dict:
    """Summed forward and backward NLL (nats) and their prediction counts."""
    return lm_nll_of(*bilm.lm_outputs(chars), softmax, targets)


def lm_nll_of(fwd, bwd, mask, softmax: torch.nn.Linear, targets) -> dict:
    """lm_nll from the biLM's top states, for a caller that also needs them (distillation)."""
    P = fwd.shape[-1]
    f_ok = mask[:, :-1] & (targets[:, 1:] != IGNORE)       # forward at t predicts t+1
    b_ok = mask[:, 1:] & (targets[:, :-1] != IGNORE)       # backward at t predicts t-1
    f = torch.nn.functional.cross_entropy(softmax(fwd[:, :-1][f_ok].reshape(-1, P)),
                                          targets[:, 1:][f_ok], reduction="sum")
    b = torch.nn.functional.cross_entropy(softmax(bwd[:, 1:][b_ok].reshape(-1, P)),
                                          targets[:, :-1][b_ok], reduction="sum")
    return {"fwd": f, "bwd": b, "n_fwd": int(f_ok.sum()), "n_bwd": int(b_ok.sum())}


class BiLmWithSoftmax(torch.nn.Module):
    def __init__(self, bilm: ElmoBiLm, vocab_size: int):
        super().__init__()
        self.bilm = bilm
        self.softmax = torch.nn.Linear(bilm.options.proj_dim, vocab_size)

    def loss(self, batch) -> torch.Tensor:
        r = lm_nll(self.bilm, self.softmax, *batch)
        return 0.5 * (r["fwd"] / r["n_fwd"] + r["bwd"] / r["n_bwd"])


def build_model(vocab_size: int, seed: int, options: dict = SMALL_ELMO,
                dropout: float = 0.0) -> BiLmWithSoftmax:
    """dropout: on each LSTM layer's input while training (bilm-tf trained with 0.1)."""
    bilm = with_unique_word_cnn(ElmoBiLm.from_options(options, seed=seed, dropout=dropout))
    model = BiLmWithSoftmax(bilm, vocab_size)
    with torch.no_grad():
        for hw in bilm.char_cnn.highways:
            hw.carry.bias.fill_(-2.0)    # bilm-tf: carry bias -2, so the highway starts near identity
        torch.nn.init.normal_(model.softmax.weight, std=1 / math.sqrt(bilm.options.proj_dim))
        model.softmax.bias.zero_()
    return model


def evaluate(model: BiLmWithSoftmax, data: Batches, sentences: list[list[str]], bs: int = 64) -> dict:
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    tot = {"fwd": 0.0, "bwd": 0.0, "n_fwd": 0, "n_bwd": 0}
    for i in range(0, len(order), bs):
        batch = to_device(data.tensors([sentences[j] for j in order[i:i + bs]]), model_device(model))
        r = lm_nll(model.bilm, model.softmax, *batch)
        for k in tot:
            tot[k] += float(r[k])
    return {"loss": 0.5 * (tot["fwd"] / tot["n_fwd"] + tot["bwd"] / tot["n_bwd"]),
            "fwd_loss": tot["fwd"] / tot["n_fwd"], "bwd_loss": tot["bwd"] / tot["n_bwd"],
            "n_fwd": tot["n_fwd"], "n_bwd": tot["n_bwd"]}


def bigram_baseline(data: Batches, train_s, held_s) -> dict:
    """KN bigram in the LM's own units: word ids with <S>, </S>, <UNK>; forward and backward."""
    def ids(s):
        return [0, *(data.index.get(w, 2) for w in s), 1]
    V = len(data.index)
    fwd = KneserNeyBigram.fit((ids(s) for s in train_s), V)
    bwd = KneserNeyBigram.fit((ids(s)[::-1] for s in train_s), V)
    f, nf = fwd.nll(ids(s) for s in held_s)
    b, nb = bwd.nll(ids(s)[::-1] for s in held_s)
    return {"fwd_ppl": math.exp(f / nf), "bwd_ppl": math.exp(b / nb), "n": nf}


def load_export(folder: Path, build: Callable[..., BiLmWithSoftmax] = BiLmWithSoftmax,
                why: str = "its LM softmax is needed") -> tuple[BiLmWithSoftmax, list[str]]:
    """An exported ELMo (export() below, or any AllenNLP folder with the LM softmax companion) as
    a model to train or average: `build(bilm, vocab_size)` makes it, then the softmax rows are
    copied in; the vocabulary is the softmax's, so every row keeps its word."""
    bilm = with_unique_word_cnn(load_allennlp(folder, progress=False))
    softmax = load_softmax(folder)
    if softmax is None:
        raise SystemExit(f"{folder} has no LM softmax: {why}")
    model = build(bilm, len(softmax.vocab))
    with torch.no_grad():
        model.softmax.weight.copy_(softmax.weight)
        model.softmax.bias.copy_(softmax.bias)
    return model, list(softmax.vocab)


def export(model: BiLmWithSoftmax, vocab: list[str], out: Path) -> None:
    """AllenNLP layout; the training-only UniqueWordCharCNN is a CharCNN with the same names."""
    sm = Softmax(model.softmax.weight.detach(), model.softmax.bias.detach(), tuple(vocab))
    save_allennlp(model.bilm, out, softmax=sm)


def options_from_args(args) -> dict:
    """SMALL_ELMO, with --cell-size / --proj-dim / --filters overriding it (tests use tiny ones)."""
    o = json.loads(json.dumps(SMALL_ELMO))
    o["lstm"]["dim"] = args.cell_size or o["lstm"]["dim"]
    o["lstm"]["projection_dim"] = args.proj_dim or o["lstm"]["projection_dim"]
    if args.filters:
        o["char_cnn"]["filters"] = json.loads(args.filters)
    return o


def run(args) -> dict:
    seed_everything(args.seed)
    options = options_from_args(args)
    train_s = sentence_words(corpus.load_texts("train", args.corpus))
    held_s = sentence_words(corpus.load_texts("heldout", args.corpus))
    vocab = run_vocab(args.run_dir, lambda: build_vocab(train_s, args.min_count, args.vocab_size))
    data = Batches(train_s, vocab, args.batch_size, args.seed)
    model = build_model(len(vocab), args.seed, options, dropout=args.dropout)
    train_words = sum(map(len, train_s))
    cfg = RunConfig.from_args(args, train_words / len(data.epoch(0)), grad_clip=args.grad_clip)
    quick = held_s[: args.eval_sentences]
    state = train(model, lambda m, b: m.loss(b), data.batch,
                  lambda m: {k: v for k, v in evaluate(m, data, quick).items() if "loss" in k}, cfg)
    model.eval()
    with torch.no_grad():
        ev = evaluate(model, data, held_s)
    base = bigram_baseline(data, train_s, held_s)
    lstm = sum(p.numel() for n, p in model.named_parameters() if "_layers" in n)
    report = {
        "params": {**count_parameters(model, ("char_cnn", "softmax")), "lstm": lstm,
                   "char_cnn_highway_projection": sum(p.numel() for p in model.bilm.char_cnn.parameters()),
                   "softmax": sum(p.numel() for p in model.softmax.parameters())},
        "vocab_size": len(vocab), "words_seen": state.words, "steps": state.step,
        "wall_s": round(state.wall_s, 1), "epochs": state.words / train_words, "train_words": train_words,
        "heldout_sentences": len(held_s), "heldout_predictions_per_direction": ev["n_fwd"],
        "heldout_oov_rate": float(np.mean([w not in data.index for s in held_s for w in s])),
        "heldout_ppl_forward": math.exp(ev["fwd_loss"]), "heldout_ppl_backward": math.exp(ev["bwd_loss"]),
        "bigram_ppl_forward": base["fwd_ppl"], "bigram_ppl_backward": base["bwd_ppl"],
        "options": options, "config": run_settings(args),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    export(model, vocab, args.out)
    plot_curves(state.history, args.out / "learning_curve.png", "ELMo biLM (Brown): word loss",
                keys=("train_loss", "heldout_fwd_loss", "heldout_bwd_loss"))
    (args.out / "training_report.json").write_text(json.dumps({**report, "history": state.history}, indent=1))
    return report


def parser() -> argparse.ArgumentParser:
    ap = trainer_parser("Train the bundled ELMo biLM on the Brown corpus", "elmo-brown",
                        budget_minutes=35, max_words=300_000, batch_size=32, lr=2e-3,
                        eval_every=50)
    ap.add_argument("--vocab-size", type=int, default=12000)
    ap.add_argument("--min-count", type=int, default=3)
    ap.add_argument("--grad-clip", type=float, default=5.0)
    ap.add_argument("--eval-sentences", type=int, default=300)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="on each LSTM layer's input while training (bilm-tf used 0.1)")
    ap.add_argument("--cell-size", type=int, default=0, help="LSTM cells (default: SMALL_ELMO)")
    ap.add_argument("--proj-dim", type=int, default=0, help="projection (default: SMALL_ELMO)")
    ap.add_argument("--filters", default="", help='char CNN filters as JSON, e.g. "[[1,8],[2,8]]"')
    return ap


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in run(parser().parse_args()).items()
                      if k not in ("config", "options")}, indent=1))
