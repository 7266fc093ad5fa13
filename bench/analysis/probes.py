"""Layer probes: word-sense nearest-centroid and same/different-sense threshold accuracy,
a learned ELMo-style scalar mix, and a linear part-of-speech probe.

Pure numpy/scipy/sklearn on word vectors, for the benchmarks (bench/layers.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, softmax

from engine.analysis.vectors import EPS as _EPS
from engine.analysis.vectors import TIE_TOLERANCE
from engine.analysis.vectors import unit_rows
from engine.families.elmo.mix import scalar_mix


@dataclass(frozen=True)
class SenseData:
    """Usage examples of polysemous words: vectors [layers, n, dim] of the target word in each
    example, its WordNet sense label and its lemma (the group that senses are compared within)."""

    vectors: np.ndarray
    senses: np.ndarray        # [n] sense id (unique across lemmas)
    lemmas: np.ndarray        # [n] lemma id
    ranks: np.ndarray         # [n] WordNet sense rank of the example's sense (1 = first)

    def __post_init__(self) -> None:
        n = self.vectors.shape[1]
        if self.vectors.ndim != 3 or not (self.senses.shape == self.lemmas.shape
                                          == self.ranks.shape == (n,)):
            raise ValueError("vectors: must be [layers, n, dim] with one sense and lemma per row")

    def subset(self, rows: np.ndarray) -> "SenseData":
        return SenseData(self.vectors[:, rows], self.senses[rows], self.lemmas[rows],
                         self.ranks[rows])


# -- nearest sense centroid -----------------------------------------------------------------

def nearest_centroid_hits(vectors: np.ndarray, senses: np.ndarray,
                          lemmas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hits, scored) per lemma of np.unique(lemmas), the bootstrap unit of the sense benchmark;
    see nearest_centroid_accuracy."""
    unit = unit_rows(vectors)
    names_of_lemmas = np.unique(lemmas)
    hits, total = np.zeros(len(names_of_lemmas)), np.zeros(len(names_of_lemmas))
    for i, lemma in enumerate(names_of_lemmas):
        rows = np.nonzero(lemmas == lemma)[0]
        labels = senses[rows]
        names, counts = np.unique(labels, return_counts=True)
        if len(names) < 2:
            continue
        sums = np.stack([unit[rows[labels == s]].sum(axis=0) for s in names])  # [senses, dim]
        for r, label in zip(rows, labels):
            k = int(np.nonzero(names == label)[0][0])
            if counts[k] < 2:
                continue
            centroids = sums.copy()
            centroids[k] -= unit[r]
            sims = unit_rows(centroids) @ unit[r]
            # a context-free layer gives every example of one word form the same vector, so
            # all its sense centroids tie and argmax would pick by float rounding (which moves
            # elmo-brown's char-CNN score by 0.03 between two batchings): a tie earns the
            # expected score of an arbitrary pick instead, 1 / (number tied)
            tied = sims >= sims.max() - TIE_TOLERANCE
            hits[i] += tied[k] / tied.sum()
            total[i] += 1
    return hits, total


def nearest_centroid_accuracy(vectors: np.ndarray, senses: np.ndarray,
                              lemmas: np.ndarray) -> float:
    """Leave-one-out nearest-sense-centroid accuracy (Peters et al. 2018 §5.3; Coenen et al.
    2019 §4.1): each example is labelled with the sense of its lemma whose centroid of the
    *other* examples is nearest by cosine. Examples whose sense has no other example are skipped.
    Centroids tied for nearest (the same vector, as a context-free layer gives) share the credit.

    vectors: [n, dim] for one layer (or a mix).
    """
    hits, total = nearest_centroid_hits(vectors, senses, lemmas)
    return float(hits.sum() / total.sum()) if total.sum() else float("nan")


