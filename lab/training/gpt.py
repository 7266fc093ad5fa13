"""Train a small GPT-2 (GPT2LMHeadModel from a config) on the Brown corpus.

    python -m lab.training.gpt --budget-minutes 20 --max-words 1100000

Byte-level BPE (Radford et al. 2019, section 2.2) trained on the training split with
`tokenizers`, wrapped as a transformers fast tokenizer. Documents are joined into one stream
separated by <|endoftext|> and cut into blocks of --seq-len tokens.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from tokenizers import ByteLevelBPETokenizer
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

from engine.corpus import brown as corpus
from lab.training.bigram import KneserNeyBigram
from lab.training.blocks import BlockStream, count_words, cut_blocks
from lab.training.export import fp16_check, write_safetensors_model
from lab.training.locality import annealed_bias, init_sinusoidal
from lab.training.loop import (RunConfig, add_transformer_args, count_parameters,
                               model_device, plot_curves, run_tokenizer, seed_everything,
                               train, trainer_parser, run_settings)

EOT = "<|endoftext|>"
ROOT = corpus.ROOT


def train_tokenizer(train_txt: Path, vocab_size: int, model_max_length: int = 128) -> GPT2TokenizerFast:
    bpe = ByteLevelBPETokenizer()
    bpe.train([str(train_txt)], vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
              show_progress=False)
    return GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOT, eos_token=EOT,
                             unk_token=EOT, model_max_length=model_max_length)


def doc_stream(tok, docs: list[list[str]]) -> list[int]:
    ids: list[int] = []
    for sents in docs:
        ids.extend(tok(" ".join(sents))["input_ids"])
        ids.append(tok.eos_token_id)
    return ids


def build_model(vocab_size: int, args) -> GPT2LMHeadModel:
    cfg = GPT2Config(vocab_size=vocab_size, n_positions=args.seq_len, n_embd=args.dim,
                     n_layer=args.layers, n_head=args.heads, bos_token_id=vocab_size - 1,
                     eos_token_id=vocab_size - 1, resid_pdrop=args.dropout, embd_pdrop=args.dropout,
                     attn_pdrop=args.dropout)
    model = GPT2LMHeadModel(cfg)
    if args.pos_init == "sinusoidal":
        init_sinusoidal(model.transformer.wpe, cfg.initializer_range)
    return model


def heldout_loss(model, blocks: torch.Tensor, batch_size: int = 32) -> tuple[float, int]:
    """Total NLL (nats) over held-out blocks, and the number of predicted tokens."""
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(blocks), batch_size):
            b = blocks[i:i + batch_size].to(model_device(model))
            out = model(input_ids=b, labels=b)
            k = b.numel() - len(b)
            total += float(out.loss) * k
            n += k
    return total, n


def run(args) -> dict:
    seed_everything(args.seed)
    train_docs, held_docs = corpus.load_texts("train", args.corpus), corpus.load_texts("heldout", args.corpus)
    tok = run_tokenizer(args.run_dir, lambda: train_tokenizer(
        args.corpus / "brown_train.txt", args.vocab_size, args.seq_len), GPT2TokenizerFast)
    train_ids, held_ids = doc_stream(tok, train_docs), doc_stream(tok, held_docs)
    train_words = count_words([s for d in train_docs for s in d])
    held_words = count_words([s for d in held_docs for s in d])
    blocks, held_blocks = cut_blocks(train_ids, args.seq_len), cut_blocks(held_ids, args.seq_len)
    stream = BlockStream(blocks, args.seq_len * train_words / len(train_ids), args.seed)
    model = build_model(len(tok), args)
    cfg = RunConfig.from_args(args, stream.words_per_block * args.batch_size)
    quick = held_blocks[: args.eval_blocks]
    bias_at = annealed_bias(args.local_bias, args.local_bias_steps, args.heads, args.seq_len,
                            causal=True)

    def batch_at(step: int):
        b, words = stream.batch(step, args.batch_size)
        return (b, bias_at(step)), words

    def loss_fn(m, batch):
        ids, bias = batch
        return m(input_ids=ids, attention_mask=bias, labels=ids).loss

    state = train(model, loss_fn, batch_at,
                  lambda m: {"loss": _mean(heldout_loss(m, quick))}, cfg)
    model.eval()
    nll, n_tok = heldout_loss(model, held_blocks)
    kn = KneserNeyBigram.fit([train_ids], len(tok))
    kn_nll, kn_n = kn.nll(held_blocks.tolist())
    # Words covered by the evaluated blocks: the held-out word count scaled by the share of
    # held-out tokens the blocks hold (the tail shorter than a block is dropped).
    words_eval = held_words * held_blocks.numel() / len(held_ids)
    report = {
        "params": count_parameters(model, ("wte", "wpe")),
        "tokens_seen": state.step * args.batch_size * args.seq_len, "words_seen": state.words,
        "steps": state.step, "wall_s": round(state.wall_s, 1), "epochs": state.words / train_words,
        "train_words": train_words, "train_tokens": len(train_ids),
        "heldout_words": held_words, "heldout_tokens": len(held_ids), "eval_tokens": n_tok,
        "heldout_ppl_token": math.exp(nll / n_tok), "heldout_ppl_word": math.exp(nll / words_eval),
        "bigram_ppl_token": math.exp(kn_nll / kn_n), "bigram_ppl_word": math.exp(kn_nll / words_eval),
        "config": run_settings(args),
    }
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    report["fp16"] = fp16_check(model, lambda m: math.exp(_mean(heldout_loss(m, held_blocks))))
    tok.save_pretrained(out)
    write_safetensors_model(model, out, fp16=True)
    plot_curves(state.history, out / "learning_curve.png", "GPT (Brown): next-token loss")
    (out / "training_report.json").write_text(json.dumps({**report, "history": state.history}, indent=1))
    return report


def _mean(pair: tuple[float, int]) -> float:
    return pair[0] / max(pair[1], 1)


def parser() -> argparse.ArgumentParser:
    ap = trainer_parser("Train the bundled GPT on the Brown corpus", "gpt-brown",
                        budget_minutes=20, max_words=1_100_000, batch_size=32, lr=1e-3,
                        eval_every=25)
    add_transformer_args(ap)
    return ap


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in run(parser().parse_args()).items() if k != "config"}, indent=1))
