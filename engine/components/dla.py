"""Direct logit attribution (Elhage et al. 2021; TransformerLens's `logit_attrs`): how much each
attention head and each feed-forward block writes, directly, into the logit of the next word.

A pre-norm decoder's residual stream at the last position, where the final norm reads it, is a
sum: the embeddings' output + Σ_layers (Σ_heads head_h + the output projection's bias) +
Σ_layers mlp_l. With the final norm's scale frozen at this input (a LayerNorm: centre, divide by
this input's σ, times γ; an RMSNorm: divide by this input's rms, times its gain) the logit is
linear in the stream, so each part's share is its frozen-normed vector dotted with the target's
unembedding row (minus the contrast's). Biases (the norm's β, the output projections', the LM
head's) go to `rest`. Head h's part is its slice of the output projection's input,
z_h = x[h·hd:(h+1)·hd], times the matching weight columns.

Gemma-2's sandwich norms normalise each attention and feed-forward output before it joins the
stream: their scales are frozen too (at this position), so heads and blocks stay linear. Its
final soft-cap c·tanh(x/c) is no sum: the parts add up to the logit before it (said in
`logit_means`). GPT-NeoX's parallel residual is still a sum. Whatever the architecture, the parts
must add up to the model's own logit: otherwise the result is refused, not shown."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from engine.attribution.objective import check_pair, check_tokens
from engine.components.result import Components
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.base import NextPieces
from engine.families.hf.parts import hooked
from engine.families.hooks import AFTER, on_this_thread
from engine.text import WordText

# |Σ parts − the model's own logit| allowed: float32 rounding over a few hundred parts stays far
# below it; a 16-bit model rounds its stream at every addition, so there it grows with the logit
TOLERANCE = 1e-3
HALF_TOLERANCE = 2e-2
# the probe vectors' length: large enough that a norm's eps (≤ 1e-5) is lost against their
# mean square, small enough for float16
PROBE = 64.0


@dataclass(frozen=True)
class FrozenNorm:
    """A norm at one input x as a linear map plus a bias: norm(x) = scale · x̃ ∘ gain + bias,
    x̃ = x − mean(x) for a LayerNorm (`centred`), x for an RMSNorm. float64 CPU tensors."""

    scale: float
    gain: object
    bias: object
    centred: bool

    def readout(self, r):
        """q with ⟨scale · p̃ ∘ gain, r⟩ = ⟨p, q⟩ for every part p: what reading `r` off this
        norm's output asks of its input (the centring folded in: Σ p̃_i v_i = Σ p_i (v_i − v̄))."""
        v = self.gain * r
        return self.scale * (v - v.mean() if self.centred else v)


def _gain_of(norm, dim: int, like):
    """A norm's bias (its output at 0), its gain and whether it centres, read by evaluating the
    module on known vectors rather than its attributes, so any variant answers alike: Gemma's
    (1 + w), a LayerNorm's γ, an RMSNorm's w, OLMo's parameter-free norm."""
    import torch

    a = torch.ones(dim, dtype=torch.float64)
    a[1::2] = -1.0
    a = a - a.mean()                                 # zero mean, no entry zero
    rms = a.pow(2).mean().sqrt()

    def run(v):
        return norm(v.to(like).reshape(1, dim)).reshape(dim).double().cpu()

    bias = run(torch.zeros(dim, dtype=torch.float64))
    # norm(c·a) = a / rms(a) ∘ gain + bias for a LayerNorm and an RMSNorm alike (a has mean 0)
    gain = (run(PROBE * a) - bias) * rms / a
    # a constant vector: a LayerNorm centres it to nothing, an RMSNorm keeps its gain
    flat = run(torch.full((dim,), PROBE, dtype=torch.float64)) - bias
    centred = bool(flat.abs().max() <= 1e-3 * max(float(gain.abs().max()), 1e-12))
    return gain, bias, centred


