"""Linear CKA between the layers of two models on the same words, with percentile bootstrap
intervals over sentences (Kornblith et al. 2019; engine.analysis.bootstrap).

Every model's words are the shared word split (engine.text), so row k of any model's
`Encoding.word_vectors` is the same word k and two models' layers compare word for word.

The estimate is debiased CKA (geometry.debiased_hsic). Plain CKA on a few dozen words of
hundreds of dimensions sits far above its population value, and a resample, which repeats
words, sits higher still: on the 'mouse' preset plain CKA's percentile interval lies wholly
above its own estimate in 9 of ELMo x MiniLM's 21 cells; debiased, in none.

A resample draws sentences with replacement: sentence s drawn c_s times gives each of its words
the weight w = c_s. Its words are centred on their weighted mean (the unbiased estimator is
shift-invariant only without weights), and copies of one word count as that word's diagonal (a
word is no evidence of shared structure with its own copy). With K the Gram matrix of the
centred words, K~ = K less its diagonal and W = Σ w,

    t1 = w'(K~∘L~)w,   t2 = Σ_n w_n (K~w)_n (L~w)_n,   t3 = (w'K~w)(w'L~w)

go into debiased_hsic with n = W; w = 1 gives the estimate itself. As w is constant within a
sentence, w'(K∘L)w = c'Mc with M = P'(K∘L)P summed over sentence blocks (P: words ->
sentences), so a resample costs sentence-sized products, not a pass over the words' vectors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.analysis.bootstrap import LEVEL, N_RESAMPLES, SEED, interval, resample_counts
from engine.analysis.geometry import cka_from_hsic, debiased_hsic
from engine.errors import EngineError
from engine.result import Encoding, Pooling

# float64 entries a block of Gram rows or of resamples may hold at once (2^24: 128 MiB)
_BLOCK_ENTRIES = 2 ** 24
# the Gram sums behind the intervals grow with the square of the words: 4,500 words of ELMo
# (3 x 1024) against a 13 x 768 BERT take about two minutes on two busy cores
MAX_WORDS = 5000
# entries of the per-sentence sums P'(K∘L)P, one S x S matrix per pair of layers (512 MiB)
_MAX_PAIR_SUMS = 2 ** 26


@dataclass(frozen=True, eq=False)
class ModelCKA:
    """Debiased linear CKA between every layer of model A (rows) and of model B (columns), each
    with a percentile bootstrap interval over sentences; layer 0 is each model's embedding
    layer."""

    cka: np.ndarray                # [La, Lb]
    low: np.ndarray                # [La, Lb], the interval's lower end
    high: np.ndarray               # [La, Lb], its upper end
    model_a: str
    model_b: str
    layer_names_a: tuple[str, ...]
    layer_names_b: tuple[str, ...]
    n_words: int
    n_sentences: int
    n_resamples: int
    level: float = LEVEL

    def __post_init__(self) -> None:
        shape = (len(self.layer_names_a), len(self.layer_names_b))
        for name in ("cka", "low", "high"):
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name}: must be [layers of A, layers of B] = {shape}")

    def rows(self) -> list[dict]:
        """One row per pair of layers: the CSV's columns, in order (CLI and app alike)."""
        return [{"model_a": self.model_a, "layer_a": i, "layer_a_name": na,
                 "model_b": self.model_b, "layer_b": j, "layer_b_name": nb,
                 "cka": float(self.cka[i, j]), "ci_low": float(self.low[i, j]),
                 "ci_high": float(self.high[i, j]), "n_words": self.n_words,
                 "n_sentences": self.n_sentences}
                for i, na in enumerate(self.layer_names_a)
                for j, nb in enumerate(self.layer_names_b)]


def _sentence_blocks(offsets: np.ndarray, max_rows: int) -> list[tuple[int, int]]:
    """Runs of whole sentences (s0, s1) of at most max_rows words (one sentence at least)."""
    blocks, s0 = [], 0
    n_sentences = len(offsets) - 1
    while s0 < n_sentences:
        s1 = s0 + 1
        while s1 < n_sentences and offsets[s1 + 1] - offsets[s0] <= max_rows:
            s1 += 1
        blocks.append((s0, s1))
        s0 = s1
    return blocks


