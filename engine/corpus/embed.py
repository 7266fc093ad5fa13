"""Sentences -> occurrence rows: one row per (word, layer), the columns the index stores.

The same function runs in the local engine and in every Ray actor, so both write the same
rows (the Ray path's test compares them to 1e-5)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.text import split_words

COLUMNS = ("sentence_id", "position", "layer", "word", "key", "vector")


def parse_layers(spec: str | Sequence[int] | None, n_layers: int) -> list[int]:
    """"all" (or None) -> every layer 0..n_layers-1 (0 = the embedding layer); "0,3,6" -> those."""
    if spec is None or spec == "all":
        return list(range(n_layers))
    if isinstance(spec, str):
        try:
            layers = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise EngineError(f"--layers takes 'all' or numbers like 0,3,6 (got {spec!r})"
                              ) from None
    else:
        layers = [int(x) for x in spec]
    bad = [x for x in layers if not 0 <= x < n_layers]
    if not layers or bad:
        raise EngineError(f"layers must be between 0 and {n_layers - 1} for this model "
                          f"(got {spec})")
    return sorted(set(layers))


def embed_rows(engine, model_id: str, sentence_ids: Sequence[int], texts: Sequence[str],
               layers: Sequence[int], pool: str = "mean", batch_size: int = 32,
               vector_dtype=np.float16) -> dict:
    """Column arrays for every word of every text at every chosen layer; vectors float16
    (what the index stores; float32 to compare paths before that rounding).
    Texts go to the engine shortest first (less padding), rows come out in input order."""
    wts = [split_words(t) for t in texts]
    order = sorted(range(len(wts)), key=lambda i: len(wts[i].text))
    encs = engine.encode_words(model_id, [wts[i] for i in order], batch_size=batch_size)
    by_input = [None] * len(wts)
    for i, enc in zip(order, encs):
        by_input[i] = enc
    sid, pos, lay, words, vecs = [], [], [], [], []
    layers = list(layers)
    for s, wt, enc in zip(sentence_ids, wts, by_input):
        wv = enc.word_vectors(pool)[layers]                    # [chosen layers, W, D]
        n_words = wv.shape[1]
        for li, layer in enumerate(layers):
            sid += [s] * n_words
            pos += range(n_words)
            lay += [layer] * n_words
            words += list(wt.words)
            vecs.append(wv[li])
    dim = vecs[0].shape[1] if vecs else 0
    return {"sentence_id": np.asarray(sid, np.int64), "position": np.asarray(pos, np.int32),
            "layer": np.asarray(lay, np.int16), "word": words,
            "key": [w.lower() for w in words],
            "vector": (np.concatenate(vecs).astype(vector_dtype) if vecs
                       else np.zeros((0, dim), vector_dtype))}
