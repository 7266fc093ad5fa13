"""Where each part of a Hugging Face transformer sits: per layer, the module whose input is its
heads' outputs side by side (the attention's output projection: `o_proj`,
`attention.output.dense`, GPT-2's `attn.c_proj`, ...), the feed-forward block whose output joins
the residual stream, the block itself, and the final norm before the LM head.

A head is removed, patched or read where it enters the output projection (its slice of that
projection's input), so grouped-query heads are the query heads. Found by the module names
transformers gives each architecture; one that matches none is refused with a line that says
which part was not found (`sites_of`)."""
from __future__ import annotations

from dataclasses import dataclass

from engine.errors import UnsupportedPrediction

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
FINAL_NORM = ("model.norm", "model.final_layernorm", "transformer.ln_f", "gpt_neox.final_layer_norm",
              "model.decoder.final_layer_norm")


@dataclass(frozen=True, eq=False)
class Sites:
    """One model's parts, per layer (index 0 = the first block)."""

    n_layers: int
    n_heads: int
    head_dim: int
    blocks: tuple          # the block modules, one per layer (ALBERT: the one shared block)
    attn_out: tuple        # the attention output projection of each layer
    mlp: tuple             # the feed-forward module of each layer (its output: the block's)
    final_norm: object     # the norm before the LM head, or None (post-norm encoders)
    shared: bool = False   # one block serves every layer (ALBERT): hooks count its calls

    def check_layer(self, layer: int, what: str = "layer") -> None:
        if not 0 <= layer < self.n_layers:
            raise UnsupportedPrediction(f"{what} {layer + 1} is out of range: this model has "
                                        f"layers 1-{self.n_layers}")

    def check_head(self, layer: int, head: int) -> None:
        self.check_layer(layer)
        if not 0 <= head < self.n_heads:
            raise UnsupportedPrediction(f"head {layer + 1}.{head + 1} is out of range: this "
                                        f"model's layers have heads 1-{self.n_heads}")


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
    the part not found."""
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
    final = None
    for dotted in FINAL_NORM:
        found = _get(model, dotted)
        if isinstance(found, torch.nn.Module):
            final = found
            break
    return Sites(n_layers=len(blocks), n_heads=n_heads, head_dim=width // n_heads,
                 blocks=blocks, attn_out=attn_out, mlp=mlp, final_norm=final, shared=shared)
