"""Each attention head's importance for one prediction, two ways (Michel et al. 2019, "Are
Sixteen Heads Really Better than One?", §4): the drop in f when that head alone is knocked
out, and their cheap estimate of it, |∂f/∂ξ_h| for a gate ξ_h = 1 that multiplies the head's
output.

f is the prediction's log-probability (minus the contrast's; engine/attribution/explain.py
objective_of). A head's output is its slice of its layer's attention output projection's input
(engine/families/hf/parts.py), as engine/components/ablation.py knocks it out."""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np

from engine.attribution.explain import objective_of
from engine.components.ablation import sites
from engine.components.result import HeadImportance
from engine.families.base import Sites
from engine.families.hf.parts import hooked
from engine.text import WordText

# Tokens in one batched forward of the knock-outs. Without gradients a forward holds about one
# layer's activations at a time, ~tokens × (a few × the feed-forward width) numbers: 4096
# tokens of SmolLM2-135M is ~80 MB, well under its 540 MB of weights, so a chunk stays within
# ~2× the memory of a plain forward.
CHUNK_TOKENS = 4096


@contextmanager
def gated(s: Sites, gates):
    """While inside, row b of each batch has head h of layer l multiplied by gates[b, l, h]
    (gates: [rows, layers, heads], 1 = as it is, 0 = knocked out)."""
    def attn_in(layer, x):
        g = gates[:, layer].repeat_interleave(s.head_dim, dim=-1)          # (B, H·d)
        g = g.view(g.shape[0], *([1] * (x.dim() - 2)), g.shape[-1])      # (B, 1, H·d)
        return x * g.to(x.dtype)

    with hooked(s, attn_in=attn_in):
        yield


def knocked_out(s: Sites, obj, f: float):
    """[layers, heads]: f − f with that head alone zeroed, a batch of rows each with a
    different head gated off, CHUNK_TOKENS tokens at a time."""
    import torch

    n = s.n_layers * s.n_heads
    gates = torch.ones(n, s.n_layers, s.n_heads, device=obj.x.device)
    gates.view(n, n)[torch.arange(n), torch.arange(n)] = 0            # row l·H + h: (l, h) off
    chunk = max(1, CHUNK_TOKENS // (obj.x.shape[1] + 2))
    values = []
    with torch.no_grad():
        for start in range(0, n, chunk):
            g = gates[start:start + chunk]
            with gated(s, g):
                values.append(obj.value(obj.x.expand(len(g), -1, -1)).double().cpu())
    return (f - torch.cat(values).numpy()).reshape(s.n_layers, s.n_heads)


def gate_gradient(s: Sites, obj):
    """[layers, heads]: |∂f/∂ξ_h| at ξ = 1, one backward pass (only the gates' gradient is
    formed: the model's parameters collect none)."""
    import torch

    gates = torch.ones(1, s.n_layers, s.n_heads, device=obj.x.device, dtype=obj.x.dtype,
                       requires_grad=True)
    with torch.enable_grad(), gated(s, gates):
        f = obj.value(obj.x)[0]
        (grad,) = torch.autograd.grad(f, gates)
    return grad[0].abs().double().cpu().numpy()


def head_importance(adapter, text: WordText, target: str, contrast: str | None,
                    kind: str) -> HeadImportance:
    """Every head's knocked-out drop and gradient estimate for `target` (rather than
    `contrast`) as `adapter`'s prediction `kind` on `text`, and their Spearman correlation."""
    import torch
    from scipy.stats import spearmanr

    s = sites(adapter)
    obj = objective_of(adapter, text, target, contrast, kind)
    with torch.no_grad():
        f = float(obj.value(obj.x)[0])
    knocked = knocked_out(s, obj, f)
    gradient = gate_gradient(s, obj)
    with warnings.catch_warnings():          # a constant row (all heads alike) gives nan
        warnings.simplefilter("ignore")
        rho = float(spearmanr(knocked.ravel(), gradient.ravel()).statistic)
    return HeadImportance(model_id=adapter.info.model_id, kind=kind, target=target,
                          contrast=contrast, f=f, f_means=obj.f_means,
                          knocked=knocked.astype(np.float32),
                          gradient=gradient.astype(np.float32), spearman=rho)
