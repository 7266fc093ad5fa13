"""The neuron view's query and key vectors, read where the model's own attention function
receives them, and checked against the attention weights that call computed."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from engine.errors import EngineError, UnsupportedPrediction
from engine.families.hf.forward import attention_implementation, pad_batch
from engine.families.hf.tokens import TokenizedText
from engine.result import QueryKey


# The neuron view reads queries and keys where transformers hands them to the attention
# function: every architecture written against transformers' AttentionInterface calls it with
# the queries and keys after rotary embeddings, before grouped-query keys are repeated, with the
# mask, scale and soft-cap it applies. This implementation records that call, then runs the
# architecture's own eager attention.
CAPTURE = "ctxlens_capture"
# the capturing thread's list of calls: another thread's forward through the same model while it
# is switched to CAPTURE runs the same attention and records nothing
_capture = threading.local()


def _capturing_attention(module, query, key, value, attention_mask, **kwargs):
    import sys

    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward as eager
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    calls = getattr(_capture, "calls", None)
    if calls is not None:
        calls.append((query.detach(), key.detach(), attention_mask, weights, kwargs,
                       getattr(module, "is_causal", False)))
    return out, weights


_REGISTER_LOCK = threading.Lock()
_registered = False


def _register_capture() -> None:
    """_capturing_attention under the name CAPTURE in transformers' registries. They are
    process-wide tables, so the entry is written once, on the first capture, and stays."""
    global _registered
    with _REGISTER_LOCK:
        if _registered:
            return
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

        AttentionInterface.register(CAPTURE, _capturing_attention)
        # an explicit additive mask at every call, as eager attention gets (sliding windows and
        # padding included), so the view knows where each token may look
        ALL_MASK_ATTENTION_FUNCTIONS.register(CAPTURE, eager_mask)
        _registered = True


@contextmanager
def capturing(base_model):
    """The model's attention through _capturing_attention for one forward pass; the calls
    (one per layer, in order) are collected into the list yielded."""
    _register_capture()
    with attention_implementation(base_model, CAPTURE):
        _capture.calls = []
        try:
            yield _capture.calls
        finally:
            _capture.calls = None


def query_key(model_id: str, base_model, tokenized: TokenizedText, layer: int,
              causal: bool) -> QueryKey:
    """The query and key vectors of every head at one layer, as the attention scores use them,
    read from the architecture's own call of its attention function (`causal`: the family's
    reading order). Checked against the attention weights that call computed: where a score is
    more than a scaled q·k (DeBERTa's relative positions, attention sinks) the view says so
    instead of showing wrong numbers."""
    import numpy as np

    q, k, amask, weights, kwargs, call_causal = _captured_call(base_model, tokenized, layer)
    arch = type(base_model).__name__.removesuffix("Model")
    extra = sorted(set(kwargs) & {"s_aux", "sinks", "alibi", "position_bias"})
    if extra:
        raise UnsupportedPrediction(f"{arch}'s attention scores carry {extra[0]} besides "
                                    "query·key, so the neuron view cannot decompose them")
    heads = q.shape[1]
    if k.shape[1] != heads:                                       # grouped-query attention
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
    softcap = kwargs.get("softcap")
    out = QueryKey(model_id, tokenized.tokens, layer,
                   q[0].float().cpu().numpy(), k[0].float().cpu().numpy(),      # [H, T, d]
                   float(kwargs.get("scaling") or q.shape[-1] ** -0.5), causal=causal,
                   allowed=_allowed(amask, call_causal, q.shape[2]),
                   softcap=float(softcap) if softcap else None)
    if weights is not None and np.abs(out.attention_maps()
                                      - weights[0].float().cpu().numpy()).max() > 1e-3:
        raise UnsupportedPrediction(f"{arch}'s attention is more than softmax(scaled "
                                    "query·key) here, so the neuron view cannot decompose it")
    return out


def _captured_call(base_model, tokenized: TokenizedText, layer: int) -> tuple:
    """The recorded attention call of one layer: (queries, keys, mask, weights, kwargs,
    is_causal), the queries and keys [1, heads, T, d]."""
    import torch

    n_layers = base_model.config.num_hidden_layers
    if not 1 <= layer <= n_layers:
        raise EngineError(f"layer {layer} is not an attention layer of this model "
                          f"(1 to {n_layers})")
    device = next(base_model.parameters()).device
    ids, mask = pad_batch([tokenized], 0, str(device))
    with torch.inference_mode(), capturing(base_model) as calls:
        base_model(input_ids=ids, attention_mask=mask)
        calls = list(calls)
    if len(calls) != n_layers:
        arch = type(base_model).__name__.removesuffix("Model")
        raise UnsupportedPrediction(
            f"{arch} computes its attention scores its own way (not through transformers' "
            "attention interface: e.g. DeBERTa adds relative-position terms to query·key), so "
            "they cannot be split into query and key vectors")
    return calls[layer - 1]


def _allowed(amask, causal: bool, t: int):
    """Where each of the t queries may look, [T, T] bool, from the mask the attention call got:
    a boolean mask as it is, an additive one where it adds more than the dtype's half minimum
    (its -inf stand-in), none: causal order for a causal call, else None (everywhere)."""
    import numpy as np
    import torch

    if amask is None:
        return np.tril(np.ones((t, t), bool)) if causal else None
    if amask.dtype == torch.bool:
        return amask[0, 0, :, :t].cpu().numpy()
    return (amask[0, 0, :, :t] > torch.finfo(amask.dtype).min / 2).cpu().numpy()
