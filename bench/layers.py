"""Per-layer reproductions for one model: Ethayarajh 2019 geometry, WordNet sense probes and a
POS probe, from one pass of the model over the benchmark sentences.

Every model reads each Brown sentence as running text (the detokenised sentence, split into
engine words as the app and ELMo's training split it); the Brown tokens, which carry the POS
tags, are aligned to those words by character spans. Every accuracy and similarity comes with
a 95% percentile-bootstrap interval over its natural unit (engine.analysis.bootstrap): the
sentence for geometry and POS, the held-out lemma for word senses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from bench.corpus import TaggedSentence
from bench.findings import contrasts, difference
from engine.analysis.bootstrap import LEVEL, N_RESAMPLES, SEED, interval, ratio_replicates
from engine.analysis.bootstrap import resample_counts
from engine.analysis.geometry import layer_metrics
from bench.analysis.probes import (ScalarMix, SenseData, chance_accuracy, fit_threshold,
                                    first_sense_hits, learn_scalar_mix, linear_probe,
                                    nearest_centroid_hits, pair_cosines, sense_pairs)
from bench.analysis.wordnet import SenseExample
from engine.errors import EngineError
from engine.families.elmo.mix import layer_norm
from engine.result import Encoding
from engine.text import WordText, split_words

Encoder = Callable[[Sequence[WordText]], list[Encoding]]
CHUNK = 64
MIN_TAG_COUNT = 5  # rarer Brown tags are pooled into "other" (the probe cannot learn them)


@dataclass(frozen=True)
class Workload:
    heldout: tuple[TaggedSentence, ...]     # geometry and POS test (held-out documents)
    pos_train: tuple[TaggedSentence, ...]   # POS probe training (training documents)
    senses: tuple[SenseExample, ...]
    seed: int = 0


def sample_lemmas(examples: Sequence[SenseExample], n_lemmas: int | None,
                  seed: int = 0) -> tuple[SenseExample, ...]:
    """All examples of n_lemmas lemmas drawn at random, or of every lemma when n_lemmas is None
    (subsampling examples would break up the senses that need two examples each)."""
    lemmas = sorted({ex.lemma for ex in examples})
    if n_lemmas is not None and len(lemmas) > n_lemmas:
        keep = set(np.random.default_rng(seed).choice(lemmas, n_lemmas, replace=False).tolist())
        examples = [ex for ex in examples if ex.lemma in keep]
    return tuple(examples)


@dataclass(frozen=True)
class RunningText:
    """A Brown sentence as the models read it: `words`, the engine words of its detokenised
    text; `tokens`, the Brown tokens (which carry the tags) with their spans in the same text;
    `token_words[i]`, the engine words that Brown token i overlaps (usually one: "4:30" is
    three engine words, and the two Brown tokens of '?"' share one)."""

    words: WordText
    tokens: WordText
    token_words: tuple[tuple[int, ...], ...]


def running_text(sentence: TaggedSentence) -> RunningText:
    text = sentence.running_text
    spans, pos = [], 0
    for w in sentence.words:
        start = text.find(w, pos)
        if start < 0:
            raise ValueError(f"words: {w!r} is not in the detokenised text {text!r}")
        spans.append((start, start + len(w)))
        pos = start + len(w)
    words = split_words(text)
    starts = np.array([a for a, _ in words.spans])
    ends = np.array([b for _, b in words.spans])
    groups = tuple(tuple(np.nonzero((starts < e) & (ends > s))[0].tolist()) for s, e in spans)
    return RunningText(words, WordText(text, sentence.words, tuple(spans)), groups)


def geometry_tokens(text: RunningText) -> WordText:
    """The Brown tokens as the geometry statistics read them: a token whose engine words reach
    past its own span is blanked (dropped as a non-word), because its vector mixes in a
    neighbour's characters: "Mr." before a closing quote is the engine words 'Mr' and '."', so
    one surface form would get two context-free vectors (ELMo's char CNN would fail its
    self-similarity-of-1 check on that measurement artefact alone)."""
    spans = text.words.spans
    words = tuple(w if all(spans[j][0] >= a and spans[j][1] <= b for j in text.token_words[i])
                  else "" for i, (w, (a, b)) in enumerate(zip(text.tokens.words,
                                                               text.tokens.spans)))
    return WordText(text.tokens.text, words, text.tokens.spans)


def token_vectors(vectors: np.ndarray, text: RunningText) -> np.ndarray:
    """[layers, engine words, dim] -> [layers, Brown tokens, dim]: the mean of the engine words
    each token overlaps."""
    return np.stack([vectors[:, list(g)].mean(axis=1, dtype=np.float32)
                     for g in text.token_words], axis=1).astype(vectors.dtype)


def sentence_vectors(encode: Encoder, sentences: Sequence[TaggedSentence]):
    """(token vectors per kept sentence, their RunningTexts, the kept sentences)."""
    texts = [running_text(s) for s in sentences]
    vecs, texts, kept = _kept(word_vectors(encode, [t.words for t in texts]), texts, sentences)
    return [token_vectors(v, t) for v, t in zip(vecs, texts)], texts, kept


def uncertainty(values: dict[str, np.ndarray], replicates: dict[str, np.ndarray], unit: str,
                n_units: int) -> dict:
    """95% intervals per value (per layer, or one for a scalar) and, for per-layer values, the
    layer contrasts bench.findings judges; the same resamples for all of them."""
    ci, diffs = {}, {}
    for name, reps in replicates.items():
        ci[name] = interval(reps).T.tolist()
        if np.ndim(values[name]) == 1:
            diffs[name] = contrasts(values[name], reps)
    return {"ci": ci, "contrasts": diffs,
            "bootstrap": {"unit": unit, "n_units": n_units, "n_resamples": N_RESAMPLES,
                          "seed": SEED, "level": LEVEL}}


def word_vectors(encode: Encoder, texts: Sequence[WordText]) -> list[np.ndarray | None]:
    """[layers+1, words, dim] float16 per text, encoded in chunks so that the encodings'
    attention maps never pile up in memory. A text the model refuses (EngineError, e.g. a
    tokeniser that merges two words into one token) gives None; callers drop it."""
    out: list[np.ndarray | None] = []
    for start in range(0, len(texts), CHUNK):
        chunk = texts[start:start + CHUNK]
        try:
            encs: list[Encoding | None] = list(encode(chunk))
        except EngineError:
            encs = []
            for t in chunk:
                try:
                    encs.append(encode([t])[0])
                except EngineError:
                    encs.append(None)
        out += [None if e is None else e.word_vectors("mean").astype(np.float16) for e in encs]
    return out


def _kept(vectors: list, *parallel: Sequence) -> tuple:
    keep = [i for i, v in enumerate(vectors) if v is not None]
    return ([vectors[i] for i in keep],) + tuple([p[i] for i in keep] for p in parallel)


def _as_encodings(vectors: list[np.ndarray], texts: Sequence[WordText],
                  family: str) -> list[Encoding]:
    """One-token-per-word encodings of stored word vectors, for layer_metrics."""
    return [Encoding(model_id="bench", family=family, text=t.text, words=t.words,
                     tokens=t.words, token_to_word=np.arange(len(t.words)),
                     hidden_states=v.astype(np.float32)) for v, t in zip(vectors, texts)]


def geometry(vectors: list[np.ndarray], texts: Sequence[WordText], family: str) -> dict:
    # surface forms, not lowercased: ELMo's char CNN is case-sensitive, and its layer-0
    # invariant (self-similarity exactly 1) holds per surface form
    m = layer_metrics(_as_encodings(vectors, texts, family), lowercase=False,
                      n_resamples=N_RESAMPLES)
    adj = m.adjusted()
    values = {"anisotropy": m.anisotropy, "self_similarity": m.self_similarity,
              "intra_sentence": m.intra_sentence,
              "self_similarity_adjusted": adj.self_similarity,
              "intra_sentence_adjusted": adj.intra_sentence,
              "mev": m.mev, "mev_adjusted": adj.mev}
    reps = dict(m.replicates)
    for name in ("self_similarity", "intra_sentence"):     # minus the same resample's baseline
        reps[f"{name}_adjusted"] = reps[name] - reps["anisotropy"]
    reps["mev_adjusted"] = reps["mev"] - reps.pop("mev_baseline")   # the same resampled words
    return {**{k: v.tolist() for k, v in values.items()},
            "n_words_repeated": m.n_words_repeated, "n_sentences": len(texts),
            **uncertainty(values, reps, "sentence", len(texts))}


def _tag_matrix(vectors: list[np.ndarray], sents: Sequence[TaggedSentence]):
    x = np.concatenate(vectors, axis=1).astype(np.float32)      # [layers, words, dim]
    y = np.array([t for s in sents for t in s.tags])
    return x, y


def pos_probe(train_vecs, train_sents, test_vecs, test_sents) -> dict:
    x_tr, y_tr = _tag_matrix(train_vecs, train_sents)
    x_te, y_te = _tag_matrix(test_vecs, test_sents)
    tags, counts = np.unique(y_tr, return_counts=True)
    keep = set(tags[counts >= MIN_TAG_COUNT].tolist())
    y_tr = np.array([t if t in keep else "other" for t in y_tr])
    y_te = np.array([t if t in keep else "other" for t in y_te])
    scores = [linear_probe(x_tr[layer], y_tr, x_te[layer], y_te, max_iter=100)
              for layer in range(x_tr.shape[0])]
    # the bootstrap unit is the test sentence: correct words per sentence and layer
    lengths = np.array([len(s.tags) for s in test_sents])
    correct = np.stack([s.correct for s in scores], axis=1).astype(float)   # [words, layers]
    hits = np.zeros((len(lengths), correct.shape[1]))
    np.add.at(hits, np.repeat(np.arange(len(lengths)), lengths), correct)
    accuracy = np.array([s.accuracy for s in scores])
    counts = resample_counts(len(lengths))
    reps = ratio_replicates(hits, lengths, counts)
    # the majority-class baseline resampled over the same sentences, so it carries an interval
    # like the probes it is read against
    majority = np.unique(y_tr, return_counts=True)
    majority_tag = majority[0][int(np.argmax(majority[1]))]
    majority_hits = np.zeros(len(lengths))
    np.add.at(majority_hits, np.repeat(np.arange(len(lengths)), lengths), y_te == majority_tag)
    return {"accuracy": accuracy.tolist(),
            "majority_baseline": scores[0].majority_baseline,
            "n_train": scores[0].n_train, "n_test": scores[0].n_test,
            "n_tags": len(keep) + 1,
            **uncertainty({"accuracy": accuracy, "majority_baseline": scores[0].majority_baseline},
                          {"accuracy": reps,
                           "majority_baseline": ratio_replicates(majority_hits, lengths, counts)},
                          "sentence", len(lengths))}


def _sense_data(vectors: list[np.ndarray], examples: Sequence[SenseExample]) -> SenseData:
    target = np.stack([v[:, ex.word_index] for v, ex in zip(vectors, examples)], axis=1)
    sense_ids = {s: i for i, s in enumerate(sorted({ex.sense for ex in examples}))}
    lemma_ids = {s: i for i, s in enumerate(sorted({ex.lemma for ex in examples}))}
    return SenseData(target.astype(np.float32),
                     np.array([sense_ids[ex.sense] for ex in examples]),
                     np.array([lemma_ids[ex.lemma] for ex in examples]),
                     np.array([ex.sense_rank for ex in examples]))


def _layer_normed(data: SenseData) -> SenseData:
    """Every layer through ELMo's do_layer_norm (engine.families.elmo.mix), all examples taken
    as one batch: one mean and one variance per layer."""
    normed = np.stack([layer_norm(layer) for layer in data.vectors]).astype(np.float32)
    return SenseData(normed, data.senses, data.lemmas, data.ranks)


def sense_probes(data: SenseData, seed: int, mix_layer_norm: bool = False) -> dict:
    """Nearest-centroid (leave-one-out) and same/different-sense threshold accuracy per layer on
    held-out lemmas; the threshold and the scalar mix are fitted on the training lemmas, and the
    intervals resample the held-out lemmas (the fitted threshold and mix stay fixed).
    mix_layer_norm: the mixes (learned and uniform) read layer-normed layers."""
    rng = np.random.default_rng(seed)
    lemmas = np.unique(data.lemmas)
    train_lemmas = set(rng.choice(lemmas, size=len(lemmas) // 2, replace=False).tolist())
    is_train = np.array([lem in train_lemmas for lem in data.lemmas])
    train_rows, test_rows = np.nonzero(is_train)[0], np.nonzero(~is_train)[0]
    train, test = data.subset(train_rows), data.subset(test_rows)
    mix_data = _layer_normed(data) if mix_layer_norm else data
    mix_train, mix_test = mix_data.subset(train_rows), mix_data.subset(test_rows)
    p_tr, y_tr = sense_pairs(train.senses, train.lemmas, seed)
    p_te, y_te = sense_pairs(test.senses, test.lemmas, seed)
    units = np.unique(test.lemmas)
    pair_unit = np.searchsorted(units, test.lemmas[p_te[:, 0]])

    def hits(train_x: np.ndarray, test_x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(centroid hits, pair hits) per held-out lemma."""
        t = fit_threshold(pair_cosines(train_x, p_tr), y_tr)
        right = (pair_cosines(test_x, p_te) > t) == y_te
        return (nearest_centroid_hits(test_x, test.senses, test.lemmas)[0],
                np.bincount(pair_unit, weights=right, minlength=len(units)))

    n_layers = data.vectors.shape[0]
    per_layer = [hits(train.vectors[k], test.vectors[k]) for k in range(n_layers)]
    mix = learn_scalar_mix(mix_train.vectors, p_tr, y_tr)
    # the no-task default: ELMo's pretrained model has no mix, so 1/L each (reference-numbers)
    uni = ScalarMix(np.full(n_layers, 1.0 / n_layers))
    mixed = {name: hits(m.apply(mix_train.vectors), m.apply(mix_test.vectors))
             for name, m in (("mix", mix), ("uniform", uni))}
    first_hits, first_total = first_sense_hits(test.senses, test.lemmas, test.ranks)
    totals = {"centroid": nearest_centroid_hits(test.vectors[0], test.senses, test.lemmas)[1],
              "pairs": np.bincount(pair_unit, minlength=len(units)).astype(float)}
    unit_hits = {"centroid": np.stack([c for c, _ in per_layer], axis=1),
                 "pairs": np.stack([p for _, p in per_layer], axis=1),
                 "mix_centroid": mixed["mix"][0], "mix_pairs": mixed["mix"][1],
                 "uniform_centroid": mixed["uniform"][0], "uniform_pairs": mixed["uniform"][1]}
    counts = resample_counts(len(units))
    values, reps = {}, {}
    for name, h in unit_hits.items():
        total = totals["pairs" if name.endswith("pairs") else "centroid"]
        values[name] = h.sum(axis=0) / total.sum()
        reps[name] = ratio_replicates(h, total, counts)
    values["first_sense"] = first_hits.sum() / first_total.sum()
    reps["first_sense"] = ratio_replicates(first_hits, first_total, counts)
    out = {name: np.asarray(v).tolist() for name, v in values.items()}
    out.update(uncertainty(values, reps, "held-out lemma", len(units)))
    out["contrasts"]["centroid"]["top_minus_first_sense"] = difference(
        float(values["centroid"][-1] - values["first_sense"]),
        reps["centroid"][:, -1] - reps["first_sense"])
    out["centroid_other_half"] = _centroid_other_half(train)
    return {**out, "mix_weights": mix.weights.tolist(), "mix_layer_norm": mix_layer_norm,
            "chance": chance_accuracy(test.senses, test.lemmas),
            "n_lemmas_train": len(train_lemmas), "n_lemmas_test": len(units),
            "n_examples_test": int((~is_train).sum()), "n_pairs_train": len(y_tr),
            "n_pairs_test": len(y_te)}


