"""The ELMo Adapter: an AllenNLP/bilm-tf biLM behind the engine's adapter protocol.

Interactive runs are stateless: every call starts the LSTMs from zero states, so a sentence
gets the same vectors whenever and with whatever batch mates it is encoded (AllenNLP's
stateful mode is available through ElmoBiLm.forward(state=...) for the reference protocol).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from engine.budget import Anatomy
from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families.base import (LoadOptions, ModelInfo, check_layers, resolve_device,
                                  resolve_dtype)
from engine.families.elmo.chars import batch_char_ids
from engine.families.elmo.mix import ScalarMix, mix_weights, scalar_mix
from engine.families.elmo.modules import ElmoBiLm, ElmoOptions
from engine.families.elmo.weights import (Softmax, load_allennlp, load_softmax, save_allennlp,
                                          save_softmax)
from engine.result import Candidate, Encoding, LogitLens, Prediction
from engine.text import WordText

__all__ = ["load", "ElmoAdapter", "ElmoBiLm", "ElmoOptions", "ScalarMix", "scalar_mix",
           "mix_weights", "save_allennlp", "save_softmax", "load_allennlp", "Softmax"]

PROGRESS_SENTENCES = 64  # show a progress bar when encoding more sentences than this


def layer_names(n_layers: int) -> tuple[str, ...]:
    return ("char CNN", *(f"biLSTM {k + 1}" for k in range(n_layers)))


class ElmoAdapter:
    def __init__(self, model_id: str, bilm: ElmoBiLm, softmax: Softmax | None = None,
                 device: str = "cpu", dtype: torch.dtype = torch.float32,
                 progress: bool = True):
        o = bilm.options
        self.bilm = bilm.to(device=device, dtype=dtype).eval()
        self.softmax = softmax
        self.device, self.dtype, self.progress = device, dtype, progress
        self.info = ModelInfo(model_id=model_id, family="elmo", n_layers=o.n_layers, n_heads=0,
                              dim=2 * o.proj_dim, device=device,
                              dtype=str(dtype).removeprefix("torch."))
        self.layer_names = layer_names(o.n_layers)

    def anatomy(self) -> Anatomy:
        """What a pass costs (engine/budget.py): every weight but the character embedding
        table multiplies at each token (the char CNN's filters at its characters, counted per
        token as an upper bound); an LSTM has no attention, so no T² term."""
        table = self.bilm.char_cnn.char_embedding.weight.numel()
        weights = sum(p.numel() for p in self.bilm.parameters()) - table
        return Anatomy(weights=max(weights, 1), n_layers=self.info.n_layers, width=0,
                       device=self.device)

    def count_tokens(self, text: WordText) -> int:
        return len(text.words) + 2          # the words between <S> and </S>

    def check_explained(self, kind: str) -> None:
        """Its two LMs explain every kind: the next word, the previous one and a blank."""

    def objective(self, text: WordText, kind: str, blank: int | None, words: Sequence[str],
                  contrast: str | None):
        """The `kind` prediction as a function of the words' token embeddings
        (base.Explained; the contrast is words[1])."""
        from engine.families.elmo import objective

        return objective.objective(self, text, kind, blank, list(words))

    # -- hidden states ------------------------------------------------------------------
    @torch.inference_mode()
    def layers(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One batch, zero initial states: per sentence [L+1, words, 2*proj] float32,
        sentence-boundary tokens <S> and </S> removed."""
        ids = batch_char_ids(sentences, self.bilm.options.max_chars)
        out = self.bilm(torch.from_numpy(ids).to(self.device))
        layers = out.layers.float().cpu().numpy()                       # (L+1, B, T+2, 2P)
        return [layers[:, b, 1:1 + len(s)] for b, s in enumerate(sentences)]

    def encode(self, texts: Sequence[WordText], batch_size: int = 16,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[Encoding]:
        """`attentions` is accepted and ignored: a biLSTM has no attention maps. With `layers`,
        only those layers are kept (the biLM is run whole: its layers are two LSTMs deep)."""
        from tqdm import tqdm

        check_layers(layers, len(self.layer_names) - 1)
        # batches of similar length waste less time on padding; the order is restored below
        order = sorted(range(len(texts)), key=lambda i: len(texts[i].words))
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        show = self.progress and len(texts) > PROGRESS_SENTENCES
        hidden: dict[int, np.ndarray] = {}
        for batch in tqdm(batches, desc="ELMo", unit="batch", disable=not show):
            hidden.update(zip(batch, self.layers([texts[i].words for i in batch])))
        if layers is not None:
            keep = list(layers)
            return [self._encoding(t, hidden[i][keep], tuple(self.layer_names[j] for j in keep))
                    for i, t in enumerate(texts)]
        return [self._encoding(t, hidden[i]) for i, t in enumerate(texts)]

    def _encoding(self, text: WordText, hidden_states: np.ndarray,
                  names: tuple[str, ...] | None = None) -> Encoding:
        n = len(text.words)
        return Encoding(model_id=self.info.model_id, family="elmo", text=text.text,
                        words=text.words, tokens=text.words,
                        token_to_word=np.arange(n, dtype=np.int64),
                        hidden_states=np.ascontiguousarray(hidden_states, dtype=np.float32),
                        attentions=None, layer_names=names or self.layer_names)

    # -- predictions --------------------------------------------------------------------
    def predict_next(self, text: WordText, top_k: int = 10) -> Prediction:
        """The forward LM's top layer at the last word scores the word that follows."""
        top = self.layers([text.words])[0][-1]                          # (words, 2P)
        return self._predict(text, top[-1, :self.bilm.options.proj_dim], "next", top_k)

    def predict_previous(self, text: WordText, top_k: int = 10) -> Prediction:
        """The backward LM's top layer at the first word scores the word that precedes."""
        top = self.layers([text.words])[0][-1]
        return self._predict(text, top[0, self.bilm.options.proj_dim:], "previous", top_k)

    def _log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """log softmax over the LM vocabulary for top-layer states h [..., P] (float64)."""
        if self.softmax is None:
            raise UnsupportedPrediction("this ELMo checkpoint has no LM softmax")
        weight, bias, _ = self.softmax
        # bilm-tf shares one softmax between the forward and the backward LM
        return torch.log_softmax(h.double() @ weight.double().T + bias.double(), dim=-1)

    def _predict(self, text: WordText, h: np.ndarray, kind: str, top_k: int) -> Prediction:
        return self._top(text, self._log_probs(torch.from_numpy(h)), kind, top_k,
                         "forward LM" if kind == "next" else "backward LM")

    def _top(self, text: WordText, logp: torch.Tensor, kind: str, top_k: int,
             method: str) -> Prediction:
        vocab = self.softmax.vocab
        best = torch.topk(logp.exp(), min(top_k, len(vocab)))
        # excluded markers have probability 0: never listed, even when top_k asks for more
        candidates = tuple(Candidate(vocab[i], float(p))
                           for p, i in zip(best.values.tolist(), best.indices.tolist()) if p > 0)
        if any(c.token == "<UNK>" for c in candidates):
            # a small LM's likeliest "word" is often its unknown-word marker: say what it is
            method += f"; <UNK> is any word outside its {len(vocab):,}-word vocabulary"
        return Prediction(self.info.model_id, kind, text.text, candidates, method=method)

    # bilm-tf's vocabulary markers: never a word that fills a blank inside a sentence
    NOT_A_WORD = ("<S>", "</S>", "<UNK>")

    @torch.inference_mode()
    def predict_masked(self, text: WordText, top_k: int = 10, sides: str = "both") -> Prediction:
        """Fill the one [MASK] from both sides, as a biLM honestly can: the forward LM reads the
        words left of the blank, the backward LM those right of it, and their two distributions
        over the LM vocabulary are multiplied and renormalised (a product of experts,
        P(w | left, right) ∝ P_fwd(w | left) · P_bwd(w | right)); sides="left" uses the
        forward LM alone. Neither LM ever sees the blank itself. <S>, </S> and <UNK> are not
        candidates."""
        if self.softmax is None:
            raise UnsupportedPrediction("this ELMo checkpoint has no LM softmax, so it cannot "
                                        "fill a blank")
        i = text.one_mask()
        ids = batch_char_ids([text.words], self.bilm.options.max_chars)   # <S> w_0 .. </S>
        top = self.bilm(torch.from_numpy(ids).to(self.device)).layers[-1][0].float().cpu()
        P = self.bilm.options.proj_dim
        # row k holds token k-1's states: row i is the word before the blank (or <S>),
        # row i+2 the word after it (or </S>)
        if sides not in ("both", "left"):
            raise EngineError(f"sides must be 'both' or 'left', not {sides!r}")
        logp = self._log_probs(top[i, :P])
        if sides == "both":
            logp = logp + self._log_probs(top[i + 2, P:])
        for w in self.NOT_A_WORD:
            if w in self._vocab_index:
                logp[self._vocab_index[w]] = -math.inf
        return self._top(text, torch.log_softmax(logp, dim=-1), "masked", top_k,
                         "forward LM × backward LM" if sides == "both" else "forward LM alone")

    @property
    def _vocab_index(self) -> dict[str, int]:
        if not hasattr(self, "_index"):
            self._index = {w: k for k, w in enumerate(self.softmax.vocab)}
        return self._index

    def logit_lens(self, text: WordText, top_k: int = 1) -> LogitLens:
        raise UnsupportedPrediction("the logit lens needs a transformer's output head; "
                                    "ELMo's layers have none (try a GPT model)")


def load(model_id: str, path: Path, options: LoadOptions,
         progress: bool = True) -> ElmoAdapter:
    """An AllenNLP ELMo directory (options.json + weights.hdf5, optional LM softmax)."""
    path = Path(path)
    if not path.is_dir():
        raise ModelUnavailable(f"{path} is not an ELMo directory (options.json + weights.hdf5)")
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    bilm = load_allennlp(path, progress=progress)
    return ElmoAdapter(model_id, bilm, load_softmax(path), device=device, dtype=dtype,
                       progress=progress)
