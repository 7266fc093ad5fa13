"""Soft labels for minilm-l6-mlm from a real language model: SmolLM2's next-word distributions.

    python -m lab.training.mlm_teacher --threads 1        # ~1 h for Brown's training split
    python -m lab.training.mlm_teacher --mode prompt --out training_runs/teacher-prompt

Brown is 1M words: too little for an MLM head to learn everyday word knowledge from hard labels
(the shipped head puts "key" 14th in "He locked the door with a [MASK] ."). SmolLM2-135M read
trillions of tokens, and its next-word guess from the left context alone is a strong prior over
the missing word. One causal pass per sentence yields that guess at EVERY word, so the whole
training split costs one forward pass per sentence, where a two-sided fill-in costs a hundred.

For every word of every training sentence that is one WordPiece in bert-base-uncased's
vocabulary and one token in SmolLM2's (with its leading space, or without it after no space),
the teacher's distribution is mapped onto bert-base WordPieces (" The" and " the" both feed
"the"; a WordPiece with no single-token spelling gets nothing) and its top-k is kept. Labels are
written in shards as they are made, so a stopped run resumes where it was.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.corpus import brown as corpus

TEACHER_ID = "smollm2-135m"
STUDENT_ID = "minilm-l6"        # the encoder whose WordPieces the labels are in (mlm_head.py)
TOP_K = 16
SHARD_SENTENCES = 2048


@dataclass(frozen=True)
class VocabMap:
    """Pairs (teacher token, student WordPiece): the teacher tokens that spell a WordPiece."""
    spaced_teacher: torch.Tensor     # teacher ids of " word" / " Word"
    spaced_student: torch.Tensor
    bare_teacher: torch.Tensor       # teacher ids of "word" / "Word" (no space before)
    bare_student: torch.Tensor

    def student_of(self, spaced: bool) -> dict[int, int]:
        t, s = ((self.spaced_teacher, self.spaced_student) if spaced
                else (self.bare_teacher, self.bare_student))
        return dict(zip(t.tolist(), s.tolist()))


def vocab_map(student_tok, teacher_tok, first_regular: int) -> VocabMap:
    pairs = {True: ([], []), False: ([], [])}
    for piece, sid in student_tok.get_vocab().items():
        if sid < first_regular or piece.startswith("##"):
            continue
        for spaced in (True, False):
            seen = set()
            for form in {piece, piece.capitalize()}:
                ids = teacher_tok((" " if spaced else "") + form, add_special_tokens=False)["input_ids"]
                if len(ids) == 1 and ids[0] not in seen:
                    seen.add(ids[0])
                    pairs[spaced][0].append(ids[0])
                    pairs[spaced][1].append(sid)
    as_t = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return VocabMap(as_t(pairs[True][0]), as_t(pairs[True][1]),
                    as_t(pairs[False][0]), as_t(pairs[False][1]))


def align(text: str, student_tok, teacher_tok, vm_spaced: dict, vm_bare: dict, start_id: int | None):
    """Student piece index -> teacher position whose next-token guess is that piece, for the
    pieces that are whole words both tokenizers spell as one token (and the teacher's own token
    there is a spelling of the student's piece). Returns (teacher ids, [(piece, teacher pos)])."""
    s = student_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    t = teacher_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    t_ids = ([start_id] if start_id is not None else []) + t["input_ids"]
    shift = 1 if start_id is not None else 0
    starts: dict[int, int] = {}
    for k, (a, b) in enumerate(t["offset_mapping"]):
        starts.setdefault(a, k + shift)
        if a < len(text) and text[a] == " ":      # byte-level BPE: the space opens the token
            starts.setdefault(a + 1, k + shift)
    pieces = student_tok.convert_ids_to_tokens(s["input_ids"])
    out = []
    for j, (sid, (a, _)) in enumerate(zip(s["input_ids"], s["offset_mapping"])):
        if pieces[j].startswith("##") or (j + 1 < len(pieces) and pieces[j + 1].startswith("##")):
            continue
        k = starts.get(a)
        if k is None or k <= shift:   # a guess from the start token alone is no guess (SmolLM2
            continue                  # Instruct's first word is "-" 40% of the time)
        spaced = a > 0 and text[a - 1] == " "
        if (vm_spaced if spaced else vm_bare).get(t_ids[k]) != sid:
            continue
        out.append((j, k - 1, spaced))
    return t_ids, out, len(s["input_ids"])


def _label_arrays(rows_sent, rows_piece, rows_ids, rows_p):
    """The label arrays a shard stores: (sentence, piece, top-k ids, top-k probs)."""
    if not rows_ids:
        empty = np.zeros((0, TOP_K))
        return (np.zeros(0, np.int32), np.zeros(0, np.int16), empty.astype(np.int32),
                empty.astype(np.float16))
    return (np.asarray(rows_sent, np.int32), np.asarray(rows_piece, np.int16),
            np.concatenate(rows_ids), np.concatenate(rows_p))


def label_sentences(model, teacher_tok, student_tok, vm: VocabMap, sentences: list[str],
                    start_id: int | None, n_student: int, batch_size: int = 32):
    """Top-k teacher distributions over student WordPieces for a list of sentences. Returns, per
    labelled word: (sentence index, student piece index, top-k ids, top-k probs)."""
    sp, bp = vm.student_of(True), vm.student_of(False)
    aligned = [align(s, student_tok, teacher_tok, sp, bp, start_id) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: len(aligned[i][0]))
    rows_sent, rows_piece, rows_ids, rows_p = [], [], [], []
    for b in range(0, len(order), batch_size):
        idx = [i for i in order[b:b + batch_size] if aligned[i][1]]
        if not idx:
            continue
        L = max(len(aligned[i][0]) for i in idx)
        ids = torch.full((len(idx), L), teacher_tok.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(idx), L), dtype=torch.long)
        for r, i in enumerate(idx):
            n = len(aligned[i][0])
            ids[r, :n] = torch.tensor(aligned[i][0])
            mask[r, :n] = 1
        with torch.no_grad():
            h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            rr = torch.tensor([r for r, i in enumerate(idx) for _ in aligned[i][1]])
            kk = torch.tensor([k for i in idx for (_, k, _) in aligned[i][1]])
            spaced = torch.tensor([sp_ for i in idx for (_, _, sp_) in aligned[i][1]])
            probs = torch.softmax(model.lm_head(h[rr, kk]).float(), dim=-1)
            out = torch.zeros((len(rr), n_student))
            for flag, (tt, ss) in ((True, (vm.spaced_teacher, vm.spaced_student)),
                                   (False, (vm.bare_teacher, vm.bare_student))):
                sel = spaced == flag
                if sel.any():
                    out[sel] = out[sel].index_add_(1, ss, probs[sel][:, tt])
            p, top = out.topk(TOP_K, dim=-1)
        for r, i in enumerate(idx):
            for j, _, _ in aligned[i][1]:
                rows_sent.append(i)
                rows_piece.append(j)
        rows_ids.append(top.to(torch.int32).numpy())
        rows_p.append(p.half().numpy())
    return _label_arrays(rows_sent, rows_piece, rows_ids, rows_p)


