"""Interpolated Kneser-Ney bigram baseline (Kneser & Ney 1995; Chen & Goodman 1998, section 3).

    P(w | v) = max(c(v, w) - d, 0) / c(v) + d * N1+(v .) / c(v) * P_cont(w)
    P_cont(w) = N1+(. w) / N1+(. .)   (add-one smoothed here so unseen tokens keep some mass)

Counts come from the training split only. Units follow the model being compared with: token ids
of its own tokeniser (BPE, WordPiece) or its word vocabulary (ELMo).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy import sparse

DISCOUNT = 0.75


@dataclass(frozen=True)
class KneserNeyBigram:
    counts: sparse.csr_matrix      # (V, V): c(v, w)
    context_total: np.ndarray      # (V,): c(v)
    context_types: np.ndarray      # (V,): N1+(v .)
    p_cont: np.ndarray             # (V,)
    discount: float = DISCOUNT

    @classmethod
    def fit(cls, sequences: Iterable[Sequence[int]], vocab_size: int,
            discount: float = DISCOUNT) -> "KneserNeyBigram":
        rows, cols = [], []
        for seq in sequences:
            a = np.asarray(seq, dtype=np.int64)
            rows.append(a[:-1])
            cols.append(a[1:])
        r, c = np.concatenate(rows), np.concatenate(cols)
        counts = sparse.csr_matrix((np.ones_like(r, dtype=np.float64), (r, c)),
                                   shape=(vocab_size, vocab_size))
        counts.sum_duplicates()
        binary = (counts > 0).astype(np.float64)
        cont = np.asarray(binary.sum(axis=0)).ravel()
        return cls(counts, np.asarray(counts.sum(axis=1)).ravel(),
                   np.asarray(binary.sum(axis=1)).ravel(),
                   (cont + 1.0) / (cont.sum() + vocab_size), discount)

    def prob(self, prev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """P(nxt | prev) elementwise."""
        c = np.asarray(self.counts[prev, nxt]).ravel()
        tot = self.context_total[prev]
        lam = np.where(tot > 0, self.discount * self.context_types[prev] / np.maximum(tot, 1), 1.0)
        direct = np.where(tot > 0, np.maximum(c - self.discount, 0) / np.maximum(tot, 1), 0.0)
        return direct + lam * self.p_cont[nxt]

    def next_distribution(self, prev: int) -> np.ndarray:
        """P(. | prev) over the vocabulary."""
        row = np.asarray(self.counts[prev].todense()).ravel()
        tot = self.context_total[prev]
        if tot == 0:
            return self.p_cont.copy()
        return (np.maximum(row - self.discount, 0) + self.discount * self.context_types[prev]
                * self.p_cont) / tot

    def into_distribution(self, nxt: int) -> np.ndarray:
        """P(nxt | v) for every context v."""
        col = np.asarray(self.counts[:, nxt].todense()).ravel()
        tot = self.context_total
        safe = np.maximum(tot, 1)
        out = (np.maximum(col - self.discount, 0) + self.discount * self.context_types
               * self.p_cont[nxt]) / safe
        return np.where(tot > 0, out, self.p_cont[nxt])

    def nll(self, sequences: Iterable[Sequence[int]]) -> tuple[float, int]:
        """Total negative log-likelihood (nats) and number of predicted tokens (all but the first
        of each sequence)."""
        total, n = 0.0, 0
        for seq in sequences:
            a = np.asarray(seq, dtype=np.int64)
            if len(a) < 2:
                continue
            total -= float(np.log(self.prob(a[:-1], a[1:])).sum())
            n += len(a) - 1
        return total, n

    def masked_nll(self, seq: Sequence[int], positions: Sequence[int],
                   excluded: Sequence[int] = ()) -> tuple[float, int, int]:
        """Both-neighbour baseline for a masked LM: P(w | left, right) ∝ P(w | left) P(right | w),
        renormalised over the vocabulary (ids in `excluded`, e.g. special tokens, get zero).
        Returns total NLL, number of positions and number where the argmax is the true token."""
        total, n, correct = 0.0, 0, 0
        for i in positions:
            if i <= 0 or i >= len(seq) - 1:
                continue
            p = self.next_distribution(int(seq[i - 1])) * self.into_distribution(int(seq[i + 1]))
            p[list(excluded)] = 0.0
            p /= p.sum()
            total -= float(np.log(max(p[int(seq[i])], 1e-30)))
            correct += int(np.argmax(p) == int(seq[i]))
            n += 1
        return total, n, correct
