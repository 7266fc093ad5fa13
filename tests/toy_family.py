"""A model family that exists only in tests: proof that adding a family is one module plus one
row in engine/families/__init__.py, with no edit in app/ or the engine."""
from __future__ import annotations

import zlib

import numpy as np

from engine.families import Family, Gives
from engine.families.base import ModelInfo
from engine.result import Encoding

FAMILY = Family("toy", "Toy", __name__, frozenset({"hidden_states"}))
LAYERS = 2
DIM = 4


def _vector(word: str, layer: int, position: int) -> list[float]:
    rng = np.random.default_rng(zlib.crc32(word.lower().encode()) + 7 * layer)
    return (rng.normal(size=DIM) + 0.3 * layer * position).tolist()


class ToyAdapter:
    """Word vectors from a hash of the word, shifted by position at higher layers: enough to
    exercise every view without any model code."""

    def __init__(self, model_id: str):
        self.info = ModelInfo(model_id=model_id, family="toy", n_layers=LAYERS, n_heads=0,
                              dim=DIM)

    def encode(self, texts, batch_size: int = 16, attentions: bool = False, layers=None):
        out = []
        for t in texts:
            n = len(t.words)
            hs = np.array([[_vector(w, layer, i) for i, w in enumerate(t.words)]
                           for layer in (range(LAYERS + 1) if layers is None else layers)],
                          np.float32)
            out.append(Encoding(model_id=self.info.model_id, family="toy", text=t.text,
                                words=tuple(t.words), tokens=tuple(t.words),
                                token_to_word=np.arange(n), hidden_states=hs))
        return out


def claims_dir(path) -> bool:
    """A local folder of a toy model holds toy.json."""
    return (path / "toy.json").exists()


def gives_of_dir(path) -> Gives:
    return Gives()          # its encoder's vectors, no head


def load(model_id, path, options, progress=True):
    return ToyAdapter(model_id)
