"""Where each part of a Hugging Face transformer sits, and the hooks that read or rewrite them:
per layer, the module whose input is its heads' outputs side by side (the attention's output
projection: `o_proj`, `attention.output.dense`, GPT-2's `attn.c_proj`, ...), the feed-forward
block whose output joins the residual stream, the block itself, the final norm before the LM
head, and the modules whose outputs are the hidden states. The one home of the module names
transformers gives each architecture: the views above the families ask the adapter for its
parts (base.Transformer.parts) and never name a module.

A head is removed, patched or read where it enters the output projection (its slice of that
projection's input), so grouped-query heads are the query heads. An architecture whose names
match none is refused with a line that says which part was not found (`sites_of`)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from engine.errors import UnsupportedPrediction
from engine.families.base import Sites
from engine.families.hooks import AFTER, BEFORE, on_this_thread

# under one block, the attention output projection and the feed-forward output, by the names
# the architectures in transformers give them (first match wins)
ATTENTION_OUT = ("self_attn.o_proj", "attention.output.dense", "attention.out_lin",
                 "attn.c_proj", "attn.Wo", "attention.dense", "self_attn.out_proj",
                 "self_attn.dense", "attn.attention.out_proj", "attn.out_proj")
FEED_FORWARD = ("mlp", "ffn_output", "ffn", "output.dense", "fc2")   # ALBERT's ffn is its first linear
# the blocks, under the model (a module list)
BLOCK_LISTS = ("model.layers", "model.decoder.layers", "transformer.h", "gpt_neox.layers",
               "bert.encoder.layer", "roberta.encoder.layer", "electra.encoder.layer",
               "deberta.encoder.layer", "distilbert.transformer.layer", "encoder.layer",
               "layers", "h")
# the norm applied after the last block, under the base model (GPT-2's transformer.ln_f,
# Llama's model.norm, OPT's model.decoder.final_layer_norm, ...)
FINAL_NORM = ("ln_f", "norm", "final_layer_norm", "final_layernorm", "decoder.final_layer_norm")
# under one block, the norms on its attention and on its feed-forward output (`_sandwich`)
SANDWICH = ("post_attention_layernorm", "post_feedforward_layernorm")


def _get(root, dotted: str):
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _heads(config) -> int | None:
    for name in ("num_attention_heads", "n_head", "n_heads", "num_heads"):
        n = getattr(config, name, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def _in_features(module) -> int | None:
    if hasattr(module, "in_features"):
        return int(module.in_features)
    weight = getattr(module, "weight", None)          # GPT-2's Conv1D: weight [in, out]
    if weight is not None and type(module).__name__ == "Conv1D":
        return int(weight.shape[0])
    return None


def sites_of(model) -> Sites:
    """The parts of `model` (a transformers PreTrainedModel), or UnsupportedPrediction naming
    the part not found. The adapters keep what it finds (base.Transformer.parts)."""
    import torch

    arch = type(model).__name__
    n_heads = _heads(model.config)
    if n_heads is None:
        raise UnsupportedPrediction(f"{arch} names no attention head count in its config, so "
                                    "its heads cannot be told apart")
    albert = _get(model, "albert.encoder.albert_layer_groups")
    if albert is not None:
        groups = list(albert)
        if len(groups) != 1 or len(groups[0].albert_layers) != 1:
            raise UnsupportedPrediction(f"{arch} with {len(groups)} layer groups: only one "
                                        "shared block is supported")
        block = groups[0].albert_layers[0]
        n = model.config.num_hidden_layers
        blocks = (block,) * n
        shared = True
    else:
        blocks = None
        for dotted in BLOCK_LISTS:
            found = _get(model, dotted)
            if isinstance(found, torch.nn.ModuleList) and len(found):
                blocks = tuple(found)
                break
        if blocks is None:
            raise UnsupportedPrediction(f"{arch}'s transformer blocks were not found, so its "
                                        "parts cannot be reached")
        shared = False

    def one_of(block, names: tuple[str, ...], what: str):
        for dotted in names:
            found = _get(block, dotted)
            if isinstance(found, torch.nn.Module):
                return found
        raise UnsupportedPrediction(f"{arch}'s {what} was not found in its blocks, so it "
                                    "cannot be knocked out or patched")

    attn_out = tuple(one_of(b, ATTENTION_OUT, "attention output projection") for b in blocks)
    mlp = tuple(one_of(b, FEED_FORWARD, "feed-forward block") for b in blocks)
    width = _in_features(attn_out[0])
    if width is None or width % n_heads:
        raise UnsupportedPrediction(f"{arch}'s attention output projection takes {width} "
                                    f"inputs, not a multiple of its {n_heads} heads")
    return Sites(model=model, n_layers=len(blocks), n_heads=n_heads,
                 head_dim=width // n_heads, blocks=blocks, attn_out=attn_out, mlp=mlp,
                 final_norm=final_norm(model), sandwich=tuple(_sandwich(b) for b in blocks),
                 shared=shared)


def final_norm(model):
    """The norm applied after the last block (GPT-2's `transformer.ln_f`, Llama's
    `model.norm`), or None: a post-norm encoder has none."""
    for name in FINAL_NORM:
        try:
            return model.base_model.get_submodule(name)
        except AttributeError:
            continue
    return None


def _sandwich(block):
    """Gemma-2's (and OLMo-2's) norms on a block's outputs, or None: a block with a
    post_feedforward_layernorm normalises its attention output with post_attention_layernorm
    (in Llama that name is the norm before the MLP, which has no post_feedforward_layernorm)."""
    attn, ff = (getattr(block, name, None) for name in SANDWICH)
    return (attn, ff) if ff is not None and attn is not None else None


def hidden_state_blocks(base_model) -> list:
    """The modules whose outputs are the hidden states, in order: the class transformers itself
    records them from (`_can_record_outputs["hidden_states"]`), else the ModuleList of
    num_hidden_layers blocks. ALBERT shares one layer across its depth: a single module then
    runs once per layer, and callers count its calls. Wider than `sites_of`'s blocks: it asks
    for no attention or feed-forward module inside them, so every architecture's layers can be
    read one by one (forward.hidden_until)."""
    import torch

    target = (getattr(type(base_model), "_can_record_outputs", None) or {}).get("hidden_states")
    cls = getattr(target, "target_class", target)
    if isinstance(cls, type):
        found = [m for m in base_model.modules() if isinstance(m, cls)]
        if found:
            return found
    n = base_model.config.num_hidden_layers
    for m in base_model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n:
            return list(m)
    raise UnsupportedPrediction("this architecture's blocks could not be found")


# f(layer, tensor) -> a tensor to use instead, or None to leave it as it is
Edit = Callable[[int, object], object]


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def _with_first(value, first):
    return (first, *value[1:]) if isinstance(value, tuple) else first


@contextmanager
def hooked(sites: Sites, attn_in: Edit | None = None, mlp_out: Edit | None = None,
           resid: Edit | None = None):
    """While inside, every forward pass of `sites.model` on this thread calls
    attn_in(layer, x): x [batch, tokens, heads × head_dim], the input of the layer's attention
      output projection;
    mlp_out(layer, y): y [batch, tokens, dim], the feed-forward block's output;
    resid(layer, h): h [batch, tokens, dim], the residual stream: layer 0 the embeddings' output
      (block 1's input), layer l block l's output (as `embed` numbers the layers).
    Layers count from 0 for blocks; each returns a replacement or None."""
    calls: dict[tuple[int, str], int] = {}

    def layer_of(module, role: str, fixed: int) -> int:
        if not sites.shared:
            return fixed
        key = (id(module), role)
        i = calls.get(key, 0)
        calls[key] = i + 1
        return i

    def reset(module, args, kwargs):
        calls.clear()

    def pre_edit(edit: Edit, role: str, fixed: int, only_first: bool = False):
        def hook(module, args, kwargs):
            layer = layer_of(module, role, fixed)
            if only_first and layer != 0:
                return None
            if args:
                new = edit(layer, args[0])
                return None if new is None else ((new, *args[1:]), kwargs)
            name = next(k for k in ("hidden_states", "input", "x") if k in kwargs)
            new = edit(layer, kwargs[name])
            return None if new is None else (args, {**kwargs, name: new})
        return hook

    def post_edit(edit: Edit, role: str, fixed: int, shift: int = 0):
        def hook(module, args, output):
            layer = layer_of(module, role, fixed) + shift
            new = edit(layer, _first(output))
            return None if new is None else _with_first(output, new)
        return hook

    hooks = [(sites.model, BEFORE, reset)]
    mods = range(1) if sites.shared else range(sites.n_layers)
    if attn_in is not None:
        hooks += [(sites.attn_out[i], BEFORE, pre_edit(attn_in, "attn", i)) for i in mods]
    if mlp_out is not None:
        hooks += [(sites.mlp[i], AFTER, post_edit(mlp_out, "mlp", i)) for i in mods]
    if resid is not None:
        hooks.append((sites.blocks[0], BEFORE, pre_edit(resid, "in", 0, only_first=True)))
        hooks += [(sites.blocks[i], AFTER, post_edit(resid, "out", i, shift=1)) for i in mods]
    with on_this_thread(*hooks):
        yield