# The two-sided teacher: SmolLM2 reads the whole sentence with the word blanked out in the
# engine's own fill-in-the-blank prompt (engine/families/gpt/fill.py) and names the word after
# "Answer:". Its guess there alone puts the answer in its top 5 on 59.7% of the everyday cloze
# items, its left-context guess 67.1% (as the engine ranks it); the product
# log p(left) + PROMPT_WEIGHT x log p(prompt) reaches 69.8% with the right side's evidence in it,
# which is what a masked LM sees and a left-to-right label (mode "left") cannot give.
PROMPT_WEIGHT = 2.0


def prompt_sentence(text: str, a: int, b: int) -> tuple[str, int]:
    """The fill prompt for text[a:b] blanked out, and the character where the blank sits."""
    from engine.families.gpt.fill import FILL_BLANK, FILL_PROMPT

    head, _ = FILL_PROMPT.split("{sentence}")
    sentence = text[:a] + FILL_BLANK + text[b:]
    return FILL_PROMPT.format(sentence=sentence), len(head) + a


def pick_word(aligned: list, sentence_index: int, seed: int, pieces: list[str]):
    """One labellable whole word of a sentence (letters only), chosen by a pure function of the
    seed and the sentence's index so that a resumed run picks the same word."""
    options = [x for x in aligned if pieces[x[0]].isalpha()]
    if not options:
        return None
    return options[np.random.default_rng([seed, sentence_index]).integers(len(options))]