def _scored_rows(senses: np.ndarray, lemmas: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rows, candidate senses) per lemma, over the examples nearest_centroid_accuracy scores:
    lemmas with >= 2 senses, examples whose sense has another example."""
    out = []
    for lemma in np.unique(lemmas):
        rows = np.nonzero(lemmas == lemma)[0]
        names, counts = np.unique(senses[rows], return_counts=True)
        if len(names) >= 2:
            out.append((rows[np.isin(senses[rows], names[counts >= 2])], names))
    return out


def first_sense_hits(senses: np.ndarray, lemmas: np.ndarray,
                     ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hits, scored) per lemma of np.unique(lemmas); see first_sense_accuracy."""
    names_of_lemmas = np.unique(lemmas)
    hits, total = np.zeros(len(names_of_lemmas)), np.zeros(len(names_of_lemmas))
    for rows, names in _scored_rows(senses, lemmas):
        i = int(np.searchsorted(names_of_lemmas, lemmas[rows[0]]))
        rank_of = {s: r for s, r in zip(senses[lemmas == lemmas[rows[0]]],
                                        ranks[lemmas == lemmas[rows[0]]])}
        first = min(names, key=lambda s: rank_of[s])
        hits[i] = int(np.sum(senses[rows] == first))
        total[i] = len(rows)
    return hits, total


def first_sense_accuracy(senses: np.ndarray, lemmas: np.ndarray, ranks: np.ndarray) -> float:
    """Baseline on the examples nearest_centroid_accuracy scores: always answer the lemma's
    sense with the lowest WordNet rank (the "first sense" baseline of Peters et al. 2018,
    Table 5)."""
    hits, total = first_sense_hits(senses, lemmas, ranks)
    return float(hits.sum() / total.sum()) if total.sum() else float("nan")


def chance_accuracy(senses: np.ndarray, lemmas: np.ndarray) -> float:
    """Expected accuracy of a uniform guess among each lemma's senses, same examples."""
    scores = [len(rows) / len(names) for rows, names in _scored_rows(senses, lemmas)]
    n = sum(len(rows) for rows, _ in _scored_rows(senses, lemmas))
    return sum(scores) / n if n else float("nan")


# -- same / different sense pairs -------------------------------------------------------------

