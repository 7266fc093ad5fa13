"""Per-layer reproductions for one model: Ethayarajh 2019 geometry, WordNet sense probes and a
POS probe, from one pass of the model over the benchmark sentences."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from bench.corpus import TaggedSentence
from engine.analysis.geometry import layer_metrics
from engine.analysis.probes import (ScalarMix, SenseData, chance_accuracy, fit_threshold,
                                    first_sense_accuracy, learn_scalar_mix, linear_probe,
                                    nearest_centroid_accuracy,
                                    pair_cosines, sense_pairs, threshold_accuracy)
from engine.analysis.wordnet import SenseExample
from engine.families.base import EngineError
from engine.result import Encoding
from engine.text import WordText, from_words, split_words

Encoder = Callable[[Sequence[WordText]], list[Encoding]]
CHUNK = 64
MIN_TAG_COUNT = 5  # rarer Brown tags are pooled into "other" (the probe cannot learn them)


@dataclass(frozen=True)
class Workload:
    heldout: tuple[TaggedSentence, ...]     # geometry and POS test (held-out documents)
    pos_train: tuple[TaggedSentence, ...]   # POS probe training (training documents)
    senses: tuple[SenseExample, ...]
    seed: int = 0


def sample_lemmas(examples: Sequence[SenseExample], n_lemmas: int,
                  seed: int = 0) -> tuple[SenseExample, ...]:
    """All examples of n_lemmas lemmas drawn at random (subsampling examples would break up
    the senses that need two examples each)."""
    lemmas = sorted({ex.lemma for ex in examples})
    if len(lemmas) > n_lemmas:
        keep = set(np.random.default_rng(seed).choice(lemmas, n_lemmas, replace=False).tolist())
        examples = [ex for ex in examples if ex.lemma in keep]
    return tuple(examples)


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
    m = layer_metrics(_as_encodings(vectors, texts, family), lowercase=False)
    adj = m.adjusted()
    return {"anisotropy": m.anisotropy.tolist(), "self_similarity": m.self_similarity.tolist(),
            "intra_sentence": m.intra_sentence.tolist(), "mev": m.mev.tolist(),
            "self_similarity_adjusted": adj.self_similarity.tolist(),
            "intra_sentence_adjusted": adj.intra_sentence.tolist(),
            "mev_adjusted": adj.mev.tolist(),
            "n_words_repeated": m.n_words_repeated, "n_sentences": len(texts)}


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
    return {"accuracy": [s.accuracy for s in scores],
            "majority_baseline": scores[0].majority_baseline,
            "n_train": scores[0].n_train, "n_test": scores[0].n_test,
            "n_tags": len(keep) + 1}


def _sense_data(vectors: list[np.ndarray], examples: Sequence[SenseExample]) -> SenseData:
    target = np.stack([v[:, ex.word_index] for v, ex in zip(vectors, examples)], axis=1)
    sense_ids = {s: i for i, s in enumerate(sorted({ex.sense for ex in examples}))}
    lemma_ids = {s: i for i, s in enumerate(sorted({ex.lemma for ex in examples}))}
    return SenseData(target.astype(np.float32),
                     np.array([sense_ids[ex.sense] for ex in examples]),
                     np.array([lemma_ids[ex.lemma] for ex in examples]),
                     np.array([ex.sense_rank for ex in examples]))


def sense_probes(data: SenseData, seed: int) -> dict:
    """Nearest-centroid (leave-one-out) and same/different-sense threshold accuracy per layer on
    held-out lemmas; the threshold and the scalar mix are fitted on the training lemmas."""
    rng = np.random.default_rng(seed)
    lemmas = np.unique(data.lemmas)
    train_lemmas = set(rng.choice(lemmas, size=len(lemmas) // 2, replace=False).tolist())
    is_train = np.array([lem in train_lemmas for lem in data.lemmas])
    train, test = data.subset(np.nonzero(is_train)[0]), data.subset(np.nonzero(~is_train)[0])
    p_tr, y_tr = sense_pairs(train.senses, train.lemmas, seed)
    p_te, y_te = sense_pairs(test.senses, test.lemmas, seed)

    def scores(train_x: np.ndarray, test_x: np.ndarray) -> tuple[float, float]:
        t = fit_threshold(pair_cosines(train_x, p_tr), y_tr)
        return (nearest_centroid_accuracy(test_x, test.senses, test.lemmas),
                threshold_accuracy(pair_cosines(test_x, p_te), y_te, t))

    per_layer = [scores(train.vectors[k], test.vectors[k]) for k in range(data.vectors.shape[0])]
    mix = learn_scalar_mix(train.vectors, p_tr, y_tr)
    mixed = scores(mix.apply(train.vectors), mix.apply(test.vectors))
    # the no-task default: ELMo's pretrained model has no mix, so 1/L each (reference-numbers)
    uni = ScalarMix(np.full(data.vectors.shape[0], 1.0 / data.vectors.shape[0]))
    uniform_scores = scores(uni.apply(train.vectors), uni.apply(test.vectors))
    return {"centroid": [c for c, _ in per_layer], "pairs": [p for _, p in per_layer],
            "mix_weights": mix.weights.tolist(), "mix_centroid": mixed[0],
            "mix_pairs": mixed[1], "uniform_centroid": uniform_scores[0],
            "uniform_pairs": uniform_scores[1],
            "first_sense": first_sense_accuracy(test.senses, test.lemmas, test.ranks),
            "chance": chance_accuracy(test.senses, test.lemmas),
            "n_lemmas_train": len(train_lemmas), "n_lemmas_test": len(lemmas) - len(train_lemmas),
            "n_examples_test": int((~is_train).sum()), "n_pairs_train": len(y_tr),
            "n_pairs_test": len(y_te)}


def run_model(model_id: str, family: str, layer_names: tuple[str, ...], encode: Encoder,
              work: Workload, log=print) -> dict:
    """Every per-layer reproduction for one model; a JSON-ready dict."""
    t0 = time.perf_counter()
    held_texts = [from_words(s.words) for s in work.heldout]
    held, held_texts, heldout = _kept(word_vectors(encode, held_texts), held_texts, work.heldout)
    train, pos_train = _kept(word_vectors(encode, [from_words(s.words) for s in work.pos_train]),
                             work.pos_train)
    sense_vecs, senses = _kept(word_vectors(encode, [split_words(ex.text) for ex in work.senses]),
                               work.senses)
    t_encode = time.perf_counter() - t0
    dropped = (len(work.heldout) - len(heldout) + len(work.pos_train) - len(pos_train)
               + len(work.senses) - len(senses))
    log(f"  {model_id}: encoded in {t_encode:.0f} s ({dropped} texts refused)")
    out = {"model": model_id, "family": family, "layer_names": list(layer_names),
           "n_layers": int(held[0].shape[0]), "texts_refused": dropped}
    kept = Workload(tuple(heldout), tuple(pos_train), tuple(senses), work.seed)
    with threadpool_limits(1):  # small numpy problems: threaded BLAS only spins (probes.py)
        _analyses(out, held, held_texts, train, sense_vecs, kept)
    log(f"  {model_id}: analyses in {sum(out['seconds'].values()):.0f} s")
    out["seconds"]["encode"] = t_encode
    return out


def _analyses(out: dict, held, held_texts, train, sense_vecs, work: Workload) -> None:
    t = time.perf_counter()
    out["geometry"] = geometry(held, held_texts, out["family"])
    t_geo = time.perf_counter() - t
    t = time.perf_counter()
    out["pos"] = pos_probe(train, work.pos_train, held, work.heldout)
    t_pos = time.perf_counter() - t
    t = time.perf_counter()
    if work.senses:  # empty when WordNet is not installed
        out["senses"] = sense_probes(_sense_data(sense_vecs, work.senses), work.seed)
    out["seconds"] = {"geometry": t_geo, "pos": t_pos, "senses": time.perf_counter() - t}
