"""Running a Hugging Face model over batches of tokenised texts: hidden states of every layer
(or of some, stopping above the highest asked), attention maps when asked (through eager
attention, switched for that call), and each text's Encoding.

Texts are batched with right padding and an attention mask; each text's rows are then sliced
out, so a text's vectors do not depend on what else shares its batch (position ids count from 0
for every text under right padding)."""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.families.base import check_layers
from engine.families.hf.parts import hidden_state_blocks
from engine.families.hooks import AFTER, BEFORE, on_this_thread
from engine.families.hf.tokens import TokenizedText, tokenize_many
from engine.result import Encoding
from engine.text import WordText


@dataclass(frozen=True)
class LayerOutputs:
    """One text's transformer outputs, CPU float32, padding removed."""

    hidden_states: np.ndarray        # [layers+1, tokens, dim]
    attentions: np.ndarray | None    # [layers, heads, tokens, tokens], when asked for


def layer_names(n_layers: int) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer {i}" for i in range(1, n_layers + 1))


def chosen_layer_names(n_layers: int, layers: Sequence[int] | None) -> tuple[str, ...]:
    names = layer_names(n_layers)
    return names if layers is None else tuple(names[i] for i in layers)


def encoding(model_id: str, family: str, text: WordText, tokenized: TokenizedText,
             outputs: LayerOutputs, names: tuple[str, ...]) -> Encoding:
    """One text's Encoding: its words as typed, its tokens as the model read them, and the
    model's outputs for them."""
    return Encoding(model_id=model_id, family=family, text=text.text, words=text.words,
                    tokens=tokenized.tokens, token_to_word=tokenized.token_to_word,
                    hidden_states=outputs.hidden_states, attentions=outputs.attentions,
                    layer_names=names)


# A forward that needs the attention weights switches a shared model to another attention
# implementation (eager, or qk.py's capture) and back; they take this lock so two switches never
# interleave. A forward without maps running meanwhile may go through that implementation too:
# same vectors (to float rounding), only slower.
_SWITCH_LOCK = threading.Lock()


@contextmanager
def attention_implementation(model, name: str):
    """The model's attention through transformers' implementation `name` for the duration."""
    with _SWITCH_LOCK:
        before = model.config._attn_implementation
        if before == name:
            yield
            return
        model.set_attn_implementation(name)
        try:
            yield
        finally:
            model.set_attn_implementation(before)


def pad_batch(batch: Sequence[TokenizedText], pad_id: int, device: str):
    """Right-padded input_ids and attention_mask tensors for a batch."""
    import torch

    lengths = np.fromiter((len(t.input_ids) for t in batch), np.int64, len(batch))   # (B,)
    real = np.arange(int(lengths.max()))[None, :] < lengths[:, None]               # (B, T)
    ids = np.full(real.shape, pad_id, np.int64)                                     # (B, T)
    # one fill for the whole batch (a tensor per text costs as much as tokenising it)
    ids[real] = np.fromiter(chain.from_iterable(t.input_ids for t in batch), np.int64,
                            int(lengths.sum()))
    return (torch.from_numpy(ids).to(device),
            torch.from_numpy(real.astype(np.int64)).to(device))


# Attention maps grow with tokens squared: a batch's maps (batch x layers x heads x T x T
# float32) are kept under this many bytes by making batches of long texts smaller.
ATTENTION_BUDGET_BYTES = 512 * 2**20