def sense_pairs(senses: np.ndarray, lemmas: np.ndarray, seed: int = 0,
                max_per_lemma: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Balanced example pairs within each lemma: (pairs [m, 2], same_sense [m] bool).
    Equal numbers of same- and different-sense pairs per lemma, so chance is 50% (as in WiC,
    Pilehvar & Camacho-Collados 2019)."""
    rng = np.random.default_rng(seed)
    pairs, labels = [], []
    for lemma in np.unique(lemmas):
        rows = np.nonzero(lemmas == lemma)[0]
        i, j = np.triu_indices(len(rows), k=1)
        a, b = rows[i], rows[j]
        same = senses[a] == senses[b]
        k = min(int(same.sum()), int((~same).sum()), max_per_lemma // 2)
        for flag in (True, False):
            pick = np.nonzero(same == flag)[0]
            pick = rng.choice(pick, size=k, replace=False)
            pairs.append(np.stack([a[pick], b[pick]], axis=1))
            labels.append(np.full(k, flag))
    if not pairs:
        return np.zeros((0, 2), int), np.zeros(0, bool)
    return np.concatenate(pairs), np.concatenate(labels)


def pair_cosines(vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    unit = unit_rows(vectors)
    return np.einsum("pd,pd->p", unit[pairs[:, 0]], unit[pairs[:, 1]])


def fit_threshold(cosines: np.ndarray, same: np.ndarray) -> float:
    """The cosine threshold (same sense if above) with the best training accuracy."""
    if len(cosines) == 0:
        raise ValueError("cosines: no training pairs to fit a threshold on")
    order = np.sort(cosines)
    candidates = np.concatenate([[order[0] - 1e-6], (order[1:] + order[:-1]) / 2,
                                 [order[-1] + 1e-6]])
    acc = [np.mean((cosines > t) == same) for t in candidates]
    return float(candidates[int(np.argmax(acc))])


def threshold_accuracy(cosines: np.ndarray, same: np.ndarray, threshold: float) -> float:
    return float(np.mean((cosines > threshold) == same)) if len(same) else float("nan")


# -- learned scalar mix ----------------------------------------------------------------------

@dataclass(frozen=True)
class ScalarMix:
    """ELMo's task-specific layer weighting (Peters et al. 2018, Eq. 1): gamma * sum_j
    softmax(s)_j h_j over unit-length vectors, so that layers with large norms (GPT) do not
    dominate by scale alone. (ELMo's own do_layer_norm is another thing, one mean and variance
    per layer: engine.families.elmo.mix.) gamma does not change a cosine, so only the weights
    are learned here."""

    weights: np.ndarray       # [layers], softmax(s)

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """vectors [layers, n, dim] -> [n, dim]: the one scalar mix (engine.families.elmo.mix)
        of the unit-length vectors, with s = log(weights) so that softmax(s) = weights."""
        with np.errstate(divide="ignore"):          # a weight of 0 is s = -inf: no share
            s = np.log(self.weights)
        return scalar_mix(unit_rows(vectors), s).astype(np.float64)


def _mix_loss(params: np.ndarray, cross: np.ndarray, norm_a: np.ndarray, norm_b: np.ndarray,
              same: np.ndarray, l2: float) -> float:
    n_layers = cross.shape[1]
    w = softmax(params[:n_layers])
    theta, log_tau = params[n_layers], params[n_layers + 1]
    # with m = sum_l w_l u_l: m_a.m_b = w' P w and |m|^2 = w' Q w (Grams precomputed once)
    dot = np.einsum("l,plk,k->p", w, cross, w)
    na, nb = np.einsum("l,plk,k->p", w, norm_a, w), np.einsum("l,plk,k->p", w, norm_b, w)
    cos = dot / np.sqrt(np.maximum(na * nb, _EPS))
    # a line search may try a huge log_tau: past e**50 the sigmoid is a step either way, and
    # exp of more overflows
    p = expit(np.exp(min(log_tau, 50.0)) * (cos - theta))
    y = same.astype(float)
    nll = -np.mean(y * np.log(p + _EPS) + (1 - y) * np.log(1 - p + _EPS))
    return float(nll + l2 * np.sum(params[:n_layers] ** 2))


def learn_scalar_mix(vectors: np.ndarray, pairs: np.ndarray, same: np.ndarray,
                     l2: float = 1e-3) -> ScalarMix:
    """Learn mix weights on training pairs: logistic loss of sigma(tau (cos - theta)) for
    "same sense", starting from the uniform mix (the no-task default, 1/L each)."""
    unit = unit_rows(vectors)                                   # [layers, n, dim]
    ua, ub = unit[:, pairs[:, 0]], unit[:, pairs[:, 1]]     # [layers, pairs, dim]
    cross = np.einsum("lpd,kpd->plk", ua, ub)
    norm_a, norm_b = np.einsum("lpd,kpd->plk", ua, ua), np.einsum("lpd,kpd->plk", ub, ub)
    n_layers = unit.shape[0]
    start = np.concatenate([np.zeros(n_layers), [0.5, np.log(10.0)]])
    res = minimize(_mix_loss, start, args=(cross, norm_a, norm_b, same, l2), method="L-BFGS-B",
                   options={"maxiter": 200})
    return ScalarMix(weights=softmax(res.x[:n_layers]))


# -- part-of-speech probe -------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeScore:
    accuracy: float
    majority_baseline: float
    n_train: int
    n_test: int
    correct: np.ndarray | None = None    # [n_test] bool, for a bootstrap over test units


def linear_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                 y_test: np.ndarray, c: float = 1.0, max_iter: int = 200) -> ProbeScore:
    """Accuracy of a multinomial logistic-regression probe (Peters et al. 2018 §5.3, Table 6:
    a linear classifier on one layer's frozen vectors), with the majority-class baseline."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    # one BLAS thread: these matrices are small, and threaded BLAS on a busy machine spins
    # (measured 50x slower on 2 shared cores)
    with threadpool_limits(1):
        scaler = StandardScaler().fit(x_train)
        clf = LogisticRegression(C=c, max_iter=max_iter)
        clf.fit(scaler.transform(x_train), y_train)
        correct = clf.predict(scaler.transform(x_test)) == y_test
    labels, counts = np.unique(y_train, return_counts=True)
    majority = float(np.mean(y_test == labels[np.argmax(counts)]))
    return ProbeScore(float(np.mean(correct)), majority, len(y_train), len(y_test), correct)
