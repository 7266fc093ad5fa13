"""ELMo's scalar mix (Peters et al. 2018, eq. 1): ELMo = gamma * sum_j softmax(s)_j * h_j.

The released biLM carries no mix weights: they are learned per task. With no task the mix is
uniform (s = 0, gamma = 1), i.e. the mean of the layers.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn


def mix_weights(s: Sequence[float] | np.ndarray) -> np.ndarray:
    """softmax(s) in float64, shifted by max(s) so large s cannot overflow."""
    s = np.asarray(s, dtype=np.float64)
    e = np.exp(s - s.max())
    return e / e.sum()


def scalar_mix(layers: np.ndarray, s: Sequence[float] | np.ndarray | None = None,
               gamma: float = 1.0) -> np.ndarray:
    """layers [L, ..., D] -> [..., D] float32; s = None means uniform weights."""
    layers = np.asarray(layers)
    s = np.zeros(layers.shape[0]) if s is None else np.asarray(s, dtype=np.float64)
    if s.shape != (layers.shape[0],):
        raise ValueError(f"s: one weight per layer is needed ({layers.shape[0]}), got {s.shape}")
    w = mix_weights(s)
    mixed = np.tensordot(w, layers.astype(np.float64), axes=(0, 0))
    return (gamma * mixed).astype(np.float32)


class ScalarMix(nn.Module):
    """Learnable s (one per layer) and gamma; uniform at initialisation by default."""

    def __init__(self, n_layers: int, s: Sequence[float] | None = None, gamma: float = 1.0,
                 trainable: bool = True):
        super().__init__()
        init = torch.zeros(n_layers) if s is None else torch.tensor(s, dtype=torch.float32)
        if init.shape != (n_layers,):
            raise ValueError(f"s: one weight per layer is needed ({n_layers})")
        self.s = nn.Parameter(init, requires_grad=trainable)
        self.gamma = nn.Parameter(torch.tensor(float(gamma)), requires_grad=trainable)

    @property
    def weights(self) -> torch.Tensor:
        return torch.softmax(self.s, dim=0)

    def forward(self, layers: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
        """layers [L, ..., D] (or a list of L tensors [..., D]) -> [..., D]."""
        if not isinstance(layers, torch.Tensor):
            layers = torch.stack(list(layers))
        if layers.shape[0] != self.s.shape[0]:
            raise ValueError(f"layers: expected {self.s.shape[0]} layers, got {layers.shape[0]}")
        w = self.weights.to(layers.dtype).reshape(-1, *([1] * (layers.dim() - 1)))
        return self.gamma.to(layers.dtype) * (w * layers).sum(dim=0)
