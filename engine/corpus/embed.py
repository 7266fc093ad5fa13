"""Sentences -> occurrence rows: one row per (word, layer), the columns the index stores.

The same function runs in the local engine and in every Ray actor, so both write the same
rows (the Ray path's test compares them to 1e-5)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.families.base import check_layers, parse_layers
from engine.text import split_words

COLUMNS = ("sentence_id", "position", "layer", "word", "key", "vector")


def chosen_layers(spec: str | Sequence[int] | None, n_layers: int) -> list[int]:
    """The layers an index stores, ascending: "all" (or None) -> every layer 0..n_layers-1
    (0 = the embedding layer); "0,3,6" or a sequence -> those, checked against the model."""
    layers = parse_layers(spec) if isinstance(spec, str) else spec
    if layers is None:
        return list(range(n_layers))
    layers = [int(x) for x in layers]
    if not layers:
        raise EngineError("--layers names no layer")
    check_layers(layers, n_layers - 1)
    return sorted(set(layers))


def embed_rows(engine, model_id: str, sentence_ids: Sequence[int], texts: Sequence[str],
               layers: Sequence[int], pool: str = "mean", batch_size: int = 32,
               vector_dtype=np.float16) -> dict:
    """Column arrays for every word of every text at every chosen layer; vectors float16
    (what the index stores; float32 to compare paths before that rounding).
    Texts go to the engine shortest first (less padding), rows come out in input order."""
    wts = [split_words(t) for t in texts]
    order = sorted(range(len(wts)), key=lambda i: len(wts[i].text))
    layers = list(layers)
    try:
        vecs = engine.word_vectors(model_id, [wts[i] for i in order], batch_size=batch_size,
                                   layers=layers, pool=pool)
    except EngineError as err:
        raise _name_the_sentence(engine, model_id, sentence_ids, wts, err) from None
    per: list = [None] * len(wts)                              # [chosen layers, W, D] each
    for i, v in zip(order, vecs):
        per[i] = v
    # Columns built with whole-array operations: row by row in Python, with numpy's float16
    # cast, this took a fifth of a Brown build's time beside the model (cProfile, 2,048
    # sentences: 3.5 s of 16.6); the words too are gathered from one array per block (a
    # list of every (word, layer) row, then a list per layer table, was 1.7 s of 14)
    n_layers = len(layers)
    counts = np.asarray([len(wt.words) for wt in wts], np.int64)
    block = np.repeat(counts, n_layers)                        # rows per (sentence, layer)
    total = int(block.sum())
    dim = per[0].shape[-1] if per else 0
    position = np.arange(total) - np.repeat(np.cumsum(block) - block, block)
    first_word = np.cumsum(counts) - counts                    # of each sentence, in `words`
    which = position + np.repeat(np.repeat(first_word, n_layers), block)
    words = np.array([w for wt in wts for w in wt.words], dtype=object)
    keys = np.array([w.lower() for w in words], dtype=object)
    return {"sentence_id": np.repeat(np.asarray(sentence_ids, np.int64), counts * n_layers),
            "position": position.astype(np.int32),
            "layer": np.repeat(np.tile(np.asarray(layers, np.int16), len(wts)), block),
            "word": words[which], "key": keys[which],
            "vector": _stack(per, dim, np.dtype(vector_dtype))}


def _name_the_sentence(engine, model_id: str, sentence_ids, wts, err: EngineError
                       ) -> EngineError:
    """A batch the model cannot take ("this model's tokenizer drops the word ..."): the first
    sentence of it that fails alone, by its number in the corpus, so a user can find the line.
    Only on this failure path does each sentence go to the model on its own."""
    for sid, wt in zip(sentence_ids, wts):
        try:
            engine.word_vectors(model_id, [wt], batch_size=1)
        except EngineError as own:
            # the id ctxlens neighbours and the exports give (from 0; blank lines not counted)
            return EngineError(f"corpus sentence id {sid:,} ({wt.text[:60]!r}): {own}")
    return err


def _stack(per: list, dim: int, dtype: np.dtype) -> np.ndarray:
    """Every text's [layers, W, D] as rows [sum of layers x W, D] of `dtype`: cast piece by
    piece, then joined (joining the float32 pieces first moved twice the bytes)."""
    if not per:
        return np.zeros((0, dim), dtype)
    if dtype == np.float16:
        import torch

        return torch.cat([torch.from_numpy(np.ascontiguousarray(v)).reshape(-1, dim)
                          .to(torch.float16) for v in per]).numpy()
    return np.concatenate([v.reshape(-1, dim) for v in per]).astype(dtype, copy=False)