def batches(tokenized: Sequence[TokenizedText], batch_size: int,
            per_token_pair_bytes: int) -> list[list[int]]:
    """Indices of texts grouped into batches, shortest texts together (less padding).

    Reordering is safe because a text's vectors do not depend on its batch.
    """
    order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i].input_ids))
    groups: list[list[int]] = []
    for i in order:
        width = len(tokenized[i].input_ids)      # the longest so far: `order` is sorted
        if groups and len(groups[-1]) < batch_size and \
                (len(groups[-1]) + 1) * width * width * per_token_pair_bytes \
                <= ATTENTION_BUDGET_BYTES:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def encode_texts(model_id: str, family: str, base_model, tokenizer, texts: Sequence[WordText],
                 batch_size: int, max_tokens: int, pad_id: int,
                 model_texts: Sequence[WordText] | None = None, attentions: bool = False,
                 layers: Sequence[int] | None = None) -> list[Encoding]:
    """Encodings for texts, in their order. `model_texts`: the texts as the tokenizer reads
    them, word for word the same (a BERT spells [MASK] its own way); default `texts`.
    Attention maps only with `attentions` (else Encoding.attentions is None); hidden states of
    `layers` only when given (Encoding.layer_names says which)."""
    cfg = base_model.config
    check_layers(layers, cfg.num_hidden_layers)
    tokenized = tokenize_many(tokenizer, texts if model_texts is None else model_texts,
                              max_tokens)
    names = chosen_layer_names(cfg.num_hidden_layers, layers)
    # bytes of one (query, key) pair's maps, every layer and head: a batch of long texts
    # is made smaller so its maps fit ATTENTION_BUDGET_BYTES
    pair_bytes = 4 * cfg.num_hidden_layers * cfg.num_attention_heads if attentions else 0
    out: list[Encoding | None] = [None] * len(texts)
    for group in batches(tokenized, max(1, batch_size), pair_bytes):
        batch = [tokenized[i] for i in group]
        for i, outputs in zip(group, run_layers(base_model, batch, pad_id, attentions, layers)):
            out[i] = encoding(model_id, family, texts[i], tokenized[i], outputs, names)
    return out


def run_layers(base_model, batch: Sequence[TokenizedText], pad_id: int,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[LayerOutputs]:
    """Hidden states of every layer (or of `layers` only, in that order), and the attention
    maps only when asked (they force the eager attention path and cost tokens-squared
    memory), for each text of one batch. With `layers` and no maps, blocks above the highest
    layer asked are not run at all."""
    import torch

    device = next(base_model.parameters()).device
    ids, mask = pad_batch(batch, pad_id, str(device))
    n_blocks = base_model.config.num_hidden_layers
    keep = None if layers is None else list(layers)
    stop = max(keep) if keep and not attentions and max(keep) < n_blocks else None
    with torch.inference_mode(), (attention_implementation(base_model, "eager") if attentions
                                   else nullcontext()):
        if stop is not None:
            hidden = hidden_until(base_model, ids, mask, stop)      # stop+1 x (B, T, D)
            out = None
        else:
            # hidden_states: layers+1 x (B, T, D); attentions: layers x (B, H, T, T)
            out = base_model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             output_attentions=attentions, return_dict=True)
            hidden = out.hidden_states
    if attentions and (not out.attentions or any(a is None for a in out.attentions)):
        raise EngineError("the model returned no attention weights (its attention "
                          "implementation cannot return them)")
    if keep is not None:
        hidden = [hidden[i] for i in keep]
    hs = torch.stack(tuple(hidden), dim=1).float().cpu().numpy()   # (B, layers, T, D)
    att = (torch.stack(out.attentions, dim=1).float().cpu().numpy()    # (B, L, H, T, T)
           if attentions else None)
    results = []
    for i, t in enumerate(batch):
        n = len(t.input_ids)
        # its own n tokens, the padding cut: (layers, n, D) and (L, H, n, n)
        results.append(LayerOutputs(
            np.ascontiguousarray(hs[i, :, :n]),
            None if att is None else np.ascontiguousarray(att[i, :, :, :n, :n])))
    return results


class _Stopped(Exception):
    """Raised by hidden_until's hook once the highest layer asked for has been computed."""


def hidden_until(base_model, ids, mask, last: int) -> list:
    """Hidden states 0..last of one batch (last < the number of blocks), running blocks 1..last
    only. They are read by hooks from block 1's input and each block's output: the tensors
    that output_hidden_states collects, except that a model with a final norm (GPT-2's ln_f,
    Llama's norm) applies it to its top layer only, which this path never stops at. Hooks
    act for the calling thread only, so another thread's forward on the same model is
    untouched."""
    blocks = hidden_state_blocks(base_model)
    got: list = []

    def block_input(module, args, kwargs):
        if not got:
            got.append(args[0] if args else kwargs["hidden_states"])
            if last == 0:
                raise _Stopped

    def block_output(module, args, output):
        got.append(output[0] if isinstance(output, tuple) else output)
        if len(got) == last + 1:
            raise _Stopped

    try:
        with on_this_thread((blocks[0], BEFORE, block_input),
                            *((b, AFTER, block_output) for b in blocks[:last])):
            base_model(input_ids=ids, attention_mask=mask, return_dict=True)
    except _Stopped:
        pass
    if len(got) != last + 1:
        raise EngineError("this architecture's layers could not be read one by one")
    return got
