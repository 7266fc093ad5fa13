"""Objectives of Hugging Face models (BertAdapter.objective, GPTAdapter.objective in
engine/families/bert.py, gpt.py; the protocol's Explained): a masked LM's blank, a
decoder's next word and a decoder's filled blank, each as the log-probability the model's own
softmax gives, read through the model transformers loaded (inputs_embeds in, logits out)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np

from engine.attribution.objective import Objective, check_tokens, f_means, replace_word
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.hf import tokens
from engine.families.hooks import BEFORE, on_this_thread
from engine.memory import FLOOR, rows_per_pass
from engine.text import MASK, WordText, align_offsets, split_words


@dataclass(frozen=True)
class Reading:
    """One input sequence and what is read off it: f = Σ_j log p(targets[j] at read_at[j]),
    each the model's softmax over its whole vocabulary at that position (a masked LM's blank,
    a decoder's next-token distribution)."""

    ids: tuple[int, ...]
    token_to_word: np.ndarray       # [tokens], -1 for special tokens
    read_at: tuple[int, ...]
    targets: tuple[int, ...]
    slots: np.ndarray               # positions of the attributed pieces


@contextmanager
def _head_at(model, positions):
    """The output projection applied at `positions` only, by a pre-hook on the module
    transformers itself calls last (a masked LM's decoder, a causal LM's lm_head): the same
    logits there, without a [batch, tokens, vocabulary] tensor for every position. `fired`
    is empty when the model never called that module (then the caller indexes the logits).
    The hook acts for the calling thread only: the app's other sessions may run the same model
    meanwhile (as forward.hidden_until's hooks do)."""
    head = model.get_output_embeddings()
    fired: list[bool] = []

    def sliced(module, args, kwargs):
        fired.append(True)
        return (args[0][:, positions], *args[1:]), kwargs

    with on_this_thread(*([(head, BEFORE, sliced)] if head is not None else [])):
        yield fired


def _log_probs(model, embeds, reading: Reading):
    """(B,) Σ_j log p(targets[j] at read_at[j]) for a batch of whole inputs embeds (B, L, D)."""
    import torch

    at = torch.tensor(reading.read_at, device=embeds.device)
    mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=embeds.device)
    with _head_at(model, at) as fired:
        logits = model(inputs_embeds=embeds, attention_mask=mask, use_cache=False).logits
    if not fired:
        logits = logits[:, at]
    # float32 at least: the contract's log-probabilities (a float64 model keeps float64)
    logits = logits.float() if logits.dtype != torch.float64 else logits
    logp = torch.log_softmax(logits, dim=-1)                              # (B, k, V)
    want = torch.tensor(reading.targets, device=embeds.device)
    return logp[:, torch.arange(len(want)), want].sum(-1)


def objective(model, readings: list[Reading], absent_row, pieces: tuple[str, ...],
              words: tuple[str, ...], target_pieces: tuple[str, ...], what: str,
              contrast: str | None, absent_means: str) -> Objective:
    """f = reading 0's log-probability, minus reading 1's when there is a contrast; the
    attributed pieces are the slots of reading 0 (the same token ids as reading 1's)."""
    import torch

    embed = model.get_input_embeddings()
    device = next(model.parameters()).device
    with torch.no_grad():
        whole = [embed(torch.tensor([r.ids], device=device)) for r in readings]   # (1, L, D)
    first = readings[0]
    x = whole[0][:, torch.from_numpy(first.slots).to(device)].detach()           # (1, N, D)

    def value(batch):
        out = 0
        for sign, r, w in zip((1, -1), readings, whole):
            full = w.expand(batch.shape[0], -1, -1).clone()                      # (B, L, D)
            full[:, torch.from_numpy(r.slots).to(device)] = batch.to(full.dtype)
            out = out + sign * _log_probs(model, full, r)
        return out

    # rows(n, grad=...): how many rows one pass of value takes, by the model's memory
    # (methods.rows reads it: IG's steps, occlusion's and faithfulness's perturbed inputs)
    value.rows = partial(rows_per_pass, model, max(len(r.ids) for r in readings),
                         reads=max(len(r.read_at) for r in readings), readings=len(readings),
                         floor=FLOOR)
    absent = absent_row.to(device=device, dtype=x.dtype).expand_as(x).clone()
    return Objective(x=x, absent=absent, value=value, pieces=pieces,
                     piece_to_word=first.token_to_word, slots=first.slots, words=words,
                     target_pieces=target_pieces, f_means=f_means("", contrast, what),
                     absent_means=absent_means)