def _hadamard_sums(xs: np.ndarray, ys: np.ndarray, offsets: np.ndarray):
    """M = P'(K∘L)P [S, S] for every pair of layers across (La x Lb) and within each model,
    from row blocks of the Gram matrices (never n x n per layer at once)."""
    (la, n, _), lb = xs.shape, ys.shape[0]
    s = len(offsets) - 1
    m_ab, m_aa, m_bb = np.empty((la, lb, s, s)), np.empty((la, s, s)), np.empty((lb, s, s))
    starts = offsets[:-1]

    for s0, s1 in _sentence_blocks(offsets, max(1, _BLOCK_ENTRIES // ((la + 2 * lb) * n))):
        rows = slice(offsets[s0], offsets[s1])
        local = starts[s0:s1] - offsets[s0]

        def by_sentence(m: np.ndarray) -> np.ndarray:     # [..., rows, n] -> [..., s1-s0, S]
            return np.add.reduceat(np.add.reduceat(m, starts, axis=-1), local, axis=-2)

        k = xs[:, rows] @ xs.transpose(0, 2, 1)            # [La, rows, n]
        g = ys[:, rows] @ ys.transpose(0, 2, 1)            # [Lb, rows, n]
        m_aa[:, s0:s1] = by_sentence(k * k)
        m_bb[:, s0:s1] = by_sentence(g * g)
        for i in range(la):
            m_ab[i, :, s0:s1] = by_sentence(k[i] * g)
    return m_ab, m_aa, m_bb


def _times_counts(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    """m [..., S] @ c.T -> [..., R], as one 2-D product: numpy's matmul broadcast over stacked
    matrices skips BLAS (30x slower for [3, 7, 48, 48] @ [48, 600])."""
    return (m.reshape(-1, m.shape[-1]) @ c.T).reshape(*m.shape[:-1], len(c))


def _quadratic(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    """c_r' M c_r for every resample: m [..., S, S], c [R, S] -> [..., R]."""
    return (_times_counts(m, c) * c.T).sum(axis=-2)


@dataclass(frozen=True)
class _ModelSums:
    """One model's sentence-level pieces of the resampled HSIC, per layer."""

    kp: np.ndarray         # K P [L, n, S]: each word's Gram row summed over each sentence
    ks: np.ndarray         # P'K P [L, S, S]
    m_self: np.ndarray     # P'(K∘K)P [L, S, S]
    diag: np.ndarray       # diag(K) [L, n]: each word's squared norm


def _model_sums(xs: np.ndarray, offsets: np.ndarray, m_self: np.ndarray) -> _ModelSums:
    sums = np.add.reduceat(xs, offsets[:-1], axis=1)             # [L, S, d]
    return _ModelSums(xs @ sums.transpose(0, 2, 1), sums @ sums.transpose(0, 2, 1), m_self,
                      (xs * xs).sum(axis=-1))


def _weighted_terms(s: _ModelSums, c: np.ndarray, total: np.ndarray):
    """Kw [R, L, n], w'Kw [R, L] and the centred squared norms diag(K_c) [R, L, n] (K_c: the
    Gram matrix of the words centred on their weighted mean) for resamples c [R, S]."""
    kw = np.moveaxis(_times_counts(s.kp, c), -1, 0)
    q = _quadratic(s.ks, c).T
    t = total[:, None, None]
    return kw, q, s.diag[None] - 2 * kw / t + q[:, :, None] / t ** 2


def _resampled_cka(m_ab: np.ndarray, sa: _ModelSums, sb: _ModelSums, lengths: np.ndarray,
                   c: np.ndarray) -> np.ndarray:
    """[R, La, Lb] for the resamples c [R, S] (the module docstring's recipe)."""
    w = c[:, np.repeat(np.arange(len(lengths)), lengths)][:, None]   # [R, 1, n]
    total = c @ lengths                                                # [R]: W
    kw_a, q_a, kc_a = _weighted_terms(sa, c, total)
    kw_b, q_b, kc_b = _weighted_terms(sb, c, total)
    t = total[:, None]
    # plain HSIC of the weighted-centred words (the diagonal still in)
    plain_a = _quadratic(sa.m_self, c).T - 2 * (w * kw_a * kw_a).sum(-1) / t + q_a ** 2 / t ** 2
    plain_b = _quadratic(sb.m_self, c).T - 2 * (w * kw_b * kw_b).sum(-1) / t + q_b ** 2 / t ** 2
    t = total[:, None, None]
    plain_ab = (np.moveaxis(_quadratic(m_ab, c), -1, 0)
                - 2 * ((w * kw_a) @ kw_b.transpose(0, 2, 1)) / t
                + q_a[:, :, None] * q_b[:, None, :] / t ** 2)
    # centred words: K_c w = 0, so K~_c w = -w diag(K_c) and every correction is a diagonal's
    w2a, w2b = w * w * kc_a, w * w * kc_b
    self_a = debiased_hsic(plain_a - (w2a * kc_a).sum(-1), (w * w2a * kc_a).sum(-1),
                           w2a.sum(-1) ** 2, total[:, None])
    self_b = debiased_hsic(plain_b - (w2b * kc_b).sum(-1), (w * w2b * kc_b).sum(-1),
                           w2b.sum(-1) ** 2, total[:, None])
    cross = debiased_hsic(plain_ab - w2a @ kc_b.transpose(0, 2, 1),
                          (w * w2a) @ kc_b.transpose(0, 2, 1),
                          w2a.sum(-1)[:, :, None] * w2b.sum(-1)[:, None, :], t)
    return cka_from_hsic(cross, self_a, self_b)


def cka_replicates(a: np.ndarray, b: np.ndarray, lengths: Sequence[int],
                   counts: np.ndarray) -> np.ndarray:
    """[R, La, Lb]: debiased CKA of each resample of sentences. a [La, n, da], b [Lb, n, db]
    hold the words of sentences of `lengths` words, in order; counts [R, S]: how often each
    sentence is drawn (bootstrap.resample_counts). NaN where a resample's words have no
    variance at a layer."""
    # centring on the plain mean first keeps the terms small, so their differences keep their
    # digits; each resample is centred on its own weighted mean below
    xs, ys = _centred(a), _centred(b)
    lengths = np.asarray(lengths, np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    m_ab, m_aa, m_bb = _hadamard_sums(xs, ys, offsets)
    sa, sb = _model_sums(xs, offsets, m_aa), _model_sums(ys, offsets, m_bb)
    (la, n, _), lb = xs.shape, ys.shape[0]
    out = np.empty((len(counts), la, lb))
    step = max(1, _BLOCK_ENTRIES // max(6 * (la + lb) * n, la * lb * len(lengths)))
    for r0 in range(0, len(counts), step):
        c = np.asarray(counts[r0:r0 + step], np.float64)
        out[r0:r0 + step] = _resampled_cka(m_ab, sa, sb, lengths, c)
    return out


def _centred(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x - x.mean(axis=1, keepdims=True)


def check_enough(n_words: int, n_sentences: int) -> None:
    """Raise EngineError below 2 sentences (the bootstrap's units) or 4 words (the debiased
    estimator's least)."""
    if n_sentences < 2 or n_words < 4:
        raise EngineError(f"CKA between models needs at least 2 sentences (the bootstrap "
                          f"resamples them) and 4 words; got {n_sentences} sentence"
                          f"{'s' if n_sentences != 1 else ''} and {n_words} word"
                          f"{'s' if n_words != 1 else ''}")


def check_size(n_words: int, n_sentences: int, n_layers_a: int, n_layers_b: int) -> None:
    """Raise EngineError where the intervals would not fit: the Gram matrices grow with the
    square of the words, the per-sentence sums with the square of the sentences."""
    most = int((_MAX_PAIR_SUMS / (n_layers_a * n_layers_b)) ** 0.5)
    if n_words > MAX_WORDS or n_sentences > most:
        raise EngineError(f"{n_sentences} sentences of {n_words} words are too many for the "
                          f"bootstrap over sentences (its cost grows with their square); "
                          f"keep to {MAX_WORDS} words and {most} sentences for these models")


def _stack_words(encodings: Sequence[Encoding], pool: Pooling) -> np.ndarray:
    return np.concatenate([e.word_vectors(pool) for e in encodings], axis=1)


def compare_models(encodings_a: Sequence[Encoding], encodings_b: Sequence[Encoding],
                   pool: Pooling = "mean", n_resamples: int = N_RESAMPLES,
                   seed: int = SEED) -> ModelCKA:
    """Layer x layer linear CKA of two models' encodings of the same sentences, over every
    word (as the Compare layers page's CKA within a model), with a percentile bootstrap
    interval that resamples the sentences: a sentence's words move together, as their
    vectors share its context."""
    if len(encodings_a) != len(encodings_b) or any(
            ea.words != eb.words for ea, eb in zip(encodings_a, encodings_b)):
        raise EngineError("the two models' encodings are not of the same sentences' words")
    lengths = [len(e.words) for e in encodings_a]
    check_enough(sum(lengths), len(lengths))
    first_a, first_b = encodings_a[0], encodings_b[0]
    check_size(sum(lengths), len(lengths), first_a.n_layers, first_b.n_layers)
    a, b = _stack_words(encodings_a, pool), _stack_words(encodings_b, pool)
    # the estimate is the "resample" that draws every sentence once: equal to
    # cross_cka(a, b, debiased=True) (tests), from the Gram sums the resamples need anyway
    counts = resample_counts(len(lengths), n_resamples, seed)
    reps = cka_replicates(a, b, lengths, np.vstack([np.ones_like(counts[:1]), counts]))
    low, high = interval(reps[1:])
    return ModelCKA(cka=reps[0], low=low, high=high,
                    model_a=first_a.model_id, model_b=first_b.model_id,
                    layer_names_a=first_a.layer_names, layer_names_b=first_b.layer_names,
                    n_words=sum(lengths), n_sentences=len(lengths), n_resamples=n_resamples)
