"""The engine facade: model ids in, typed results out. Used by the CLI, the app and benchmarks.

Adapters are loaded once per (model, device, dtype). Computed results live in one cache the
Engine owns (engine/cache.py): encodings keyed by model, text and options, projections by their
input, and the app's analyses by what they were computed from, so re-rendering a view never
re-runs a model or a fit. The app's Engine also keeps encodings on disk (EncodingStore), so a
restart does not run the models again for texts they have seen.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from engine.cache import EncodingStore, ResultCache
from engine.components.engine_parts import PartsMixin
from engine.attribution.engine_why import WhyMixin
from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families import family
from engine.families.base import Adapter, LoadOptions, Pooled, QueryKeyed, cpu_only
from engine.registry import ModelEntry, load_registry, local_path, resolve
from engine.result import Encoding, LogitLens, Prediction
from engine.text import TextError, WordText, to_word_text

__all__ = ["Engine", "EngineError", "ModelUnavailable", "UnsupportedPrediction", "TextError"]

# bump when what an Encoding holds, or how it is computed, changes in a way the engine's own
# source digest would not show (it covers engine/families, api, result, text and traced)
ENCODING_FORMAT = "enc-1"
ENGINE_ROOT = Path(__file__).resolve().parent


def _family_module(name: str):
    return family(name).module_object()


def encoding_store() -> EncodingStore | None:
    """The app's store of encodings: cache_dir()/encodings, at most CTXLENS_ENCODING_CACHE_MB
    (default 256; 0 keeps nothing on disk)."""
    from engine.registry import cache_dir

    raw = os.environ.get("CTXLENS_ENCODING_CACHE_MB", "256").strip()
    try:
        mb = float(raw)
    except ValueError:
        raise EngineError(f"CTXLENS_ENCODING_CACHE_MB={raw!r} is not a number of megabytes")
    return EncodingStore(cache_dir() / "encodings", int(mb * 2**20)) if mb > 0 else None


# where a model of registry.catalogue can be used without a download
USABLE = ("bundled", "installed", "folder", "in the Hugging Face cache")


class Engine(WhyMixin, PartsMixin):
    def __init__(self, device: str = "auto", dtype: str = "float32", cache_size: int = 512,
                 traced: bool = False, store: EncodingStore | None = None,
                 compile: bool = False, library_bars: bool = True):
        """`traced`: hidden states without attention maps come from a traced graph of the
        model (its family's tracer: engine/families/hf/traced.py), built once and cached, where its family allows;
        batch commands ask for it, so a fresh process need not import transformers.
        `store`: encodings are also kept on disk there (the app passes one; batch commands do
        not, as a corpus would fill it), for models whose files are all on this machine.
        `compile`: word_vectors runs transformers through torch.compile (batch work on a GPU).
        `library_bars`: transformers' own loading bars may show (the app and the CLI show
        their own progress instead).
        """
        self.options = LoadOptions(device=device, dtype=dtype, compile=compile,
                                   library_bars=library_bars)
        self.registry = load_registry()
        self._adapters: dict[str, Adapter] = {}
        self.traced = traced
        self._traced: dict[str, Any] = {}      # model id -> TracedEncoder, or None: none here
        # the one cache of computed results (engine/cache.py): encodings, projections, and the
        # app's analyses through cached()
        self.results = ResultCache(cache_size)
        self.store = store
        self._identities: dict[str, tuple | None] = {}   # model id -> its key in the store
        self._resolved: dict[str, ModelEntry] = {}   # hub ids and folders, once read
        self._checked: set[tuple[str, str]] = set()   # (model, folder) that may load
        self._lock = threading.RLock()      # guards adapter loading

    # -- models -------------------------------------------------------------------------
    def entry(self, model_id: str) -> ModelEntry | None:
        return self.registry.get(model_id)

    def resolved(self, model_id: str) -> ModelEntry:
        """The entry of any model id (registry, folder or hub id: engine.registry.resolve); a
        failure is not kept, so a model that needed a download resolves once it is cached."""
        if model_id in self.registry:
            return self.registry[model_id]
        with self._lock:
            if model_id not in self._resolved:
                self._resolved[model_id] = resolve(model_id, self.registry)
            return self._resolved[model_id]

    def family_name(self, model_id: str) -> str:
        return self.resolved(model_id).family

    def is_loaded(self, model_id: str) -> bool:
        """Whether the model is already in memory (so a first use will not be slow)."""
        return model_id in self._adapters

    def load(self, model_id: str, progress: bool = True) -> None:
        """Load the model now, so that its first use is not slow (nothing if it is loaded)."""
        self.adapter(model_id, progress)

    def adapter(self, model_id: str, progress: bool = True) -> Adapter:
        with self._lock:
            if model_id not in self._adapters:
                self._adapters[model_id] = self._load(model_id, progress)
            return self._adapters[model_id]

    def _load(self, model_id: str, progress: bool) -> Adapter:
        entry = self.resolved(model_id)
        if entry.base:
            # an overlay (e.g. an MLM head trained on a bundled encoder): the base model's
            # files plus the overlay's own tensors
            base = self.entry(entry.base)
            if base is None or base.family != entry.family:
                raise ModelUnavailable(f"{model_id} overlays {entry.base!r}, which is not a "
                                       f"{entry.family} model in the registry")
            base_dir, overlay = self._files(base, progress), self._files(entry, progress)
            self._check_loadable(model_id, base_dir, "base")
            self._check_loadable(model_id, overlay, "overlay")
            return _family_module(entry.family).load(
                model_id, base_dir, self.options, progress=progress, overlay=overlay)
        return self._load_dir(model_id, entry.family, self._files(entry, progress),
                              entry.gguf_file, progress)

    def _load_dir(self, model_id: str, family_name: str, path: Path, gguf_file: str,
                  progress: bool) -> Adapter:
        """A family's loader on a folder; a GGUF file is converted (once, cached) first."""
        from engine import fetch

        module = _family_module(family_name)
        source = fetch.gguf_source(path, gguf_file)
        if source is None:
            self._check_loadable(model_id, path)
            return module.load(model_id, path, self.options, progress=progress)
        if not family(family_name).reads_gguf:
            raise EngineError(f"{source.name}: GGUF files hold causal LMs; load a {family_name} "
                              "model from a safetensors directory")
        convert = partial(module.convert_gguf, source.parent, source.name,
                          progress=progress and self.options.library_bars)
        path, hit = fetch.ensure_converted(model_id, source, convert, progress)
        return module.load(model_id, path, self.options, progress=progress, gguf_cache_hit=hit)

    def _check_loadable(self, model_id: str, path: Path, part: str = "model") -> None:
        """Refuse, in one line and before transformers reads anything (or a cache hashes the
        files: reading a model too big for memory to hash it takes minutes), what would run
        the checkpoint's own code (pickles), weights files that are no valid safetensors, a
        folder without a tokenizer, or weights that would not fit in the free memory. `part`:
        "model" (a folder loaded alone), "base" (an overlay's base: its weights and tokenizer)
        or "overlay" (tensors that complete a base, checked for safety and validity only).
        Header-only, so no torch import: the encoding store calls it before any model loads."""
        if (model_id, str(path)) in self._checked or not (path / "config.json").is_file():
            return
        from engine import checkpoint
        from engine.families.base import dtype_name, resolve_device

        checkpoint.check_safe(path)
        if part == "overlay":
            checkpoint.parameter_bytes(path)       # every header checked
        else:
            checkpoint.check_tokenizer(path)
            device = resolve_device(self.options.device)
            dtype = dtype_name(self.options.dtype, device)
            checkpoint.check_memory(path, dtype, device, model_id)
        self._checked.add((model_id, str(path)))

    def _sources(self, model_id: str, progress: bool) -> list[Path]:
        """The folders a model is read from: its own, and its base's for an overlay."""
        entry = self.resolved(model_id)
        base = [self._files(self.entry(entry.base), progress)] if entry.base else []
        folders = base + [self._files(entry, progress)]
        for folder, part in zip(folders, ["base", "overlay"] if base else ["model"]):
            self._check_loadable(model_id, folder, part)
        return folders

    def hidden_state_encoder(self, model_id: str, progress: bool = True,
                             layers: Sequence[int] | None = None):
        """What encodes a model's texts when no attention maps are asked: with `traced`, the
        model's cached graph (traced now, once, where there is none yet and the family and
        load options allow), else the model itself. The graph runs every block, so layers
        that stop below the top go to the model, which skips the blocks above them."""
        if not self.traced:
            return self.adapter(model_id, progress)
        with self._lock:
            if model_id not in self._traced:
                self._traced[model_id] = self._load_traced(model_id, progress)
            graph = self._traced[model_id]
        if graph is None or (layers is not None and max(layers, default=0) < graph.n_layers):
            return self.adapter(model_id, progress)
        return graph

    def _load_traced(self, model_id: str, progress: bool):
        from engine.fetch import tree_digest
        from engine.registry import cache_dir

        family_name = self.family_name(model_id)
        tracer = family(family_name).tracer
        if not tracer:
            return None
        traced = importlib.import_module(tracer)
        if not traced.usable(self.options.device, self.options.dtype):
            return None
        key = tree_digest(self._sources(model_id, progress), traced.key_parts())
        folder = traced.graph_dir(model_id, key, cache_dir())
        graph = traced.load(folder, model_id, family_name)
        # none yet, unless a build on these files refused it: then the model runs
        if graph is None and not traced.refused(folder):
            graph, why = traced.build(self.adapter(model_id, progress), folder, progress)
            if graph is None and progress:
                print(f"ctxlens: {model_id} runs untraced: {why}", file=sys.stderr, flush=True)
        return graph

    def _files(self, entry: ModelEntry, progress: bool) -> Path:
        path = local_path(entry)
        if path is None and entry.hub:
            from engine import hub

            # the download is checked against the memory the model takes as this engine loads it
            return hub.snapshot(entry.hub, progress=progress, device=self.options.device,
                                dtype=self.options.dtype)
        if path is None:
            from engine.fetch import fetch

            return Path(fetch(entry, progress=progress))
        if not path.exists():
            raise ModelUnavailable(f"{entry.id} is not installed ({entry.source}); "
                                   "run `make install`")
        return Path(path)

    # -- encodings ----------------------------------------------------------------------
    def encode(self, model_id: str, texts: Sequence[str], pretokenized: bool = False,
               batch_size: int = 16, attentions: bool = False,
               layers: Sequence[int] | None = None) -> list[Encoding]:
        """Encode texts (one sentence each); cached per (model, text, options). Attention maps
        only with `attentions` (they need the slower eager attention path); hidden states of
        `layers` only when given."""
        word_texts = [to_word_text(t, pretokenized) for t in texts]
        return self.encode_words(model_id, word_texts, batch_size=batch_size,
                                 attentions=attentions, layers=layers)

    def encode_words(self, model_id: str, texts: Sequence[WordText],
                     batch_size: int = 16, attentions: bool = False,
                     layers: Sequence[int] | None = None) -> list[Encoding]:
        """Encodings of texts already split into words; with `layers`, hidden states of those
        layers only (a transformer then skips the blocks above the highest)."""
        layers = None if layers is None else tuple(int(i) for i in layers)
        keys = [self._encoding_key(model_id, t, layers) for t in texts]
        out = [self.results.get(k) for k in keys]
        # an encoding made without maps serves a request for them only if the model has none
        want_maps = attentions and "attention" in self.resolved(model_id).capabilities

        def serves(enc) -> bool:
            return enc is not None and not (want_maps and enc.attentions is None)

        missing = [i for i, enc in enumerate(out) if not serves(enc)]
        identity = self._store_identity(model_id) if missing else None
        if identity is not None:
            for i in missing:
                enc = self.store.get(identity + keys[i][2:], texts[i].text, texts[i].words)
                if serves(enc):
                    out[i] = self.results.put(keys[i], enc)
            missing = [i for i in missing if not serves(out[i])]
        if missing:
            encoder = self.adapter(model_id) if want_maps else \
                self.hidden_state_encoder(model_id, layers=layers)
            fresh = encoder.encode([texts[i] for i in missing], batch_size=batch_size,
                                   attentions=want_maps, layers=layers)
            for i, enc in zip(missing, fresh):
                out[i] = self.results.put(keys[i], enc)
                if identity is not None:
                    self.store.put(identity + keys[i][2:], enc)
        return out

    def _encoding_key(self, model_id: str, text: WordText, layers: tuple | None = None):
        """An encoding's key in the result cache; without its first two items (the kind and
        the model id), its part of the key in the store, after the model's identity."""
        return (("encoding", model_id, text.text, text.words, self.options) +
                (() if layers is None else (("layers", layers),)))

    def has_encodings(self, model_id: str, texts: Sequence[str]) -> bool:
        """Whether every text's encoding is at hand (in memory or in the store), so encoding
        them needs no model load."""
        keys = [self._encoding_key(model_id, to_word_text(t)) for t in texts]
        if all(k in self.results for k in keys):
            return True
        identity = self._store_identity(model_id)
        return identity is not None and all(
            self.store.exists(identity + k[2:]) for k in keys)

    def _store_identity(self, model_id: str) -> tuple | None:
        """What the store keys a model's encodings on: its files' contents, the libraries and
        the engine code that compute them. None (nothing kept) without a store, for a model
        that still needs a download, and where results may come from a GPU or half precision
        (those differ from CPU float32 in the last digits)."""
        if self.store is None:
            return None
        with self._lock:
            if model_id not in self._identities:
                self._identities[model_id] = self._identity(model_id)
            return self._identities[model_id]

    def _identity(self, model_id: str) -> tuple | None:
        from importlib import metadata

        from engine.fetch import tree_digest

        if self.options.dtype != "float32" or not cpu_only(self.options.device):
            return None
        try:
            entry = self.resolved(model_id)
            entries = ([self.entry(entry.base)] if entry.base else []) + [entry]
            sources = [local_path(e) if e is not None else None for e in entries]
            if any(p is None or not p.exists() for p in sources):
                return None
            for folder, part in zip(sources, ["base", "overlay"] if entry.base else ["model"]):
                self._check_loadable(model_id, folder, part)
            code = [ENGINE_ROOT / n for n in ("api.py", "result.py", "text.py")]
            code += sorted((ENGINE_ROOT / "families").rglob("*.py"))
            versions = []
            for lib in ("torch", "transformers", "tokenizers"):
                try:
                    versions.append(f"{lib}={metadata.version(lib)}")
                except metadata.PackageNotFoundError:
                    versions.append(f"{lib}=none")
            digest = tree_digest(list(sources) + code, [ENCODING_FORMAT, *versions])
        except (OSError, EngineError):
            return None
        return ("stored-encoding", digest, model_id)

    def word_vectors(self, model_id: str, texts: Sequence[WordText], batch_size: int = 16,
                     layers: Sequence[int] | None = None, pool: str = "mean") -> list:
        """Each text's word vectors [layers, words, dim] for batch work (not cached): pooled
        where the model runs when its encoder can (on a GPU only the words' vectors come
        back), else from encodings. Equal to encode_words(...)[i].word_vectors(pool)."""
        encoder = self.hidden_state_encoder(model_id, layers=layers)
        if isinstance(encoder, Pooled):
            return encoder.encode_pooled(texts, batch_size=batch_size, layers=layers,
                                         pool=pool)
        return [enc.word_vectors(pool) for enc in
                self.encode_words(model_id, texts, batch_size=batch_size, layers=layers)]

    # -- derived results ----------------------------------------------------------------
    def cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A derived result under `key` (what was computed, from what), computed once."""
        return self.results.get_or_compute(key, compute)

    def has_result(self, key: tuple) -> bool:
        """Whether cached() holds `key` now (the app shows a spinner only for a miss)."""
        return key in self.results

    def forget(self, match: Callable[[tuple], bool]) -> int:
        """Drop the derived results whose keys `match` (those read from a deleted corpus
        index), leaving every other; returns how many went."""
        return self.results.drop_where(match)

    def project(self, vectors: np.ndarray, method: str = "pca", seed: int = 0, dims: int = 2):
        """projection.project, cached by the vectors' bytes: projections are seeded, so the
        same input always gives the same output, and a repeat costs a hash, not a fit."""
        from engine.analysis import projection

        vectors = np.ascontiguousarray(vectors)
        key = ("projection", hashlib.blake2b(vectors.tobytes(), digest_size=16).hexdigest(),
               vectors.shape, str(vectors.dtype), method, seed, dims)
        return self.cached(key, lambda: projection.project(vectors, method=method, seed=seed,
                                                           dims=dims))

    # -- predictions --------------------------------------------------------------------
    def predict_masked(self, model_id: str, text: str, top_k: int = 10,
                       sides: str = "both", rescore: bool = False, ablate: str | None = None,
                       ablate_mode: str = "zero") -> Prediction:
        """Fill the one [MASK]: a BERT's MLM head, a GPT's re-ranked left-context words, or
        ELMo's forward x backward LM; sides="left" reads only the words before the blank.
        rescore (masked LMs): the head's likeliest words re-ranked by the pseudo-log-likelihood
        of the sentence each makes. ablate: the parts knocked out meanwhile (ablated())."""
        wt = to_word_text(text)
        wt.one_mask()
        if rescore and "masked_lm" not in self.resolved(model_id).capabilities:
            raise UnsupportedPrediction(
                f"{model_id}: re-scoring by pseudo-log-likelihood needs a masked LM; models "
                "that have one: " + ", ".join(self.models_that("masked_lm")))
        extra = {"rescore": True} if rescore else {}
        # outside the try: a refused ablation names the models that can ablate, not fill
        knocked = self.ablated(model_id, ablate, ablate_mode)
        try:
            with knocked:
                return self.adapter(model_id).predict_masked(wt, top_k=top_k, sides=sides,
                                                             **extra)
        except UnsupportedPrediction as exc:
            # the adapter knows why (no MLM head, no LM softmax); the engine knows who can
            # (the masked LMs first)
            masked = self.models_that("masked_lm")
            fillers = masked + [m for m in self.models_that("fill_blank") if m not in masked]
            raise UnsupportedPrediction(f"{model_id}: {exc}; models that can: "
                                        + ", ".join(fillers)) from exc

    def models_that(self, capability: str) -> list[str]:
        """Models whose entries list `capability` (none loads): the registry's in its order,
        then the user's own folders and cached hub models here (registry.catalogue)."""
        from engine.registry import catalogue

        return [e.id for e, where in catalogue(self.registry)
                if (e.id in self.registry or where in USABLE) and capability in e.capabilities]

    def predict_next(self, model_id: str, text: str, top_k: int = 10,
                     ablate: str | None = None, ablate_mode: str = "zero") -> Prediction:
        return self._lm_prediction("next_word", model_id, text, top_k, ablate, ablate_mode)

    def predict_previous(self, model_id: str, text: str, top_k: int = 10,
                         ablate: str | None = None, ablate_mode: str = "zero") -> Prediction:
        return self._lm_prediction("previous_word", model_id, text, top_k, ablate, ablate_mode)

    def _lm_prediction(self, capability: str, model_id: str, text: str, top_k: int,
                       ablate: str | None = None, ablate_mode: str = "zero") -> Prediction:
        adapter = self.adapter(model_id)
        which = "next" if capability == "next_word" else "previous"
        # outside the try: a refused ablation names the models that can ablate
        knocked = self.ablated(model_id, ablate, ablate_mode)
        try:
            predict = getattr(adapter, f"predict_{which}", None)
            if predict is None:
                raise UnsupportedPrediction(f"{family(self.family_name(model_id)).label} models "
                                            f"cannot predict the {which} word")
            with knocked:
                return predict(to_word_text(text), top_k=top_k)
        except UnsupportedPrediction as exc:
            # the adapter knows why; the engine knows who can
            raise UnsupportedPrediction(f"{model_id}: {exc}; models that can: "
                                        + ", ".join(self.models_that(capability))) from exc

    def logit_lens(self, model_id: str, text: str) -> LogitLens:
        return self.adapter(model_id).logit_lens(to_word_text(text))

    def query_key(self, model_id: str, text: str, layer: int):
        """Query and key vectors of one attention layer (engine.result.QueryKey), cached; an
        architecture whose scores are more than query·key is refused before it loads."""
        why = self.resolved(model_id).cannot.get("query_key")
        if why:
            raise UnsupportedPrediction(f"{model_id}: {why}")
        adapter = self.adapter(model_id)
        if not isinstance(adapter, QueryKeyed):
            raise UnsupportedPrediction(f"{model_id} has no attention, so no query and key "
                                        "vectors")
        return self.cached(("query_key", model_id, text, layer),
                           lambda: adapter.query_key(to_word_text(text), layer))