def frozen(norm, x, y, half: bool) -> FrozenNorm:
    """`norm` with its scale frozen at its input x (its output there: y), both float64 [dim];
    UnsupportedPrediction when it is no LayerNorm or RMSNorm (not scale · x̃ ∘ gain + bias)."""
    gain, bias, centred = _gain_of(norm, x.shape[-1], next(_params(norm, x)))
    xt = x - x.mean() if centred else x
    u = xt * gain
    scale = float((y - bias) @ u / (u @ u)) if float(u @ u) else 0.0
    err = float((scale * u + bias - y).abs().max())
    if err > (HALF_TOLERANCE if half else TOLERANCE) * (1.0 + float(y.abs().max())):
        raise UnsupportedPrediction(f"its norm {type(norm).__name__} is no LayerNorm or "
                                    "RMSNorm (scale · x ∘ gain + bias), so it cannot be frozen "
                                    "into a linear map")
    return FrozenNorm(scale, gain, bias, centred)


def _params(module, x):
    """A tensor with the module's dtype and device (x's float dtype when it has none)."""
    for p in module.parameters():
        yield p
    yield x.float()


def _last(x):
    """The last position's vector of a one-text batch: [1, tokens, d] or, where a block
    flattens its batch before the feed-forward (OPT), [tokens, d]."""
    return x.detach().reshape(-1, x.shape[-1])[-1]


@contextmanager
def _recorded(modules):
    """While inside, each module's input and output at the last position of batch row 0 (as
    float64 CPU vectors) under seen[id(module)], for forward passes on this thread only (the
    app's other sessions may run the same model meanwhile)."""
    seen: dict[int, tuple] = {}

    def hook(module, args, output):
        out = output[0] if isinstance(output, tuple) else output
        seen[id(module)] = (_last(args[0]).double().cpu(), _last(out).double().cpu())

    with on_this_thread(*((m, AFTER, hook) for m in modules)):
        yield seen