def _centroid_other_half(train: SenseData) -> dict:
    """Nearest-centroid accuracy per layer on the lemmas that fit the threshold and the mix.
    The centroid needs no fitting, so these lemmas are as unseen by every model as the held-out
    ones: a second sample on which a choice made by the held-out lemmas (say, which candidate
    model ships) can be checked. Top − layer 0 with its 95% interval over these lemmas."""
    per_layer = [nearest_centroid_hits(layer, train.senses, train.lemmas)
                 for layer in train.vectors]
    hits = np.stack([h for h, _ in per_layer], axis=1)
    total = per_layer[0][1]          # examples scored per lemma: the same at every layer
    reps = ratio_replicates(hits, total, resample_counts(len(total)))
    values = hits.sum(axis=0) / total.sum()
    return {"centroid": values.tolist(), "ci": interval(reps).T.tolist(),
            "top_minus_l0": difference(float(values[-1] - values[0]), reps[:, -1] - reps[:, 0]),
            "n_lemmas": len(total)}


def run_model(model_id: str, family: str, layer_names: tuple[str, ...], encode: Encoder,
              work: Workload, log=print, mix_layer_norm: bool = False) -> dict:
    """Every per-layer reproduction for one model; a JSON-ready dict."""
    t0 = time.perf_counter()
    held, held_rt, heldout = sentence_vectors(encode, work.heldout)
    held_texts = [geometry_tokens(t) for t in held_rt]
    train, _, pos_train = sentence_vectors(encode, work.pos_train)
    sense_vecs, senses = _kept(word_vectors(encode, [split_words(ex.text) for ex in work.senses]),
                               work.senses)
    t_encode = time.perf_counter() - t0
    dropped = (len(work.heldout) - len(heldout) + len(work.pos_train) - len(pos_train)
               + len(work.senses) - len(senses))
    log(f"  {model_id}: encoded in {t_encode:.0f} s ({dropped} texts refused)")
    out = {"model": model_id, "family": family, "layer_names": list(layer_names),
           "n_layers": int(held[0].shape[0]), "texts_refused": dropped,
           "input": "running text (detokenised Brown sentences, engine words)"}
    kept = Workload(tuple(heldout), tuple(pos_train), tuple(senses), work.seed)
    with threadpool_limits(1):  # small numpy problems: threaded BLAS only spins (probes.py)
        _analyses(out, held, held_texts, train, sense_vecs, kept, mix_layer_norm)
    log(f"  {model_id}: analyses in {sum(out['seconds'].values()):.0f} s")
    out["seconds"]["encode"] = t_encode
    return out


def _analyses(out: dict, held, held_texts, train, sense_vecs, work: Workload,
              mix_layer_norm: bool) -> None:
    t = time.perf_counter()
    out["geometry"] = geometry(held, held_texts, out["family"])
    t_geo = time.perf_counter() - t
    t = time.perf_counter()
    out["pos"] = pos_probe(train, work.pos_train, held, work.heldout)
    t_pos = time.perf_counter() - t
    t = time.perf_counter()
    if work.senses:  # empty when WordNet is not installed
        out["senses"] = sense_probes(_sense_data(sense_vecs, work.senses), work.seed,
                                     mix_layer_norm)
    out["seconds"] = {"geometry": t_geo, "pos": t_pos, "senses": time.perf_counter() - t}
