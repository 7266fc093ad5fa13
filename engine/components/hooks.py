"""Reading and rewriting a transformer's parts during a forward pass (engine/components/sites.py
says where they are): the input of each layer's attention output projection (its heads' outputs
side by side), each feed-forward block's output, and the residual stream between blocks.

Hooks act for the calling thread only: the app's other sessions may run the same model
meanwhile (as engine/attribution/hf.py's and forward.py's hooks do)."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

from engine.components.sites import Sites

# f(layer, tensor) -> a tensor to use instead, or None to leave it as it is
Edit = Callable[[int, object], object]


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def _with_first(value, first):
    return (first, *value[1:]) if isinstance(value, tuple) else first


@contextmanager
def hooked(model, sites: Sites, attn_in: Edit | None = None, mlp_out: Edit | None = None,
           resid: Edit | None = None):
    """While inside, every forward pass of `model` on this thread calls
    attn_in(layer, x): x [batch, tokens, heads × head_dim], the input of the layer's attention
      output projection;
    mlp_out(layer, y): y [batch, tokens, dim], the feed-forward block's output;
    resid(layer, h): h [batch, tokens, dim], the residual stream: layer 0 the embeddings' output
      (block 1's input), layer l block l's output (as `embed` numbers the layers).
    Layers count from 0 for blocks; each returns a replacement or None."""
    me = threading.get_ident()
    calls: dict[tuple[int, str], int] = {}
    handles = []

    def layer_of(module, role: str, fixed: int) -> int:
        if not sites.shared:
            return fixed
        key = (id(module), role)
        i = calls.get(key, 0)
        calls[key] = i + 1
        return i

    def reset(module, args):
        if threading.get_ident() == me:
            calls.clear()

    handles.append(model.register_forward_pre_hook(reset))

    def pre_edit(edit: Edit, role: str, fixed: int, only_first: bool = False):
        def hook(module, args, kwargs):
            if threading.get_ident() != me:
                return None
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
            if threading.get_ident() != me:
                return None
            layer = layer_of(module, role, fixed) + shift
            new = edit(layer, _first(output))
            return None if new is None else _with_first(output, new)
        return hook

    try:
        mods = (range(1) if sites.shared else range(sites.n_layers))
        if attn_in is not None:
            for i in mods:
                handles.append(sites.attn_out[i].register_forward_pre_hook(
                    pre_edit(attn_in, "attn", i), with_kwargs=True))
        if mlp_out is not None:
            for i in mods:
                handles.append(sites.mlp[i].register_forward_hook(post_edit(mlp_out, "mlp", i)))
        if resid is not None:
            handles.append(sites.blocks[0].register_forward_pre_hook(
                pre_edit(resid, "in", 0, only_first=True), with_kwargs=True))
            for i in mods:
                handles.append(sites.blocks[i].register_forward_hook(
                    post_edit(resid, "out", i, shift=1)))
        yield
    finally:
        for h in handles:
            h.remove()


def split_heads(x, sites: Sites):
    """[batch, tokens, heads × head_dim] -> a view [batch, tokens, heads, head_dim]."""
    return x.view(*x.shape[:-1], sites.n_heads, sites.head_dim)
