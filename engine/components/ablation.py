"""Knocking heads and feed-forward blocks out of a Hugging Face transformer for the predictions
made meanwhile (Michel et al. 2019, "Are Sixteen Heads Really Better than One?": a head's
output multiplied by a gate ξ_h = 0).

A head is removed where it enters its layer's attention output projection (its slice
[h·head_dim, (h+1)·head_dim) of that projection's input; engine/families/hf/parts.py), so the
projection's bias and the other heads stay as they are. A feed-forward block is removed at its
output, before it joins the residual stream. Mode "zero" puts zeros there; mode "mean" puts in
what the part gives on average over REFERENCE_SENTENCES (mean ablation: the part's typical
output, not an input the model never saw)."""
from __future__ import annotations

import re
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

from engine.components.result import ABLATION_MODES
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.base import Sites, Transformer
from engine.families.hf.parts import hooked

# The reference set of mode "mean": plain everyday sentences with no blank, so that a masked
# LM's means are those of ordinary text (its [MASK] position is not in them).
REFERENCE_SENTENCES = (
    "The children walked to school in the morning rain.",
    "She poured a cup of coffee and opened the newspaper.",
    "We missed the last bus and had to walk home.",
    "My brother is cooking dinner for the whole family tonight.",
    "The shop on the corner closes early on Sundays.",
    "He left his keys on the kitchen table again.",
    "The weather was warm enough to eat outside.",
    "They painted the fence white over the weekend.",
    "I need to call the dentist to change my appointment.",
    "The dog barked at the postman every single day.",
    "Our neighbours planted tomatoes in their back garden.",
    "The train was late because of a problem with the signals.",
    "She reads a few pages of her book before going to sleep.",
    "The meeting starts at ten, so please be on time.",
    "He bought fresh bread and cheese at the market.",
    "The baby finally fell asleep after a long walk in the park.",
)

_ENTRY = re.compile(r"^(\d+)\.(\d+|\*|mlp)$")
_lock = threading.Lock()
# model -> (per layer: the mean of the attention output projection's input [heads × head_dim],
#           per layer: the mean of the feed-forward block's output [dim])
_means: "weakref.WeakKeyDictionary[object, tuple]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Ablation:
    """The parts knocked out: heads as (layer, head) and feed-forward blocks as layers, from 0."""

    heads: frozenset = frozenset()       # of (layer0, head0)
    mlps: frozenset = frozenset()        # of layer0
    n_heads: int = 0                     # heads per layer, to write a whole layer as "L.*"

    @property
    def spec(self) -> str:
        """The canonical spec, from 1: by layer, a whole layer's heads as "L.*", then "L.mlp"."""
        out = []
        for layer in sorted({l for l, _ in self.heads} | set(self.mlps)):
            hs = sorted(h for l, h in self.heads if l == layer)
            if hs and len(hs) == self.n_heads:
                out.append(f"{layer + 1}.*")
            else:
                out += [f"{layer + 1}.{h + 1}" for h in hs]
            if layer in self.mlps:
                out.append(f"{layer + 1}.mlp")
        return ",".join(out)

    def heads_of(self, layer: int) -> list[int]:
        return sorted(h for l, h in self.heads if l == layer)


def sites(adapter) -> Sites:
    """The parts of `adapter`'s transformer (base.Transformer.parts: found once per loaded
    model). ELMo and models that are not a transformer have no heads to knock out
    (UnsupportedPrediction)."""
    if not isinstance(adapter, Transformer):
        family = getattr(getattr(adapter, "info", None), "family", None)
        raise UnsupportedPrediction(f"{family or 'this'} models have no transformer heads or "
                                    "feed-forward blocks to knock out")
    return adapter.parts()