def label_prompted(model, teacher_tok, student_tok, vm: VocabMap, sentences: list[str],
                   first_index: int, start_id: int | None, n_student: int, seed: int,
                   batch_size: int = 16):
    """One two-sided soft label per sentence (module note above), same arrays as
    label_sentences."""
    sp, bp = vm.student_of(True), vm.student_of(False)
    jobs = []            # (sentence index, student piece, prompt ids, left position)
    for i, text in enumerate(sentences):
        _, aligned, _ = align(text, student_tok, teacher_tok, sp, bp, start_id)
        s = student_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        pieces = student_tok.convert_ids_to_tokens(s["input_ids"])
        got = pick_word(aligned, first_index + i, seed, pieces)
        if got is None:
            continue
        j = got[0]
        a, b = s["offset_mapping"][j]
        prompt, blank_at = prompt_sentence(text, a, b)
        enc = teacher_tok(prompt, return_offsets_mapping=True)
        before = [k for k, (_, e) in enumerate(enc["offset_mapping"]) if e <= blank_at]
        jobs.append((i, j, enc["input_ids"], before[-1]))
    jobs.sort(key=lambda x: len(x[2]))
    rows_sent, rows_piece, rows_ids, rows_p = [], [], [], []
    pad = teacher_tok.pad_token_id or 0
    for lo in range(0, len(jobs), batch_size):
        batch = jobs[lo:lo + batch_size]
        L = max(len(x[2]) for x in batch)
        ids = torch.full((len(batch), L), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), L), dtype=torch.long)
        for r, (_, _, t, _) in enumerate(batch):
            ids[r, :len(t)] = torch.tensor(t)
            mask[r, :len(t)] = 1
        with torch.no_grad():
            h = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            rr = torch.arange(len(batch))
            last = torch.tensor([len(t) - 1 for _, _, t, _ in batch])
            left = torch.tensor([k for *_, k in batch])
            lp_prompt = torch.log_softmax(model.lm_head(h[rr, last]).float(), -1)
            lp_left = torch.log_softmax(model.lm_head(h[rr, left]).float(), -1)
            probs = torch.softmax(lp_left + PROMPT_WEIGHT * lp_prompt, -1)
            out = torch.zeros((len(batch), n_student))
            out.index_add_(1, vm.spaced_student, probs[:, vm.spaced_teacher])
            p, top = out.topk(TOP_K, dim=-1)
        rows_sent += [first_index + i for i, *_ in batch]
        rows_piece += [j for _, j, *_ in batch]
        rows_ids.append(top.to(torch.int32).numpy())
        rows_p.append(p.half().numpy())
    return _label_arrays(rows_sent, rows_piece, rows_ids, rows_p)


def training_sentences(corpus_dir: Path) -> list[str]:
    return [s for d in corpus.load_texts("train", corpus_dir) for s in d]


def text_sentences(folder: Path) -> list[str]:
    """The usage-example lines of an extra-text folder (lab/training/wordnet.py writes
    "word: definition" lines and example lines; only the examples read as everyday sentences)."""
    from lab.training.everyday import load_sentences

    return [s for s in load_sentences(folder) if ": " not in s]


def compare(labels: dict[str, np.ndarray], sentences: list[str], student_tok,
            student_id: str = "minilm-l6-mlm") -> dict:
    """Top-1 / top-5 of the teacher's label and of the student filling the same single [MASK]
    (through the engine, as a user asks), on the labelled words, with 95% Wilson intervals."""
    from bench.analysis.cloze import rate
    from engine.api import Engine
    from engine.text import MASK

    engine = Engine(cache_size=0)
    vocab = student_tok.convert_ids_to_tokens(list(range(len(student_tok))))
    t_rank, s_rank = [], []
    for n, (i, j) in enumerate(zip(labels["sentence"], labels["piece"])):
        text = sentences[int(i)]
        enc = student_tok(text, add_special_tokens=False, return_offsets_mapping=True)
        a, b = enc["offset_mapping"][int(j)]
        truth = text[a:b].lower()
        teacher = [vocab[k] for k in labels["ids"][n][:5]]
        pred = engine.predict_masked(student_id, text[:a] + MASK + text[b:], top_k=5)
        student = [c.token.lower() for c in pred.candidates]
        t_rank.append(teacher.index(truth) + 1 if truth in teacher else None)
        s_rank.append(student.index(truth) + 1 if truth in student else None)
    return {"words": len(t_rank),
            "teacher": {"top1": rate(t_rank, 1), "top5": rate(t_rank, 5)},
            "student": {"top1": rate(s_rank, 1), "top5": rate(s_rank, 5)}}


