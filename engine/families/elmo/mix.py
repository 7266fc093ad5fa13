"""ELMo's scalar mix (Peters et al. 2018, eq. 1): ELMo = gamma * sum_j softmax(s)_j * h_j.

The released biLM carries no mix weights: they are learned per task. With no task the mix is
uniform (s = 0, gamma = 1), i.e. the mean of the layers.

do_layer_norm follows AllenNLP's ScalarMix option: before mixing, each layer is shifted and
scaled by ONE mean and ONE variance taken over all its non-padding elements (every position of
every sentence, every dimension), not per vector as nn.LayerNorm does.

The numpy functions need no torch (the app imports them through engine.analysis.senses and
never loads torch); the torch module ScalarMix is built on first use (PEP 562 __getattr__).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

# AllenNLP adds 1e-12 to the variance before the square root
LAYER_NORM_EPS = 1e-12


def mix_weights(s: Sequence[float] | np.ndarray) -> np.ndarray:
    """softmax(s) in float64, shifted by max(s) so large s cannot overflow."""
    s = np.asarray(s, dtype=np.float64)
    e = np.exp(s - s.max())
    return e / e.sum()


def layer_norm(layer: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """One layer [..., D] minus its mean, over its standard deviation, both scalars taken over
    the non-padding elements (mask [...], True = a real position; None = all real). Padding
    positions are shifted and scaled too, as in AllenNLP; the mix ignores them anyway."""
    x = np.asarray(layer, dtype=np.float64)
    keep = np.ones(x.shape[:-1], bool) if mask is None else np.asarray(mask, bool)
    if keep.shape != x.shape[:-1]:
        raise ValueError(f"mask: must have the layer's shape without its last axis "
                         f"{x.shape[:-1]}, got {keep.shape}")
    real = x[keep]                                        # [real positions, D]
    if real.size == 0:
        raise ValueError("mask: layer norm needs at least one non-padding position")
    mean = real.mean()
    var = ((real - mean) ** 2).mean()
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS)


def scalar_mix(layers: np.ndarray, s: Sequence[float] | np.ndarray | None = None,
               gamma: float = 1.0, do_layer_norm: bool = False,
               mask: np.ndarray | None = None, out_dtype=np.float32) -> np.ndarray:
    """layers [L, ..., D] -> [..., D] (out_dtype; float64 for an optimiser's finite
    differences); s = None means uniform weights.
    do_layer_norm: each layer through layer_norm (with `mask`) before it is weighted."""
    layers = np.asarray(layers)
    s = np.zeros(layers.shape[0]) if s is None else np.asarray(s, dtype=np.float64)
    if s.shape != (layers.shape[0],):
        raise ValueError(f"s: one weight per layer is needed ({layers.shape[0]}), got {s.shape}")
    w = mix_weights(s)
    x = layers.astype(np.float64)
    if do_layer_norm:
        x = np.stack([layer_norm(layer, mask) for layer in x])
    mixed = np.tensordot(w, x, axes=(0, 0))
    return (gamma * mixed).astype(out_dtype, copy=False)


def _torch_scalar_mix():
    import torch
    from torch import nn

    class ScalarMix(nn.Module):
        """Learnable s (one per layer) and gamma; uniform at initialisation by default.
        do_layer_norm: as scalar_mix's, with forward's mask."""

        def __init__(self, n_layers: int, s: Sequence[float] | None = None, gamma: float = 1.0,
                     trainable: bool = True, do_layer_norm: bool = False):
            super().__init__()
            init = torch.zeros(n_layers) if s is None else torch.tensor(s, dtype=torch.float32)
            if init.shape != (n_layers,):
                raise ValueError(f"s: one weight per layer is needed ({n_layers})")
            self.s = nn.Parameter(init, requires_grad=trainable)
            self.gamma = nn.Parameter(torch.tensor(float(gamma)), requires_grad=trainable)
            self.do_layer_norm = do_layer_norm

        @property
        def weights(self) -> torch.Tensor:
            return torch.softmax(self.s, dim=0)

        def forward(self, layers: torch.Tensor | Sequence[torch.Tensor],
                    mask: torch.Tensor | None = None) -> torch.Tensor:
            """layers [L, ..., D] (or a list of L tensors [..., D]) -> [..., D]; mask [...]
            (True = a real position) is read only with do_layer_norm."""
            if not isinstance(layers, torch.Tensor):
                layers = torch.stack(list(layers))
            if layers.shape[0] != self.s.shape[0]:
                raise ValueError(f"layers: expected {self.s.shape[0]} layers, "
                                 f"got {layers.shape[0]}")
            if self.do_layer_norm:
                layers = self._layer_norm(layers, mask)
            w = self.weights.to(layers.dtype).reshape(-1, *([1] * (layers.dim() - 1)))
            return self.gamma.to(layers.dtype) * (w * layers).sum(dim=0)

        @staticmethod
        def _layer_norm(layers: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            keep = (torch.ones(layers.shape[1:-1], dtype=layers.dtype, device=layers.device)
                    if mask is None else mask.to(layers.dtype))
            if keep.shape != layers.shape[1:-1]:
                raise ValueError(f"mask: expected shape {tuple(layers.shape[1:-1])}, "
                                 f"got {tuple(keep.shape)}")
            keep = keep.unsqueeze(-1)                                     # [..., 1]
            n = keep.sum() * layers.shape[-1]
            dims = tuple(range(1, layers.dim()))                          # all but the layer
            mean = (layers * keep).sum(dim=dims, keepdim=True) / n
            var = (((layers - mean) * keep) ** 2).sum(dim=dims, keepdim=True) / n
            return (layers - mean) / torch.sqrt(var + LAYER_NORM_EPS)

    ScalarMix.__qualname__ = "ScalarMix"
    ScalarMix.__module__ = __name__
    return ScalarMix


def __getattr__(name: str):
    if name == "ScalarMix":
        globals()["ScalarMix"] = cls = _torch_scalar_mix()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
