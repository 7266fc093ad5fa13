"""The engine facade: model ids in, typed results out. Used by the CLI, the app and benchmarks.

Adapters are loaded once per (model, device, dtype); encodings are kept in an LRU cache keyed
by model, text and options, so re-rendering a view never re-runs a model.
"""
from __future__ import annotations

import importlib
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Sequence

from engine.families.base import (Adapter, EngineError, LoadOptions, ModelUnavailable,
                                  UnsupportedPrediction)
from engine.registry import (ModelEntry, family_of_dir, load_registry, local_path,
                             resolve_local_dir)
from engine.result import Encoding, LogitLens, Prediction
from engine.text import MASK, TextError, WordText, to_word_text

__all__ = ["Engine", "EngineError", "ModelUnavailable", "UnsupportedPrediction", "TextError"]

MAX_SENTENCES = 64


def _family_module(family: str):
    return importlib.import_module(f"engine.families.{family}")


class Engine:
    def __init__(self, device: str = "auto", dtype: str = "float32", cache_size: int = 512):
        self.options = LoadOptions(device=device, dtype=dtype)
        self.registry = load_registry()
        self._adapters: dict[str, Adapter] = {}
        self._cache: OrderedDict[tuple, Encoding] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.RLock()

    # -- models -------------------------------------------------------------------------
    def entry(self, model_id: str) -> ModelEntry | None:
        return self.registry.get(model_id)

    def family(self, model_id: str) -> str:
        entry = self.entry(model_id)
        return entry.family if entry else family_of_dir(resolve_local_dir(model_id))

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model is already in memory (so a first use will not be slow)."""
        return model_id in self._adapters

    def adapter(self, model_id: str, progress: bool = True) -> Adapter:
        with self._lock:
            if model_id not in self._adapters:
                self._adapters[model_id] = self._load(model_id, progress)
            return self._adapters[model_id]

    def _load(self, model_id: str, progress: bool) -> Adapter:
        entry = self.entry(model_id)
        if entry is None:
            path = resolve_local_dir(model_id)
            family, gguf_file = family_of_dir(path), ""
        else:
            family, gguf_file = entry.family, entry.gguf_file
            path = local_path(entry)
            if path is None:
                from engine.fetch import fetch

                path = fetch(entry, progress=progress)
            elif not path.exists():
                raise ModelUnavailable(
                    f"{model_id} is not installed ({entry.source}); run `make install`")
        module = _family_module(family)
        return module.load(model_id, Path(path), self.options, gguf_file=gguf_file,
                           progress=progress)

    # -- encodings ----------------------------------------------------------------------
    def encode(self, model_id: str, texts: Sequence[str], pretokenized: bool = False,
               batch_size: int = 16) -> list[Encoding]:
        """Encode texts (one sentence each); cached per (model, text, options)."""
        word_texts = [to_word_text(t, pretokenized) for t in texts]
        return self.encode_words(model_id, word_texts, batch_size=batch_size)

    def encode_words(self, model_id: str, texts: Sequence[WordText],
                     batch_size: int = 16) -> list[Encoding]:
        keys = [(model_id, t.text, t.words, self.options) for t in texts]
        with self._lock:
            missing = [i for i, k in enumerate(keys) if k not in self._cache]
        if missing:
            adapter = self.adapter(model_id)
            fresh = adapter.encode([texts[i] for i in missing], batch_size=batch_size)
            with self._lock:
                for i, enc in zip(missing, fresh):
                    self._cache[keys[i]] = enc
        with self._lock:
            out = []
            for k in keys:
                self._cache.move_to_end(k)
                out.append(self._cache[k])
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return out

    # -- predictions --------------------------------------------------------------------
    def predict_masked(self, model_id: str, text: str, top_k: int = 10) -> Prediction:
        wt = to_word_text(text)
        if len(wt.mask_indices) != 1:
            raise TextError(f"put exactly one {MASK} in the text (found {len(wt.mask_indices)})")
        return self.adapter(model_id).predict_masked(wt, top_k=top_k)

    def predict_next(self, model_id: str, text: str, top_k: int = 10) -> Prediction:
        return self.adapter(model_id).predict_next(to_word_text(text), top_k=top_k)

    def predict_previous(self, model_id: str, text: str, top_k: int = 10) -> Prediction:
        return self.adapter(model_id).predict_previous(to_word_text(text), top_k=top_k)

    def logit_lens(self, model_id: str, text: str) -> LogitLens:
        return self.adapter(model_id).logit_lens(to_word_text(text))