def _same_context(readings: list[Reading], words: list[str]) -> None:
    """Target and contrast must be read with the same attributed pieces (one x for both)."""
    if len(readings) == 2:
        target, contrast = words
        a, b = ([r.ids[i] for i in r.slots] for r in readings)
        if a != b:
            raise EngineError(f"the tokenizer splits the words around the blank differently "
                              f"with {target!r} and with {contrast!r}, so they cannot be "
                              "compared on one input")


def _pair(words: list[str], spelled: list) -> tuple:
    """check_tokens' arguments: the target and contrast (None without one) and their ids."""
    return (words[0], words[1] if len(words) > 1 else None, spelled[0],
            spelled[1] if len(spelled) > 1 else ())


def _fits(n: int, cap: int) -> None:
    if n > cap:
        raise EngineError(f"the text and target take {n} tokens for this model; its cap is "
                          f"{cap}: shorten the text")


def _slots(t2w: np.ndarray, blank: int | None) -> np.ndarray:
    return np.nonzero((t2w >= 0) & (t2w != (-2 if blank is None else blank)))[0]


# -- a masked LM's blank ------------------------------------------------------------------
def masked_lm(adapter, text: WordText, blank: int, words: list[str],
              contrast: str | None) -> Objective:
    """log p(target at the blank) from the MLM head. A target of several pieces takes one
    blank per piece, all masked at once, and f sums their log-probabilities (the convention of
    masked-LM scoring, Salazar et al. 2020, with the pieces filled together)."""
    if not getattr(adapter, "has_mlm", False):
        raise UnsupportedPrediction("this model has no masked-LM head, so it cannot fill a "
                                    "blank to explain")
    tok, cap = adapter.tokenizer, adapter.max_tokens
    # the text with [MASK] spelled as this tokenizer's mask token, as predict_masked reads it
    t = tokens.tokenize(tok, tokens.with_mask_token(text, tok.mask_token or MASK), cap)
    pos = [i for i, (tid, w) in enumerate(zip(t.input_ids, t.token_to_word))
           if w == blank and tid == tok.mask_token_id]
    if len(pos) != 1:
        raise EngineError(f"the tokenizer did not turn [MASK] into its mask token "
                          f"{tok.mask_token!r}")
    p = pos[0]
    readings, spelled = [], []
    for word in words:
        filled = tokens.tokenize(tok, replace_word(text, blank, word), cap)
        ids = [i for i, w in zip(filled.input_ids, filled.token_to_word) if w == blank]
        tokens.check_spelled(tok, ids, word)
        k = len(ids)
        seq = t.input_ids[:p] + (tok.mask_token_id,) * k + t.input_ids[p + 1:]
        t2w = np.concatenate([t.token_to_word[:p], np.full(k, blank), t.token_to_word[p + 1:]])
        _fits(len(seq), cap)
        readings.append(Reading(tuple(seq), t2w, tuple(range(p, p + k)), tuple(ids),
                                _slots(t2w, blank)))
        spelled.append(ids)
    check_tokens(*_pair(words, spelled))
    _same_context(readings, words)
    pieces = tokens.readable_tokens(tok, readings[0].ids, sequence=True)
    what = ("log p at the blank, the MLM head's softmax" if len(spelled[0]) == 1 else
            f"Σ log p of its {len(spelled[0])} pieces, one blank each, the MLM head's softmax")
    return objective(adapter.model, readings, _token_row(adapter, tok.mask_token_id), pieces,
                     text.words, tokens.readable_tokens(tok, spelled[0]), what,
                     words[1] if len(words) > 1 else None, f"the {tok.mask_token} embedding")


def _token_row(adapter, token_id: int):
    """(1, D) the input embedding of one token."""
    import torch

    with torch.no_grad():
        return adapter.model.get_input_embeddings()(
            torch.tensor([token_id], device=next(adapter.model.parameters()).device))


def _pad_row(adapter):
    """A decoder's "no word here": the embedding of its padding token (else end-of-text,
    else unknown; tokens.pad_token_id). Not the zero vector: a pre-norm decoder (Llama's
    RMSNorm, GPT-NeoX's LayerNorm) divides by the vector's norm, so on a straight path from
    zero its gradient spikes near the start and IG's sum does not converge (256 steps left
    gaps of 30-200% on the tiny Llama, Qwen2, Mistral, Gemma-2 and GPT-NeoX)."""
    row = _token_row(adapter, adapter.pad_id)
    name = adapter.tokenizer.convert_ids_to_tokens(adapter.pad_id)
    return row, f"the {name} embedding (this decoder's padding token)"


