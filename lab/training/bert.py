"""Train a small BERT masked LM (BertForMaskedLM from a config) on the Brown corpus.

    python -m lab.training.bert --budget-minutes 20 --max-words 1100000

Lower-cased WordPiece vocabulary trained on the training split with `tokenizers`. Documents are
one token stream cut into blocks of --seq-len - 2 WordPieces, each wrapped as [CLS] ... [SEP]
(RoBERTa's FULL-SENTENCES packing within documents; no next-sentence prediction). Masking is our
own `mask_tokens` (not DataCollatorForLanguageModeling) so that a batch is a pure function of the
seed and the step, which makes resumed runs identical: 15% of the tokens are chosen, of which
80% become [MASK], 10% a random token and 10% stay unchanged (Devlin et al. 2019, section 3.1).
"""
from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import BertWordPieceTokenizer
from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

from engine.corpus import brown as corpus
from lab.training.bigram import KneserNeyBigram
from lab.training.blocks import BlockStream, count_words, cut_blocks, sentence_chunks
from lab.training.export import fp16_check, write_safetensors_model
from lab.training.locality import annealed_bias, init_sinusoidal
from lab.training.loop import (RunConfig, add_transformer_args, count_parameters,
                               model_device, plot_curves, run_tokenizer, seed_everything,
                               train, trainer_parser, run_settings)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PAD, UNK, CLS, SEP, MASK_ID = range(5)
IGNORE = -100
MASK_PROB = 0.15   # Devlin et al.'s rate: the default in training and the rate of every evaluation


@dataclass(frozen=True)
class Specials:
    """Where a WordPiece vocabulary keeps its special tokens. Every id below `first_regular` is
    special or reserved (never chosen for prediction, never drawn as a random replacement)."""

    pad: int
    cls: int
    sep: int
    mask: int
    first_regular: int


# Our own Brown vocabulary puts the five specials first.
BROWN_SPECIALS = Specials(pad=PAD, cls=CLS, sep=SEP, mask=MASK_ID, first_regular=len(SPECIALS))


def train_tokenizer(train_txt: Path, vocab_size: int, max_len: int) -> PreTrainedTokenizerFast:
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train([str(train_txt)], vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
             show_progress=False)
    return with_bert_template(PreTrainedTokenizerFast(
        tokenizer_object=wp._tokenizer, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_len))