def load_labels(teacher_dir: Path) -> dict[str, np.ndarray]:
    """Every shard's labels with global sentence indices (the order of training_sentences)."""
    parts = [dict(np.load(f)) for f in sorted(teacher_dir.glob("shard-*.npz"))]
    if not parts:
        raise SystemExit(f"no teacher labels in {teacher_dir}; run python -m lab.training.mlm_teacher")
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from engine.api import Engine
    from lab.training.bert import installed_dir, specials_of

    student_tok = AutoTokenizer.from_pretrained(str(installed_dir(STUDENT_ID)),
                                                local_files_only=True)
    adapter = Engine().adapter(TEACHER_ID)
    model, teacher_tok = adapter.model.eval(), adapter.tokenizer
    start_id = adapter._start_id
    vm = vocab_map(student_tok, teacher_tok, specials_of(student_tok).first_regular)
    sentences = (text_sentences(args.text) if args.text else
                 training_sentences(args.corpus))[: args.max_sentences or None]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "meta.json").write_text(json.dumps({
        "teacher": TEACHER_ID, "mode": args.mode, "top_k": TOP_K, "sentences": len(sentences),
        "text": str(args.text or args.corpus),
        "spaced_pairs": len(vm.spaced_student), "bare_pairs": len(vm.bare_student)}, indent=1))
    t0, done = time.time(), 0
    for shard, lo in enumerate(range(0, len(sentences), SHARD_SENTENCES)):
        f = args.out / f"shard-{shard:04d}.npz"
        chunk = sentences[lo:lo + SHARD_SENTENCES]
        if not f.exists():
            if args.mode == "prompt":
                sent, piece, ids, p = label_prompted(model, teacher_tok, student_tok, vm, chunk,
                                                     lo, start_id, len(student_tok), args.seed)
            else:
                sent, piece, ids, p = label_sentences(model, teacher_tok, student_tok, vm,
                                                      chunk, start_id, len(student_tok))
                sent = sent + lo
            tmp = f.with_suffix(".tmp.npz")
            np.savez(tmp, sentence=sent, piece=piece, ids=ids, probs=p)
            tmp.rename(f)
        done += len(chunk)
        el = time.time() - t0
        print(f"teacher labels: {done}/{len(sentences)} sentences, {el / 60:.1f} min", flush=True)
    out = {"sentences": len(sentences), "minutes": round((time.time() - t0) / 60, 1)}
    if args.compare:
        out["compare"] = compare(load_labels(args.out), sentences, student_tok)
        (args.out / "compare.json").write_text(json.dumps(out["compare"], indent=1))
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=corpus.DATA / "corpus")
    ap.add_argument("--out", type=Path,
                    default=corpus.ROOT / "training_runs" / "minilm-l6-mlm-teacher")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-sentences", type=int, default=0)
    ap.add_argument("--mode", choices=("left", "prompt"), default="left",
                    help="left: the next-word guess at every word; prompt: one word a sentence, "
                         "guessed from both sides through the fill-in-the-blank prompt")
    ap.add_argument("--seed", type=int, default=0, help="which word a sentence gets (prompt)")
    ap.add_argument("--text", type=Path, default=None,
                    help="label the example lines of this extra-text folder (e.g. data/wordnet) "
                         "instead of Brown's training split")
    ap.add_argument("--compare", action="store_true",
                    help="then score the labels and minilm-l6-mlm on the labelled words")
    return ap


if __name__ == "__main__":
    print(json.dumps(run(parser().parse_args())))