# -- a decoder's next word ----------------------------------------------------------------
def next_word(adapter, text: WordText, words: list[str], contrast: str | None) -> Objective:
    """log p(target | text) by the chain rule over the target's pieces: the text is followed
    by a space and the word, each piece read at the position before it (the pieces before the
    last are input, held fixed)."""
    tok, cap = adapter.tokenizer, adapter.max_tokens
    wt = WordText(text.text.rstrip(), text.words, text.spans)
    t = tokens.tokenize(tok, wt, cap)
    readings, spelled = [], []
    for word in words:
        n = len(t.input_ids)
        ids = tokens.spelled_after(tok, wt, t.input_ids, word)
        seq = t.input_ids + tuple(ids[:-1])
        _fits(len(seq), cap)
        t2w = np.concatenate([t.token_to_word, np.full(len(ids) - 1, -1)])
        readings.append(Reading(seq, t2w, tuple(range(n - 1, n - 1 + len(ids))), tuple(ids),
                                _slots(t.token_to_word, None)))
        spelled.append(ids)
    check_tokens(*_pair(words, spelled))
    pieces = tokens.readable_tokens(tok, readings[0].ids, sequence=True)
    what = ("log p of the next token" if len(spelled[0]) == 1 else
            f"Σ log p of its {len(spelled[0])} pieces (chain rule)")
    row, means = _pad_row(adapter)
    return objective(adapter.model, readings, row, pieces, text.words,
                     tokens.readable_tokens(tok, spelled[0]), what, contrast, means)


# -- a decoder's filled blank -------------------------------------------------------------
def decoder_fill(adapter, text: WordText, blank: int, words: list[str], contrast: str | None,
                 start_words: int, right_tokens: int, running_text) -> Objective:
    """The score GPTAdapter.predict_masked ranks a candidate by (sides="both"): Σ log p of
    the sentence's tokens from the candidate's first piece to FILL_RIGHT_TOKENS tokens after
    it, given what precedes (the document-start token first after at most FILL_START_WORDS
    words, punctuation written as running text): the fill's own conventions, which gpt.py
    passes in (`start_words`, `right_tokens`, `running_text`). Its shares among candidates are the softmax
    of this score, so with a contrast f is the log of the ratio of their two shares."""
    s, e = text.spans[blank]
    left, right = text.text[:s].rstrip(), text.text[e:].rstrip()
    with_start = len(left.split()) <= start_words
    left_ids = adapter._ids(left, with_start)
    if not left_ids:
        raise EngineError("this model has no start token, so a blank at the very start "
                          "needs at least one word before it")
    start = len(adapter._ids("", with_start))          # 1 with the start token, else 0
    readings, spelled = [], []
    for word in words:
        joined = left + " " + word if left else word
        running = running_text(joined + right)
        enc = adapter.tokenizer(running, return_offsets_mapping=True)
        ids = [adapter._start_id] * start + enc["input_ids"]
        end = len(adapter._ids(joined, with_start))
        ids = ids[:end + right_tokens]
        running_words = split_words(running)
        if len(running_words.words) != len(text.words):
            raise EngineError("written as running text the sentence has other words than "
                              "typed (a space before 's or n't?); write it as it reads")
        t2w = np.concatenate([np.full(start, -1), align_offsets(
            enc["offset_mapping"], running_words.spans, running)])[:len(ids)]
        n_left = len(left_ids)
        tokens.check_spelled(adapter.tokenizer, ids[n_left:end], word)
        _fits(len(ids), adapter.max_tokens)
        readings.append(Reading(tuple(ids), t2w, tuple(range(n_left - 1, len(ids) - 1)),
                                tuple(ids[n_left:]), _slots(t2w, blank)))
        spelled.append(ids[n_left:end])
    check_tokens(*_pair(words, spelled))
    _same_context(readings, words)
    pieces = tokens.readable_tokens(adapter.tokenizer, readings[0].ids, sequence=True)
    what = ("Σ log p of the sentence's tokens from the blank on, the score the fill ranks "
            "candidates by")
    row, means = _pad_row(adapter)
    return objective(adapter.model, readings, row, pieces, text.words,
                     tokens.readable_tokens(adapter.tokenizer, spelled[0]), what, contrast,
                     means)
