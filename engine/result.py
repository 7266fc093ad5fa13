"""Typed results that cross the engine boundary: CPU float32 numpy in frozen dataclasses.

They pickle (for st.cache_data and the LRU cache) and check their own shapes, so no torch
tensor and no malformed array ever reaches an analysis or a figure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np

from engine.families import FAMILIES

if TYPE_CHECKING:       # names only: result.py sits below the analyses
    from engine.analysis.senses import SenseSeparation, SplitQuality

Pooling = Literal["first", "mean", "last"]
POOLINGS: tuple[str, ...] = ("first", "mean", "last")


def _require(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {why}")


def numbered_layers(n: int) -> tuple[str, ...]:
    """Names for n hidden-state layers of a model that gives none (0 = the input embedding):
    every result that has layers names each one, so no reader makes up its own."""
    return tuple(f"layer {i}" for i in range(n))


@dataclass(frozen=True, eq=False)
class Encoding:
    """One analysed text.

    hidden_states: [layers+1, tokens, dim]; index 0 is the embedding layer (ELMo: char CNN).
    attentions: [layers, heads, tokens, tokens] (rows attend to columns) or None (ELMo).
    token_to_word: [tokens] word index of each token, -1 for special tokens ([CLS], <s>, ...).
    """

    model_id: str
    family: str
    text: str
    words: tuple[str, ...]
    tokens: tuple[str, ...]
    token_to_word: np.ndarray
    hidden_states: np.ndarray
    attentions: np.ndarray | None = None
    layer_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(self.family in FAMILIES, "family", f"must be one of {tuple(FAMILIES)}")
        hs, t2w = self.hidden_states, self.token_to_word
        _require(isinstance(hs, np.ndarray) and hs.ndim == 3, "hidden_states",
                 "must be a numpy array [layers+1, tokens, dim]")
        _require(hs.dtype == np.float32, "hidden_states", "must be float32")
        _require(hs.shape[1] == len(self.tokens), "hidden_states",
                 f"has {hs.shape[1]} tokens, tokens has {len(self.tokens)}")
        _require(t2w.shape == (len(self.tokens),), "token_to_word", "one entry per token")
        _require(bool(np.all((t2w >= -1) & (t2w < len(self.words)))), "token_to_word",
                 "entries must be -1 or a word index")
        covered = set(t2w[t2w >= 0].tolist())
        _require(covered == set(range(len(self.words))), "token_to_word",
                 "every word needs at least one token")
        if self.attentions is not None:
            a = self.attentions
            _require(a.ndim == 4 and a.shape[2:] == (len(self.tokens),) * 2, "attentions",
                     "must be [layers, heads, tokens, tokens]")
            _require(a.shape[0] == hs.shape[0] - 1, "attentions", "one map per layer")
            _require(a.dtype == np.float32, "attentions", "must be float32")
        if not self.layer_names:
            object.__setattr__(self, "layer_names", numbered_layers(hs.shape[0]))
        _require(len(self.layer_names) == hs.shape[0], "layer_names", "one name per layer")

    @property
    def n_layers(self) -> int:
        """Number of hidden-state layers including the embedding layer."""
        return self.hidden_states.shape[0]

    @property
    def special_mask(self) -> np.ndarray:
        return self.token_to_word < 0

    def word_tokens(self, word: int) -> np.ndarray:
        return np.nonzero(self.token_to_word == word)[0]

    def word_vectors(self, pool: Pooling = "mean") -> np.ndarray:
        """[layers+1, words, dim]: each word's subword vectors pooled the same way for every
        tokeniser (WordPiece, byte-level BPE, SentencePiece, ELMo's whole words)."""
        _require(pool in POOLINGS, "pool", f"must be one of {POOLINGS}")
        # one gather or one matmul for all words (a per-word loop takes a tenth of `ctxlens
        # embed`'s time); every word has at least one token (checked at construction)
        n, hs = len(self.words), self.hidden_states
        if pool == "mean" and np.count_nonzero(self.token_to_word >= 0) == n:
            # words of one token each (every ELMo text, many WordPiece ones): the mean is that
            # token, and the gather five times cheaper than the matmul
            pool = "last"
        rows, words, weights, _ = pool_index([self.token_to_word], [n], hs.shape[1], pool)
        if words is None:
            return np.ascontiguousarray(hs[:, rows])
        pool_matrix = np.zeros((n, hs.shape[1]), np.float32)
        pool_matrix[words, rows] = weights
        return np.matmul(pool_matrix[None], hs).astype(np.float32, copy=False)


def pool_index(token_to_word: Sequence[np.ndarray], n_words: Sequence[int], width: int,
               pool: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, int]:
    """Subword pooling, the one rule (Encoding.word_vectors; on the device,
    engine/families/hf/pooling.py), for a batch of texts whose token rows lie at
    text × width + position, special tokens (-1) in no word. "first" / "last": one token's row
    per word (rows [words]; words and weights None). "mean": each token's row, the word it adds
    to (numbered across the batch) and its weight, 1 / the word's token count. Returns (rows,
    words, weights, number of words); whole-batch array operations (a loop over texts takes
    0.30 s of host time for 16,384 sentences in batches of 512, these 0.02 s)."""
    lengths = np.array([len(t) for t in token_to_word], np.int64)
    n_words = np.asarray(n_words, np.int64)
    t2w = np.concatenate(token_to_word).astype(np.int64, copy=False)
    text = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(len(t2w)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    real = t2w >= 0
    rows = (text * width + pos)[real]
    words = (t2w + np.repeat(np.cumsum(n_words) - n_words, lengths))[real]
    total = int(n_words.sum())
    if pool == "mean":
        counts = np.bincount(words, minlength=total)
        return rows, words, (1.0 / counts[words]).astype(np.float32), total
    pick = np.empty(total, np.int64)
    if pool == "first":
        pick[words[::-1]] = rows[::-1]      # repeated indices: the last write, i.e. the first
    else:
        pick[words] = rows
    return pick, None, None, total


@dataclass(frozen=True)
class Candidate:
    token: str
    prob: float


@dataclass(frozen=True)
class Prediction:
    """Top-k candidates for one position, best first.

    kind: "masked" (a filled blank), "next" (GPT, ELMo forward LM) or "previous" (ELMo
    backward LM). method: how the model got there, for a reader ("MLM head", "forward LM",
    "left-context candidates re-ranked by the whole sentence", ...).
    """

    model_id: str
    kind: str
    context: str
    candidates: tuple[Candidate, ...]
    method: str = ""
    # how many words a re-ranking method ranked (its probabilities are shares among them);
    # 0 when the model scored its whole vocabulary
    ranked_among: int = 0

    def __post_init__(self) -> None:
        probs = [c.prob for c in self.candidates]
        _require(all(a >= b for a, b in zip(probs, probs[1:])), "candidates", "best first")

    def as_json(self) -> list[dict]:
        return [{"token": c.token, "prob": float(c.prob)} for c in self.candidates]


@dataclass(frozen=True, eq=False)
class LogitLens:
    """Next-token distribution read off every layer (final norm + output head applied).

    top_tokens/top_probs: [layers+1, positions] best token per layer and input position.
    At the last layer this is the model's own output.
    """

    model_id: str
    tokens: tuple[str, ...]
    top_tokens: tuple[tuple[str, ...], ...]
    top_probs: np.ndarray
    layer_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        _require(self.top_probs.shape == (len(self.top_tokens), len(self.tokens)), "top_probs",
                 "must be [layers+1, positions]")
        if not self.layer_names:
            object.__setattr__(self, "layer_names", numbered_layers(len(self.top_tokens)))
        _require(len(self.layer_names) == len(self.top_tokens), "layer_names",
                 "one name per layer")


@dataclass(frozen=True, eq=False)
class QueryKey:
    """What one attention layer's scores are made of (BertViz's neuron view): per head the
    query and key vector of every token, [heads, tokens, head_dim], and the factor the dot
    products are scaled by, read where the model's own attention function receives them (after
    rotary embeddings; grouped-query keys repeated to every head). causal: a token attends only
    to itself and earlier tokens. allowed [tokens, tokens]: where each query may look, when the
    model's mask says more than `causal` (a sliding window, local attention). softcap: the
    scores are soft-capped to softcap·tanh(s / softcap) before the softmax (Gemma-2)."""

    model_id: str
    tokens: tuple[str, ...]
    layer: int                  # 1-based, as the attention maps count
    queries: np.ndarray
    keys: np.ndarray
    scale: float
    causal: bool
    allowed: np.ndarray | None = None
    softcap: float | None = None

    def __post_init__(self) -> None:
        _require(self.queries.ndim == 3 and self.queries.shape == self.keys.shape
                 and self.queries.shape[1] == len(self.tokens), "queries",
                 "queries and keys must both be [heads, tokens, head_dim]")
        n = len(self.tokens)
        _require(self.allowed is None or self.allowed.shape == (n, n), "allowed",
                 "allowed must be [tokens, tokens]")

    def products(self, head: int, token: int) -> np.ndarray:
        """q_token ⊙ k_j for every j: [tokens, head_dim]; row j sums to the raw score."""
        return self.queries[head, token][None, :] * self.keys[head]

    def allowed_mask(self) -> np.ndarray:
        """[tokens, tokens] bool: where each query may look: the model's own mask where it
        says more than `causal`, else causal order, else every token."""
        if self.allowed is not None:
            return self.allowed
        n = len(self.tokens)
        return np.tril(np.ones((n, n), bool)) if self.causal else np.ones((n, n), bool)

    def scores(self, head: int, token: int) -> np.ndarray:
        """Scaled scores q·k_j × scale (soft-capped where the model caps them), [tokens];
        -inf where the token cannot look."""
        s = self.products(head, token).astype(np.float64).sum(axis=1) * self.scale
        return _masked(_capped(s, self.softcap), self.allowed_mask()[token])

    def attention(self, head: int, token: int) -> np.ndarray:
        """softmax of the scores: the attention row the model itself computes."""
        return _softmax(self.scores(head, token))

    def attention_maps(self) -> np.ndarray:
        """[heads, tokens, tokens]: every row of attention() at once, from the vectors' own
        dtype (float32, as the model multiplies them)."""
        s = self.queries @ self.keys.transpose(0, 2, 1) * self.scale
        return _softmax(_masked(_capped(s, self.softcap), self.allowed_mask()[None]))


def _capped(scores: np.ndarray, softcap: float | None) -> np.ndarray:
    """Gemma-2's soft-cap of attention scores, softcap·tanh(s / softcap), where a model has one."""
    return np.tanh(scores / softcap) * softcap if softcap else scores


def _masked(scores: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    return np.where(allowed, scores, -np.inf)


def _softmax(scores: np.ndarray) -> np.ndarray:
    """softmax over the last axis; -inf scores get weight 0 (a row always has a finite score:
    a token may look at itself)."""
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# -- what the app's analyses return (app/results.py, app/engine_access.py, app/corpus_access.py)

@dataclass(frozen=True, eq=False)
class TargetVectors:
    """The target word's vectors: [layers, n, dim] for the sentences listed in `rows` (its
    first occurrence in each)."""

    model_id: str
    vectors: np.ndarray
    rows: tuple[int, ...]
    missing: tuple[int, ...]
    layer_names: tuple[str, ...]
    repeated: tuple[int, ...] = ()   # sentences holding the target more than once
    positions: tuple[int, ...] = ()  # the target's word position in each of `rows`, from 0

    def index_columns(self) -> dict:
        """Which occurrence each point is: its sentence and word position, from 0 (as
        `ctxlens neighbours` counts them)."""
        return {"sentence_index": list(self.rows), "position": list(self.positions)}

    def occurrence_columns(self, pool: str, layer: str) -> dict:
        """What a point is, for a CSV that has to be read without the page: index_columns,
        model, layer and pooling."""
        return {**self.index_columns(), "model": self.model_id, "layer": layer, "pooling": pool}


@dataclass(frozen=True, eq=False)
class SuggestedSenses:
    """A clustering of the target's top-layer vectors, offered as sense labels."""

    rows: tuple[int, ...]        # the sentences holding the target (TargetVectors.rows)
    clusters: np.ndarray         # [rows]: a cluster number per sentence, from 0
    quality: SplitQuality


@dataclass(frozen=True, eq=False)
class MixedVectors:
    """The target's vectors through one scalar mix, and how well they separate the senses."""

    vectors: np.ndarray                  # [rows, dim]: gamma * sum_j softmax(s)_j h_j
    coords: np.ndarray                   # [rows, 2]: their PCA
    separation: SenseSeparation          # of the mix
    top_separation: SenseSeparation      # of the top layer alone, for comparison
    one_point: bool                      # every occurrence has the same mixed vector


@dataclass(frozen=True)
class LayerShape:
    """What a Brown index of a model would hold: its layers' names and width."""

    names: tuple[str, ...]
    dim: int


@dataclass(frozen=True)
class ModelProblem:
    """Why a model id cannot be shown, in one line, and whether a download would fix it (the
    model box then offers one): known from the error's type or the model's availability,
    never from the message's words."""

    why: str
    download: bool = False