def parse(spec: str, sites: Sites) -> Ablation:
    """"L.H[,L.H…]" from 1: head H of layer L; "L.*" every head of layer L; "L.mlp" layer L's
    feed-forward block. Knocking out every head of every layer is refused: the model would
    read no other token at all, and what it predicts then says nothing about any one head."""
    entries = [e.strip() for e in (spec or "").split(",")]
    if not any(entries):
        raise EngineError("ablate names no part: give L.H, L.* or L.mlp, from 1")
    heads, mlps = set(), set()
    for entry in entries:
        m = _ENTRY.match(entry)
        if m is None:
            raise EngineError(f"ablate entries are L.H, L.* or L.mlp, from 1: got {entry!r}")
        layer, what = int(m.group(1)) - 1, m.group(2)
        try:
            sites.check_layer(layer)
            if what not in ("mlp", "*"):
                sites.check_head(layer, int(what) - 1)
        except UnsupportedPrediction as exc:
            # a typo in the spec, not something the model cannot do: a plain EngineError, so
            # that callers do not answer it with a list of models that can
            raise EngineError(str(exc)) from None
        if what == "mlp":
            mlps.add(layer)
        elif what == "*":
            heads.update((layer, h) for h in range(sites.n_heads))
        else:
            heads.add((layer, int(what) - 1))
    if len(heads) == sites.n_layers * sites.n_heads:
        raise EngineError("knocking out every head leaves no attention at all; keep at least "
                          "one")
    return Ablation(frozenset(heads), frozenset(mlps), sites.n_heads)


@contextmanager
def ablated(adapter, ablation: Ablation, mode: str = "zero"):
    """While inside, `adapter`'s model runs (on this thread) with the parts of `ablation`
    knocked out: zeros (mode "zero") or their mean over REFERENCE_SENTENCES (mode "mean")."""
    import torch

    if mode not in ABLATION_MODES:
        raise EngineError(f"ablate mode must be one of {', '.join(ABLATION_MODES)}, not "
                          f"{mode!r}")
    s = sites(adapter)
    means = reference_means(adapter) if mode == "mean" else None
    head_layers = {l: torch.tensor(ablation.heads_of(l)) for l in {l for l, _ in ablation.heads}}

    def attn_in(layer, x):
        heads = head_layers.get(layer)
        if heads is None:
            return None
        x = x.clone(memory_format=torch.contiguous_format)
        v = x.view(*x.shape[:-1], s.n_heads, s.head_dim)                 # (B, T, H, d)
        if means is None:
            v[..., heads, :] = 0
        else:
            mean = means[0][layer].to(x.device, x.dtype).view(s.n_heads, s.head_dim)
            v[..., heads, :] = mean[heads]
        return x

    def mlp_out(layer, y):
        if layer not in ablation.mlps:
            return None
        if means is None:
            return torch.zeros_like(y)
        return means[1][layer].to(y.device, y.dtype).expand_as(y).clone()

    with hooked(s, attn_in=attn_in if ablation.heads else None,
                mlp_out=mlp_out if ablation.mlps else None):
        yield


def reference_means(adapter) -> tuple:
    """Per layer, the mean over every token of REFERENCE_SENTENCES (special tokens included:
    the model reads them in every input) of its attention output projection's input and of its
    feed-forward block's output, as float32 tensors; worked out once per loaded model."""
    import torch

    s = sites(adapter)
    with _lock:
        found = _means.get(s.model)
    if found is not None:
        return found
    attn = [None] * s.n_layers
    mlp = [None] * s.n_layers
    count = 0

    def adder(store):
        def add(layer, t):
            total = t.detach().float().sum(dim=tuple(range(t.dim() - 1)))
            store[layer] = total if store[layer] is None else store[layer] + total
        return add

    # plain tensors even when the first caller is inside inference_mode: the means are used
    # later in graphs that record gradients (head_importance), where inference tensors fail
    with torch.inference_mode(False), torch.no_grad(), \
            hooked(s, attn_in=adder(attn), mlp_out=adder(mlp)):
        for sentence in REFERENCE_SENTENCES:
            count += adapter.forward_text(sentence)
    found = (tuple(a / count for a in attn), tuple(m / count for m in mlp))
    with _lock:
        _means[s.model] = found
    return found
