"""A small deterministic stand-in for engine.api.Engine, for fast app tests.

Its vectors are built so that context matters more in higher layers: layer l of a word is its
own random embedding plus l/L times (the mean embedding of its sentence + layer noise), so
different-context uses of a word drift apart layer by layer, as in the real models. It runs through the real Encoding,
Prediction and LogitLens dataclasses, so shape errors surface here as they would with a model.
"""
from __future__ import annotations

import hashlib

import numpy as np

from engine.families.base import ModelInfo, UnsupportedPrediction
from engine.registry import ModelEntry
from engine.result import Candidate, Encoding, LogitLens, Prediction
from engine.text import MASK, TextError, to_word_text

DIM = 16
SPECS = {  # id: (family, layers, heads, masked-LM, next word, previous word)
    "fake-gpt": ("gpt", 3, 2, False, True, False),
    "fake-bert": ("bert", 3, 2, False, False, False),
    "fake-bert-mlm": ("bert", 2, 2, True, False, False),
    "fake-elmo": ("elmo", 2, 0, False, True, True),
}
VOCAB = ("the", "a", "cheese", "computer", "river", "money", "mouse", ".", "is", "runs")


def _vec(word: str) -> np.ndarray:
    seed = int(hashlib.md5(word.lower().encode()).hexdigest()[:8], 16)
    return np.random.default_rng(seed).normal(size=DIM)


class FakeAdapter:
    def __init__(self, model_id: str):
        fam, layers, heads, mlm, nxt, prev = SPECS[model_id]
        self.info = ModelInfo(model_id, fam, layers, heads, DIM, has_masked_lm=mlm,
                              has_next_word=nxt, has_previous_word=prev,
                              has_logit_lens=fam == "gpt")

    def encode(self, texts, batch_size=16):
        return [self._encode(t) for t in texts]

    def _encode(self, wt) -> Encoding:
        fam, layers = self.info.family, self.info.n_layers
        special = fam == "bert"
        words = list(wt.words)
        tokens = (["[CLS]"] if special else []) + words + (["[SEP]"] if special else [])
        t2w = np.array(([-1] if special else []) + list(range(len(words)))
                       + ([-1] if special else []))
        base = np.stack([_vec(t) for t in tokens])
        context = base.mean(axis=0)
        # each layer also gets its own context-dependent noise, so layers differ in shape
        noise = np.random.default_rng(len(wt.text)).normal(size=(layers + 1, *base.shape))
        hs = np.stack([base + (l / layers) * (3 * context + noise[l]) for l in range(layers + 1)])
        att = None
        if self.info.n_heads:
            rng = np.random.default_rng(len(wt.text))
            a = rng.random((layers, self.info.n_heads, len(tokens), len(tokens)))
            if fam == "gpt":
                a = np.tril(a)
            att = (a / a.sum(-1, keepdims=True)).astype(np.float32)
        return Encoding(self.info.model_id, fam, wt.text, tuple(words), tuple(tokens), t2w,
                        hs.astype(np.float32), att,
                        tuple(f"layer {i}" for i in range(layers + 1)))

    def _prediction(self, kind: str, context: str, top_k: int) -> Prediction:
        rng = np.random.default_rng(len(context))
        p = np.sort(rng.dirichlet(np.ones(len(VOCAB))))[::-1][:top_k]
        return Prediction(self.info.model_id, kind, context,
                          tuple(Candidate(w, float(x)) for w, x in zip(VOCAB, p)))

    def predict_masked(self, text, top_k=10):
        if not self.info.has_masked_lm:
            raise UnsupportedPrediction(f"{self.info.model_id} has no masked-LM head")
        return self._prediction("masked", text.text, top_k)

    def predict_next(self, text, top_k=10):
        if not self.info.has_next_word:
            raise UnsupportedPrediction(f"{self.info.model_id} cannot predict the next word")
        return self._prediction("next", text.text, top_k)

    def predict_previous(self, text, top_k=10):
        if not self.info.has_previous_word:
            raise UnsupportedPrediction(f"{self.info.model_id} has no backward LM")
        return self._prediction("previous", text.text, top_k)

    def logit_lens(self, text, top_k=1):
        n = self.info.n_layers + 1
        probs = np.linspace(0.1, 0.9, n)[:, None] * np.ones((1, len(text.words)))
        tops = tuple(tuple(VOCAB[(i + j) % len(VOCAB)] for j in range(len(text.words)))
                     for i in range(n))
        return LogitLens(self.info.model_id, text.words, tops, probs.astype(np.float32),
                         tuple(f"layer {i}" for i in range(n)))


class FakeEngine:
    def __init__(self):
        self.registry = {m: ModelEntry(id=m, family=s[0], name=m, licence="-", size="tiny",
                                       bundled=True, path="models", default=m != "fake-bert-mlm")
                         for m, s in SPECS.items()}
        self._adapters: dict[str, FakeAdapter] = {}
        self.encode_calls = 0

    def family(self, model_id):
        return SPECS[model_id][0]

    def adapter(self, model_id, progress=True):
        return self._adapters.setdefault(model_id, FakeAdapter(model_id))

    def encode(self, model_id, texts, pretokenized=False, batch_size=16):
        self.encode_calls += 1
        return self.adapter(model_id).encode([to_word_text(t) for t in texts])

    def predict_masked(self, model_id, text, top_k=10):
        wt = to_word_text(text)
        if len(wt.mask_indices) != 1:
            raise TextError(f"put exactly one {MASK} in the text")
        return self.adapter(model_id).predict_masked(wt, top_k)

    def predict_next(self, model_id, text, top_k=10):
        return self.adapter(model_id).predict_next(to_word_text(text), top_k)

    def predict_previous(self, model_id, text, top_k=10):
        return self.adapter(model_id).predict_previous(to_word_text(text), top_k)

    def logit_lens(self, model_id, text):
        return self.adapter(model_id).logit_lens(to_word_text(text))
