"""An annealed locality bias for the first steps of transformer training.

An untrained transformer attends almost uniformly, so its first model is a bag of words: the
loss sits on a plateau until attention learns to find neighbours through the position
embeddings, which on our CPU budget took longer than the whole run (the first bert-brown-mlm:
3,621 steps, every head still near-uniform). Adding an ALiBi-shaped bias (Press et al. 2022)
makes neighbours informative from the first steps; annealing it linearly to zero hands locality
over to the model's own position embeddings, so the exported model is the plain architecture
and inference never sees a bias.
"""
from __future__ import annotations

import math
from typing import Callable

import torch


def annealed(peak: float, steps: int, step: int) -> float:
    """Linear decay from `peak` at step 0 to zero at `steps` (zero throughout when steps is 0)."""
    return peak * max(0.0, 1.0 - step / steps) if steps > 0 else 0.0


def locality_bias(strength: float, heads: int, length: int, causal: bool = False) -> torch.Tensor | None:
    """Additive attention bias (1, heads, T, T): -strength * m_h * |i - j| with ALiBi's slopes
    m_h = 2^(-8h/H); with `causal`, -inf above the diagonal as well (a 4-D mask replaces the
    model's own causal mask in transformers). None when strength is 0."""
    if strength <= 0:
        return None
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
    pos = torch.arange(length)
    offset = pos[None, :] - pos[:, None]
    bias = -strength * slopes[:, None, None] * offset.abs().float()
    if causal:
        bias = bias.masked_fill(offset > 0, float("-inf"))
    return bias[None]


def annealed_bias(peak: float, steps: int, heads: int, length: int,
                  causal: bool = False) -> Callable[[int], torch.Tensor | None]:
    """step -> the bias at that step (None once annealed away); the bias's shape is built once."""
    unit = locality_bias(1.0, heads, length, causal)

    def at(step: int) -> torch.Tensor | None:
        s = annealed(peak, steps, step)
        return unit * s if s > 0 else None
    return at


def sinusoids(n: int, dim: int) -> torch.Tensor:
    """Vaswani et al.'s position encodings (sin on even, cos on odd features)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    out = torch.zeros(n, dim)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return out


def init_sinusoidal(embedding: torch.nn.Embedding, rms: float) -> None:
    """Start learned position embeddings as sinusoids (in which an offset is a linear map of a
    position, Vaswani et al. 2017, section 3.5) at the default init's RMS; trained as usual."""
    n, dim = embedding.weight.shape
    with torch.no_grad():
        embedding.weight.copy_(sinusoids(n, dim) * rms / math.sqrt(0.5))
