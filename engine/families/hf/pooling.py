"""Word vectors pooled where the model runs, for batch work: each word's subword vectors pooled
on the device, by Encoding.word_vectors' rule (engine.result.pool_index), so only the words'
vectors come back to the host."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.families.base import check_layers
from engine.families.hf.forward import batches, hidden_until, pad_batch
from engine.families.hf.tokens import TokenizedText, tokenize_many
from engine.result import POOLINGS, pool_index
from engine.text import WordText


def encode_pooled(base_model, tokenizer, texts: Sequence[WordText], batch_size: int,
                  max_tokens: int, pad_id: int, pool: str, spell_mask=lambda wt: wt,
                  layers: Sequence[int] | None = None) -> list[np.ndarray]:
    """Each text's word vectors [layers, words, dim] (float32): what
    encode_texts(...)[i].word_vectors(pool) gives, pooled where the model runs."""
    cfg = base_model.config
    check_layers(layers, cfg.num_hidden_layers)
    keep = list(range(cfg.num_hidden_layers + 1)) if layers is None else [int(i) for i in layers]
    tokenized = tokenize_many(tokenizer, [spell_mask(wt) for wt in texts], max_tokens,
                              readable=False)
    device = next(base_model.parameters()).device

    compiled = getattr(base_model, "_ctxlens_compiled", None)

    def states(batch):                   # pooled_words runs it under inference_mode
        import torch

        ids, mask = pad_batch(batch, pad_id, str(device))
        with batch_attention(device):
            if compiled is not None:
                # every block runs (a compiled graph cannot stop part-way as hidden_until does)
                hidden = compiled(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                                  return_dict=True).hidden_states
            elif max(keep) < cfg.num_hidden_layers:
                hidden = hidden_until(base_model, ids, mask, max(keep))
            else:
                hidden = base_model(input_ids=ids, attention_mask=mask,
                                    output_hidden_states=True, return_dict=True).hidden_states
        return torch.stack([hidden[i] for i in keep], dim=2)      # [B, T, layers, D]

    return pooled_words(tokenized, batch_size, pool, states, device)


# SDPA's kernel choice is process-wide (torch.backends flags), and ctxlens embed runs two
# chunks at once on a GPU: the first batch in narrows it, the last one out restores it.
_SDPA_LOCK = threading.Lock()
_sdpa_state: dict = {"users": 0, "context": None}


@contextmanager
def batch_attention(device):
    """SDPA's flash or memory-efficient kernels for batch work on a GPU, not cuDNN's: cuDNN
    builds a plan for every new (batch, length) shape, and a file of sentences brings dozens
    (measured on an H100, 32 batch shapes of BERT-base: 1.55 s on a first pass against 0.40 s
    with the memory-efficient kernel, which is as fast once cuDNN has its plans)."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with _SDPA_LOCK:
        if _sdpa_state["users"] == 0:
            _sdpa_state["context"] = sdpa_kernel([SDPBackend.FLASH_ATTENTION,
                                                  SDPBackend.EFFICIENT_ATTENTION,
                                                  SDPBackend.MATH])
            _sdpa_state["context"].__enter__()
        _sdpa_state["users"] += 1
    try:
        yield
    finally:
        with _SDPA_LOCK:
            _sdpa_state["users"] -= 1
            if _sdpa_state["users"] == 0:
                _sdpa_state["context"].__exit__(None, None, None)
                _sdpa_state["context"] = None


def pooled_words(tokenized: Sequence[TokenizedText], batch_size: int, pool: str, states,
                 device) -> list[np.ndarray]:
    """Each text's word vectors [layers, words, dim] (float32), pooled from `states(batch)`
    ([texts, tokens, layers, dim] on `device`) in Encoding.word_vectors' way. On a GPU only the
    words' vectors come back to the host (not every token's, nor the padding), and a batch's
    copy back overlaps the next batch's forward pass."""
    import torch

    if pool not in POOLINGS:
        raise EngineError(f"pool must be one of {POOLINGS}")
    device = torch.device(device)
    out: list[np.ndarray | None] = [None] * len(tokenized)

    def finish(group, batch, host, done):
        if done is not None:
            done.synchronize()
        # a copy, so the pinned buffer goes back to torch's host cache for the next batch
        arr = host.numpy().copy() if done is not None else host.numpy()
        start = 0
        for i, t in zip(group, batch):
            n = len(t.text.words)
            out[i] = arr[start:start + n].transpose(1, 0, 2)
            start += n

    pending = None
    for group in batches(tokenized, max(1, batch_size), 0):
        batch = [tokenized[i] for i in group]
        with torch.inference_mode():
            pooled = _pool(states(batch), batch, pool)
        done = None
        if device.type == "cuda":
            host = torch.empty(pooled.shape, dtype=pooled.dtype, pin_memory=True)
            host.copy_(pooled, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host = pooled
        if pending is not None:
            finish(*pending)
        pending = (group, batch, host, done)
    if pending is not None:
        finish(*pending)
    return out


def _pool(states, batch: Sequence[TokenizedText], pool: str):
    """[words, layers, dim] float32 on the states' device: one batch's word vectors."""
    import torch

    device = states.device
    width = states.shape[1]
    flat = states.reshape(len(batch) * width, states.shape[2], states.shape[3])
    rows, words, weights, n_words = pool_index([t.token_to_word for t in batch],
                                               [len(t.text.words) for t in batch], width, pool)
    picked = flat[torch.from_numpy(rows).to(device)].float()
    if words is None:
        return picked
    pooled = torch.zeros((n_words,) + picked.shape[1:], dtype=torch.float32, device=device)
    scale = torch.from_numpy(weights).to(device)[:, None, None]
    return pooled.index_add_(0, torch.from_numpy(words).to(device), picked * scale)