def with_bert_template(tok: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """The tokenizer with BERT's own post-processor: [CLS] A [SEP] (and B [SEP] for pairs).

    The trainer always wraps inputs itself (`wrap`, `pad_chunks`, `pseudo_perplexity`), but the
    engine tokenises with add_special_tokens=True and must get exactly the ids the model trained
    on; an empty template silently fed it text without [CLS]/[SEP]."""
    from tokenizers.processors import TemplateProcessing

    cls, sep = tok.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def installed_dir(model_id: str) -> Path:
    """The folder of an installed (bundled) registry model, e.g. a base to train on."""
    from engine.registry import load_registry, local_path

    entry = load_registry()[model_id]
    path = local_path(entry)
    if path is None or not path.exists():
        raise SystemExit(f"{model_id} is not installed ({entry.source}); run `make install`")
    return path


def specials_of(tok) -> Specials:
    # bert-base-uncased keeps [PAD] at 0, [unused*] at 1-998 with [UNK], [CLS], [SEP], [MASK]
    # among them; the first real token ("!") is 999
    regular = min(i for t, i in tok.get_vocab().items()
                  if i > max(tok.all_special_ids) and not re.fullmatch(r"\[unused\d+\]", t))
    return Specials(pad=tok.pad_token_id, cls=tok.cls_token_id, sep=tok.sep_token_id,
                    mask=tok.mask_token_id, first_regular=regular)


def mask_tokens(ids: torch.Tensor, seed: int, vocab_size: int, prob: float = MASK_PROB,
                specials: Specials = BROWN_SPECIALS, eligible: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) with BERT's 80/10/10 corruption; labels are IGNORE where not chosen.
    `eligible` (a bool per vocabulary id) limits the choice to those tokens."""
    g = torch.Generator().manual_seed(seed)
    special = ids < specials.first_regular
    chosen = (torch.rand(ids.shape, generator=g) < prob) & ~special
    if eligible is not None:
        chosen &= eligible[ids]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    r = torch.rand(ids.shape, generator=g)
    random_ids = torch.randint(specials.first_regular, vocab_size, ids.shape, generator=g)
    inputs = torch.where(chosen & (r < 0.8), torch.full_like(ids, specials.mask), ids)
    inputs = torch.where(chosen & (r >= 0.8) & (r < 0.9), random_ids, inputs)
    return inputs, labels


def wrap(blocks: torch.Tensor) -> torch.Tensor:
    n = len(blocks)
    return torch.cat([torch.full((n, 1), CLS), blocks, torch.full((n, 1), SEP)], dim=1)


def pad_chunks(chunks: list[list[int]], length: int,
               specials: Specials = BROWN_SPECIALS) -> torch.Tensor:
    """Each chunk wrapped as [CLS] ... [SEP] and padded with [PAD] to `length`."""
    out = torch.full((len(chunks), length), specials.pad)
    for i, c in enumerate(chunks):
        out[i, : len(c) + 2] = torch.tensor([specials.cls, *c, specials.sep])
    return out


def padded_attention(inputs: torch.Tensor, bias: torch.Tensor | None,
                     pad_id: int = PAD) -> torch.Tensor | None:
    """The additive attention mask for a batch: the locality bias (if any) plus a large negative
    number at [PAD] keys (only sentence-packed batches have padding)."""
    pad = inputs == pad_id
    if not bool(pad.any()):
        return bias
    keys = torch.zeros(pad.shape, dtype=torch.float32, device=inputs.device)
    keys = keys.masked_fill(pad, -1e9)[:, None, None, :]
    return keys if bias is None else bias + keys


def build_model(vocab_size: int, args) -> BertForMaskedLM:
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=args.dim, num_hidden_layers=args.layers,
                     num_attention_heads=args.heads, intermediate_size=4 * args.dim,
                     max_position_embeddings=args.seq_len, type_vocab_size=2,
                     hidden_dropout_prob=args.dropout,
                     attention_probs_dropout_prob=args.dropout, pad_token_id=PAD)
    model = BertForMaskedLM(cfg)
    if args.pos_init == "sinusoidal":
        init_sinusoidal(model.bert.embeddings.position_embeddings, cfg.initializer_range)
    return model


def masked_logits(model: BertForMaskedLM, inputs: torch.Tensor, sel: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """MLM-head logits at the selected positions only. The same numbers BertForMaskedLM computes
    there, without the vocabulary projection at the 85% of positions the loss ignores (that
    projection is about 40% of a training step's arithmetic at our sizes). `bias` is an additive
    (1, heads, T, T) attention bias, used only early in training (lab/training/locality.py)."""
    hidden = model.bert(input_ids=inputs, attention_mask=bias).last_hidden_state
    return model.cls(hidden[sel])


def mlm_eval(model, blocks: torch.Tensor, vocab_size: int, seed: int, batch_size: int = 32,
             specials: Specials = BROWN_SPECIALS) -> dict:
    """Masked-token loss and accuracy on held-out blocks with a fixed masking."""
    total, correct, n = 0.0, 0, 0
    device = model_device(model)
    for i in range(0, len(blocks), batch_size):
        inputs, labels = mask_tokens(blocks[i:i + batch_size], seed + i, vocab_size,
                                     specials=specials)
        inputs, labels = inputs.to(device), labels.to(device)
        sel = labels != IGNORE
        logits = masked_logits(model, inputs, sel, padded_attention(inputs, None, specials.pad))
        total += float(torch.nn.functional.cross_entropy(logits, labels[sel], reduction="sum"))
        correct += int((logits.argmax(-1) == labels[sel]).sum())
        n += int(sel.sum())
    return {"loss": total / n, "accuracy": correct / n}


def pseudo_perplexity(model, sentences: list[list[int]], batch_size: int = 64,
                      specials: Specials = BROWN_SPECIALS) -> dict:
    """Pseudo-log-likelihood (Salazar et al. 2020, section 2.3): mask each token in turn and
    score it given all the others. Returns total NLL, tokens and argmax hits."""
    total, n, correct = 0.0, 0, 0
    device = model_device(model)
    for ids in sentences:
        seq = torch.tensor([specials.cls, *ids, specials.sep], device=device)
        pos = torch.arange(1, len(seq) - 1, device=seq.device)
        for j in range(0, len(pos), batch_size):
            p = pos[j:j + batch_size]
            x = seq.repeat(len(p), 1)
            rows = torch.arange(len(p), device=seq.device)
            x[rows, p] = specials.mask
            logp = model(input_ids=x).logits[rows, p].float().log_softmax(-1)
            target = seq[p]
            total -= float(logp[rows, target].sum())
            correct += int((logp.argmax(-1) == target).sum())
            n += len(p)
    return {"nll": total, "tokens": n, "correct": correct}


def bigram_pseudo(kn: KneserNeyBigram, sentences: list[list[int]],
                  specials: Specials = BROWN_SPECIALS) -> dict:
    total, n, correct = 0.0, 0, 0
    for ids in sentences:
        seq = [specials.cls, *ids, specials.sep]
        t, k, c = kn.masked_nll(seq, range(1, len(seq) - 1),
                                excluded=range(specials.first_regular))
        total, n, correct = total + t, n + k, correct + c
    return {"nll": total, "tokens": n, "correct": correct}


def heldout_report(mlm: dict, pl: dict, kb: dict, sentences: int, words: int) -> dict:
    """The held-out numbers of a masked LM's report: MLM loss/accuracy, pseudo-perplexity per
    token and per word, and the two-sided bigram's in the same units."""
    return {"heldout_mlm_loss": mlm["loss"], "heldout_mlm_accuracy": mlm["accuracy"],
            "pppl_sentences": sentences, "pppl_tokens": pl["tokens"], "pppl_words": words,
            "pseudo_ppl_token": math.exp(pl["nll"] / pl["tokens"]),
            "pseudo_ppl_word": math.exp(pl["nll"] / words),
            "pseudo_accuracy": pl["correct"] / pl["tokens"],
            "bigram_pseudo_ppl_token": math.exp(kb["nll"] / kb["tokens"]),
            "bigram_pseudo_ppl_word": math.exp(kb["nll"] / words),
            "bigram_pseudo_accuracy": kb["correct"] / kb["tokens"]}


def run(args) -> dict:
    seed_everything(args.seed)
    train_docs, held_docs = corpus.load_texts("train", args.corpus), corpus.load_texts("heldout", args.corpus)
    tok = run_tokenizer(args.run_dir, lambda: train_tokenizer(
        args.corpus / "brown_train.txt", args.vocab_size, args.seq_len), PreTrainedTokenizerFast)
    V = len(tok)

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    train_ids = [i for d in train_docs for i in ids(" ".join(d))]
    held_ids = [i for d in held_docs for i in ids(" ".join(d))]
    train_words = count_words([s for d in train_docs for s in d])
    held_blocks = wrap(cut_blocks(held_ids, args.seq_len - 2))
    if args.packing == "sentences":
        chunks, chunk_words = sentence_chunks([[ids(s) for s in d] for d in train_docs],
                                              [[count_words([s]) for s in d] for d in train_docs],
                                              args.seq_len - 2, args.single_sentence_prob, args.seed)
        stream = BlockStream(pad_chunks(chunks, args.seq_len), float(chunk_words.mean()), args.seed,
                             chunk_words)
    else:
        blocks = wrap(cut_blocks(train_ids, args.seq_len - 2))
        stream = BlockStream(blocks, (args.seq_len - 2) * train_words / len(train_ids), args.seed)
    model = build_model(V, args)

    bias_at = annealed_bias(args.local_bias, args.local_bias_steps, args.heads, args.seq_len)

    def batch_at(step: int):
        b, words = stream.batch(step, args.batch_size)
        return (*mask_tokens(b, args.seed * 100_003 + step, V, args.mask_prob), bias_at(step)), words

    def loss_fn(m, batch):
        inputs, labels, bias = batch
        sel = labels != IGNORE
        logits = masked_logits(m, inputs, sel, padded_attention(inputs, bias))
        return torch.nn.functional.cross_entropy(logits, labels[sel])

    cfg = RunConfig.from_args(args, stream.words_per_block * args.batch_size)
    quick = held_blocks[: args.eval_blocks]
    state = train(model, loss_fn, batch_at, lambda m: mlm_eval(m, quick, V, args.seed), cfg)
    model.eval()
    rng = np.random.default_rng(args.seed)
    held_sents = [s for d in held_docs for s in d]
    picked = [held_sents[i] for i in sorted(rng.choice(len(held_sents), args.pppl_sentences, replace=False))]
    pppl_ids = [ids(s)[: args.seq_len - 2] for s in picked]
    pppl_words = count_words(picked)
    with torch.no_grad():
        mlm = mlm_eval(model, held_blocks, V, args.seed)
        pl = pseudo_perplexity(model, pppl_ids)
    kn = KneserNeyBigram.fit(([CLS, *ids(s), SEP] for d in train_docs for s in d), V)
    kb = bigram_pseudo(kn, pppl_ids)
    report = {
        "params": count_parameters(model, ("embeddings",)),
        "tokens_seen": round(state.words * len(train_ids) / train_words), "words_seen": state.words,
        "steps": state.step, "wall_s": round(state.wall_s, 1), "epochs": state.words / train_words,
        "train_words": train_words, "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
        **heldout_report(mlm, pl, kb, len(picked), pppl_words),
        "config": run_settings(args),
    }
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        report["fp16"] = fp16_check(model, lambda m: mlm_eval(m, held_blocks, V, args.seed)["loss"])
    with_bert_template(tok).save_pretrained(out)
    write_safetensors_model(model, out, fp16=True)
    plot_curves(state.history, out / "learning_curve.png", "BERT MLM (Brown): masked-token loss")
    (out / "training_report.json").write_text(json.dumps({**report, "history": state.history}, indent=1))
    return report


def parser() -> argparse.ArgumentParser:
    ap = trainer_parser("Train the bundled BERT masked LM on the Brown corpus", "bert-brown-mlm",
                        budget_minutes=20, max_words=1_100_000, batch_size=32, lr=1e-3,
                        eval_every=25)
    add_transformer_args(ap)
    ap.add_argument("--pppl-sentences", type=int, default=150)
    ap.add_argument("--packing", choices=["stream", "sentences"], default="stream",
                    help="stream: a document's tokens cut into full blocks; sentences: whole "
                         "sentences packed into padded blocks that end at a sentence end")
    ap.add_argument("--single-sentence-prob", type=float, default=0.1,
                    help="with --packing sentences, the share of blocks that hold one sentence")
    ap.add_argument("--mask-prob", type=float, default=MASK_PROB,
                    help="share of tokens chosen for prediction in training (80/10/10 as always); "
                         f"every evaluation masks {MASK_PROB * 100:g}%%")
    return ap


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in run(parser().parse_args()).items() if k != "config"}, indent=1))