def _last_only(model) -> dict:
    """Forward arguments that spare what is not read: the vocabulary projection of every
    position but the last (transformers' logits_to_keep, where the model takes it) and the
    key/value cache."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return {**({"logits_to_keep": 1} if "logits_to_keep" in params else {}),
            **({"use_cache": False} if "use_cache" in params else {})}


def _means(next_word: NextPieces, target: str, contrast: str | None, cap) -> str:
    def one(ids, pieces, word):
        if len(ids) == 1:
            return f"{pieces[0]!r}"
        return (f"{pieces[0]!r} (the first of the {len(ids)} pieces of {word!r}: "
                + ", ".join(repr(p) for p in pieces) + ")")

    said = (f"the logit of {one(next_word.spelled[0], next_word.spelled_tokens[0], target)} as "
            "the next token")
    if contrast is not None:
        said += (" minus that of "
                 f"{one(next_word.spelled[1], next_word.spelled_tokens[1], contrast)}")
    if cap:
        said += (f", before Gemma-2's final soft-cap {cap:g}·tanh(x/{cap:g}), which no sum of "
                 "parts passes through")
    return said


def components(adapter, text: WordText, target: str, contrast: str | None) -> Components:
    """Each head's, feed-forward block's and the embeddings' direct effect on the logit of
    `target` as the next word after `text` (minus `contrast`'s), at the last position."""
    import torch

    with torch.no_grad():       # the probes of the norms too: no graph on the weights
        return _components(adapter, text, target, contrast)


def _components(adapter, text: WordText, target: str, contrast: str | None) -> Components:
    import torch

    # the word rule of every view with a target (attribution, head importance, patching)
    target, contrast = check_pair(target, contrast)
    sites = adapter.parts()
    model = sites.model
    arch = type(model).__name__
    if sites.final_norm is None:
        raise UnsupportedPrediction(f"{arch} has no final norm before its LM head (a post-norm "
                                    "model), so its logit is no sum of its parts")
    # each word spelled after the text, as the attribution's next word is
    # (engine/families/hf/objective.py next_word)
    next_word = adapter.next_pieces(text, [target] + ([contrast] if contrast is not None else []))
    ids, pieces, spelled = next_word.ids, next_word.tokens, next_word.spelled
    check_tokens(target, contrast, spelled[0], spelled[1] if contrast is not None else ())
    t_id = spelled[0][0]
    c_id = spelled[1][0] if contrast is not None else None
    if c_id == t_id:
        raise EngineError(f"{target!r} and {contrast!r} begin with the same token, so their "
                          "next-token logits are the same")
    head = model.get_output_embeddings()
    sandwich = sites.sandwich
    extra = [n for pair in sandwich if pair for n in pair]

    L = sites.n_layers
    z, mlp_out, embed_in = [None] * L, [None] * L, []

    def take_z(layer, x):
        z[layer] = _last(x)
        return None

    def take_mlp(layer, y):
        mlp_out[layer] = _last(y).double().cpu()
        return None

    def take_resid(layer, h):
        if layer == 0:
            embed_in.append(_last(h).double().cpu())
        return None

    device = next(model.parameters()).device
    with hooked(sites, attn_in=take_z, mlp_out=take_mlp, resid=take_resid), \
            _recorded([sites.final_norm, head, *extra]) as seen:
        model(input_ids=torch.tensor([ids], device=device), **_last_only(model))
    x_final, y_final = seen[id(sites.final_norm)]
    raw = seen[id(head)][1]                          # the head's logits, before any soft-cap
    W = head.weight
    if W.shape[-1] != x_final.shape[-1]:
        raise UnsupportedPrediction(f"{arch}'s LM head reads {W.shape[-1]} dimensions, its "
                                    f"residual stream has {x_final.shape[-1]}: something "
                                    "sits between them, so its logit is no sum of its parts")
    half = next(model.parameters()).dtype != torch.float32
    w = W[t_id].double().cpu() - (W[c_id].double().cpu() if c_id is not None else 0.0)
    logit = float(raw[t_id] - (raw[c_id] if c_id is not None else 0.0))
    final = frozen(sites.final_norm, x_final, y_final, half)
    r = final.readout(w)                             # ⟨part, r⟩: the part's direct effect
    rest = float(final.bias @ w)
    bias = getattr(head, "bias", None)
    if bias is not None:
        rest += float(bias[t_id] - (bias[c_id] if c_id is not None else 0.0))

    heads, mlp, more = _layer_parts(sites, sandwich, seen, z, mlp_out, r, half)
    rest += more
    embed = float(embed_in[0] @ r)
    total = embed + heads.sum() + mlp.sum() + rest
    tol = HALF_TOLERANCE * (1.0 + abs(logit)) if half else TOLERANCE
    if not abs(total - logit) <= tol:
        raise UnsupportedPrediction(
            f"the parts do not add up to {arch}'s logit (Σ parts {total:.6g}, the model's "
            f"{logit:.6g}): its blocks do more than add their heads' and feed-forward outputs "
            "to the residual stream, so their direct effects would be misstated")
    cap = getattr(model.config, "final_logit_softcapping", None)
    return Components(model_id=adapter.info.model_id, target=target, contrast=contrast,
                      tokens=tuple(pieces), heads=heads.astype(np.float32),
                      mlp=mlp.astype(np.float32), embed=embed, rest=rest, logit=logit,
                      logit_means=_means(next_word, target, contrast, cap))


def _layer_parts(sites, sandwich, seen, z, mlp_out, r, half):
    """Each layer's heads' and feed-forward block's direct effects along the readout `r`, and
    the biases they add (their output projections', Gemma-2's frozen sandwich norms')."""
    import torch

    L, H, hd = sites.n_layers, sites.n_heads, sites.head_dim
    rest = 0.0
    heads = np.zeros((L, H), np.float64)
    mlp = np.zeros(L, np.float64)
    for layer in range(L):
        r_attn = r_mlp = r
        if sandwich[layer]:
            post_attn, post_ff = (frozen(n, *seen[id(n)], half) for n in sandwich[layer])
            r_attn, r_mlp = post_attn.readout(r), post_ff.readout(r)
            rest += float(post_attn.bias @ r) + float(post_ff.bias @ r)
        proj = sites.attn_out[layer]
        Wo = proj.weight.detach()
        Wo = Wo if Wo.dtype == torch.float64 else Wo.float()    # no 16-bit sums of products
        # GPT-2's Conv1D keeps its weight as [in, out]; nn.Linear as [out, in]
        q_dir = r_attn.to(Wo)
        q = Wo @ q_dir if type(proj).__name__ == "Conv1D" else Wo.T @ q_dir
        heads[layer] = (z[layer].to(q) * q).view(H, hd).sum(-1).double().cpu().numpy()
        if getattr(proj, "bias", None) is not None:
            rest += float(proj.bias.detach().double().cpu() @ r_attn)
        mlp[layer] = float(mlp_out[layer] @ r_mlp)
    return heads, mlp, rest
