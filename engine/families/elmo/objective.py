"""Objectives of ELMo (ElmoAdapter.objective; the protocol's Explained): the forward LM's next word, the backward LM's
previous word and the two LMs' product at a blank, with gradients through the biLSTM. The
attributed input is each word's token embedding, the char CNN's output (layer 0): a word's
characters reach the biLSTM only through it, and it is the one vector per word the LMs read."""
from __future__ import annotations

import numpy as np
import torch

from engine.attribution.objective import Objective, f_means
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.elmo.chars import batch_char_ids
from engine.families.elmo.lstm import LstmWithProjection
from engine.families.hooks import AFTER, on_this_thread
from engine.memory import FLOAT, FLOOR, rows_within
from engine.text import WordText


def _word_ids(adapter, words: list[str]) -> list[int]:
    index = adapter._vocab_index
    out = []
    for w in words:
        if w not in index or w in adapter.NOT_A_WORD:
            raise EngineError(f"{w!r} is not in this ELMo's LM vocabulary "
                              f"({len(index):,} words), so it cannot be its prediction")
        out.append(index[w])
    return out


def row_bytes(bilm, vocab: int, n_tokens: int, grad: bool, reads: int) -> int:
    """Activations of one row of `n_tokens` tokens (engine/memory.py's count for an LSTM):
    the char CNN's (value runs it, then puts the attributed embeddings in its place): a
    token's characters embedded and every filter's output over them; with gradients every
    step of every LSTM (layer and direction) kept for the backward pass, a token's gates, cell
    and their nonlinearities, 12 × cell + 3 × projection + the input; without, one LSTM's
    input gates and outputs at a time; and the `reads` softmaxes over the vocabulary (4 ×
    vocabulary each, as memory.row_bytes counts a transformer's logits). elmo-brown keeps
    11 MB a row for 128 tokens for the backward pass; this counts 29 MB."""
    o = bilm.options
    cnn = (sum(n for _, n in o.filters) + 2 * o.char_dim) * o.max_chars
    lstms = [m for m in bilm.modules() if isinstance(m, LstmWithProjection)]
    if grad:
        kept = sum(12 * m.cell_size + 3 * m.proj_size + m.input_size for m in lstms)
    else:
        kept = max((4 * m.cell_size + 2 * m.proj_size + m.input_size for m in lstms),
                   default=0)
    return FLOAT * (n_tokens * (cnn + kept) + 4 * vocab * reads)


def objective(adapter, text: WordText, kind: str, blank: int | None,
              words: list[str]) -> Objective:
    """kind "next": the forward LM's top state at the last word; "previous": the backward
    LM's at the first word; "masked": log_softmax(log p_fwd + log p_bwd) at the blank, the
    markers <S>, </S>, <UNK> excluded (ElmoAdapter.predict_masked's product of experts)."""
    if adapter.softmax is None:
        raise UnsupportedPrediction("this ELMo checkpoint has no LM softmax, so it predicts "
                                    "no word to explain")
    ids = _word_ids(adapter, words)
    bilm, n = adapter.bilm, len(text.words)
    P = bilm.options.proj_dim
    chars = torch.from_numpy(batch_char_ids([text.words], bilm.options.max_chars)
                             ).to(adapter.device)                      # (1, n+2, chars)
    with torch.no_grad():
        layer0 = bilm.char_cnn(chars)                                   # (1, n+2, P)
    t2w = np.concatenate([[-1], np.arange(n), [-1]])                    # <S> words </S>
    slots = np.nonzero((t2w >= 0) & (t2w != (-2 if blank is None else blank)))[0]
    at = torch.from_numpy(slots).to(adapter.device)
    weight, bias, _ = adapter.softmax
    weight, bias = weight.to(adapter.device), bias.to(adapter.device)
    markers = [adapter._vocab_index[w] for w in adapter.NOT_A_WORD if w in adapter._vocab_index]

    def log_probs(h):                                                   # (B, P) -> (B, V)
        return torch.log_softmax(h.float() @ weight.float().T + bias.float(), dim=-1)

    def value(batch):                                                   # (B, N, P) -> (B,)
        full = layer0.expand(batch.shape[0], -1, -1).clone()
        full[:, at] = batch.to(full.dtype)
        # the char CNN's output is replaced by `full`: bilm.forward reads the mask from the
        # char ids, the embedding from this module (for this thread only: another session
        # may run the same biLM meanwhile)
        with on_this_thread((bilm.char_cnn, AFTER, lambda m, i, o: full)):
            top = bilm(chars.expand(batch.shape[0], -1, -1)).layers[-1]  # (B, n+2, 2P)
        if kind == "next":
            logp = log_probs(top[:, n, :P])
        elif kind == "previous":
            logp = log_probs(top[:, 1, P:])
        else:
            logp = log_probs(top[:, blank, :P]) + log_probs(top[:, blank + 2, P:])
            logp[:, markers] = -torch.inf
            logp = torch.log_softmax(logp, dim=-1)
        out = logp[:, ids[0]]
        return out - logp[:, ids[1]] if len(ids) > 1 else out

    # rows(n, grad=...): how many rows one pass of value takes, by the model's memory
    # (methods.rows reads it); the weights: the biLM's and the LM softmax's
    weights = sum(t.numel() * t.element_size()
                  for t in (*bilm.parameters(), weight, bias))
    reads = 2 if kind == "masked" else 1                                 # both LMs' softmax
    value.rows = lambda n, grad=False: rows_within(
        weights, row_bytes(bilm, weight.shape[0], chars.shape[1], grad, reads), n, FLOOR)

    x = layer0[:, at].detach()
    what = {"next": "log p of the next word, the forward LM's softmax",
            "previous": "log p of the previous word, the backward LM's softmax",
            "masked": "log p at the blank, forward × backward LM renormalised"}[kind]
    return Objective(x=x, absent=torch.zeros_like(x), value=value,
                     pieces=("<S>", *text.words, "</S>"), piece_to_word=t2w, slots=slots,
                     words=text.words, target_pieces=(words[0],),
                     f_means=f_means(kind, words[1] if len(words) > 1 else None, what),
                     absent_means="the zero vector (no word; the LSTM still steps there)")
