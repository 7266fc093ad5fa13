"""Activation patching (engine/components/patching.py) on the tiny checkpoint of every decoder
in tests/zoo.py (kind next) and of masked LMs (kind masked): each patched cell is checked
against a hook written here by hand with torch's own hook API, the residual stream's rows
against the clean run, and the grid against causality."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.api import Engine
from engine.attribution.explain import objective_of
from engine.components import patching
from engine.families.hf.parts import hooked, sites_of
from engine.errors import EngineError
from engine.text import to_word_text
from tests.zoo import DECODERS

# "river", "water", "bank" are one piece and "banks" two in every zoo tokenizer, so the clean
# and corrupted texts read alike and a contrast of another length is at hand
NEXT = ("She sat on the river bank and watched the", "She sat on the water bank and watched the")
MASKED = ("She sat on the river [MASK] and watched the water .",
          "She sat on the water [MASK] and watched the water .")
MASKED_LMS = ("bert", "roberta")
TOL = 1e-4


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("patch-zoo")
    folders = {name: str(zoo.copy(f"arch:{name}", root / name))
               for name in (*DECODERS, *MASKED_LMS)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), folders


def case(name: str):
    """(texts, kind) for an architecture of the zoo."""
    return (NEXT, "next") if name in DECODERS else (MASKED, "masked")


def _first(out):
    """A module's output as [batch, tokens, width] (OPT's feed-forward gives its tokens
    flattened, [tokens, width], for a batch of one)."""
    out = out[0] if isinstance(out, tuple) else out
    return out if out.dim() == 3 else out[None]


# where each architecture's parts sit, as transformers names its modules, written here rather
# than read from the engine (engine.families.hf.parts): the blocks, then under block i the
# attention's output projection (its input: the heads side by side) and the feed-forward
# block whose output joins the residual stream
MODULES = {"gpt2": ("transformer.h", "attn.c_proj", "mlp"),
           "gpt_neox": ("gpt_neox.layers", "attention.dense", "mlp"),
           "opt": ("model.decoder.layers", "self_attn.out_proj", "fc2"),
           **{llama_like: ("model.layers", "self_attn.o_proj", "mlp")
              for llama_like in ("llama", "qwen2", "mistral", "phi3", "gemma2")},
           "bert": ("bert.encoder.layer", "attention.output.dense", "output.dense"),
           "roberta": ("roberta.encoder.layer", "attention.output.dense", "output.dense")}


def by_hand(adapter, site: str, row: int, col: int, texts, target, contrast, kind) -> float:
    """f of the corrupted text with cell (row, col) of `site` set to the clean run's, by torch
    hooks on the module itself, named here per architecture (MODULES). Each forward pass (one
    per reading: the target's, then the contrast's) takes its own clean activation; a reading
    with another number of blank pieces has its positions after the blank shifted by the
    difference."""
    model = adapter.model
    blocks, attn_out, mlp = MODULES[model.config.model_type]
    if site == "residual":      # row r > 0: block r's output; row 0: the first block's input
        module, on_input = (model.get_submodule(f"{blocks}.{row - 1}" if row else f"{blocks}.0"),
                            not row)
    elif site == "mlp":
        module, on_input = model.get_submodule(f"{blocks}.{row}.{mlp}"), False
    else:
        module, on_input = model.get_submodule(f"{blocks}.{row}.{attn_out}"), True
    clean, bad = (objective_of(adapter, to_word_text(t), target, contrast, kind) for t in texts)
    seen = []

    def grab_in(m, args, kwargs):
        seen.append((args[0] if args else kwargs["hidden_states"])[0].clone())

    def grab_out(m, args, out):
        seen.append(_first(out)[0].clone())

    handle = (module.register_forward_pre_hook(grab_in, with_kwargs=True) if on_input else
              module.register_forward_hook(grab_out))
    with torch.no_grad():
        clean.value(clean.x)
    handle.remove()
    blank = (np.nonzero(clean.piece_to_word == to_word_text(texts[0]).one_mask())[0][0]
             if kind == "masked" else len(seen[0]))
    calls = [0]

    def where(k: int) -> int | None:
        shift = len(seen[k]) - len(seen[0])
        t = col if col < blank else col + shift
        return t if 0 <= t < len(seen[k]) else None

    def put(h, k):
        t = where(k)
        if t is None:
            return None
        h = h.clone()
        h[:, t] = seen[k][t]
        return h

    def put_in(m, args, kwargs):
        k, calls[0] = calls[0], calls[0] + 1
        if args:
            new = put(args[0], k)
            return None if new is None else ((new, *args[1:]), kwargs)
        new = put(kwargs["hidden_states"], k)
        return None if new is None else (args, {**kwargs, "hidden_states": new})

    def put_out(m, args, out):
        k, calls[0] = calls[0], calls[0] + 1
        first = out[0] if isinstance(out, tuple) else out
        new = put(_first(out), k)
        if new is None:
            return None
        new = new.view(first.shape)
        return (new, *out[1:]) if isinstance(out, tuple) else new

    handle = (module.register_forward_pre_hook(put_in, with_kwargs=True) if on_input else
              module.register_forward_hook(put_out))
    try:
        with torch.no_grad():
            return float(bad.value(bad.x)[0])
    finally:
        handle.remove()


@pytest.mark.parametrize("name", [*DECODERS, *MASKED_LMS])
def test_cells_equal_hooks_written_by_hand(served, name):
    engine, folders = served
    adapter = engine.adapter(folders[name])
    texts, kind = case(name)
    # the contrast "banks" is two pieces, the target one: reading 1 is a token longer
    for site in ("residual", "attention", "mlp"):
        p = engine.patch(folders[name], *texts, "bank" if kind == "masked" else "water",
                         "banks", site=site, kind=kind)
        n_layers = sites_of(adapter.model).n_layers
        assert p.patched.shape == (n_layers + (site == "residual"), len(p.tokens))
        last = len(p.tokens) - 1
        for row, col in ((1, 5), (n_layers - 1, last), (0, 2)):
            want = by_hand(adapter, site, row, col, texts, p.target, p.contrast, kind)
            assert p.patched[row, col] == pytest.approx(want, abs=TOL), (site, row, col)
        assert np.ptp(p.patched) > 1e-3       # cells differ: the grid is not one number


@pytest.mark.parametrize("name", [*DECODERS, *MASKED_LMS])
def test_a_whole_residual_row_from_the_clean_run_gives_clean_f(served, name):
    engine, folders = served
    adapter = engine.adapter(folders[name])
    texts, kind = case(name)
    target = "bank" if kind == "masked" else "water"
    sites = sites_of(adapter.model)
    clean, bad = (objective_of(adapter, to_word_text(t), target, None, kind) for t in texts)
    f_clean, acts = patching.record(adapter.model, sites, "residual", clean.value, clean.x)
    with torch.no_grad():
        f_bad = float(bad.value(bad.x)[0])
    assert abs(f_clean - f_bad) > 1e-3        # the corruption matters, so the check can fail
    for layer in range(sites.n_layers + 1):
        def whole(at, h, layer=layer):
            return acts[0][at].expand_as(h).clone() if at == layer else None

        with torch.no_grad(), hooked(sites, resid=whole):
            f = float(bad.value(bad.x)[0])
        assert f == pytest.approx(f_clean, abs=TOL), layer
    # the read position's last hidden state alone carries the prediction
    p = engine.patch(folders[name], *texts, target, site="residual", kind=kind)
    read = len(p.tokens) - 1 if kind == "next" else p.tokens.index(
        adapter.tokenizer.mask_token)
    assert p.patched[-1, read] == pytest.approx(p.clean, abs=TOL)
    assert p.clean == pytest.approx(f_clean, abs=TOL)
    assert p.corrupt == pytest.approx(f_bad, abs=TOL)


@pytest.mark.parametrize("name", DECODERS)
def test_a_decoder_ignores_patches_after_its_read_position(served, name):
    engine, folders = served
    adapter = engine.adapter(folders[name])
    model = adapter.model
    sites = sites_of(model)
    tok = adapter.tokenizer
    ids = [tok(t)["input_ids"] for t in NEXT]
    assert len(ids[0]) == len(ids[1])
    embed = model.get_input_embeddings()
    with torch.no_grad():
        x_clean, x_bad = (embed(torch.tensor([i])) for i in ids)
    read = len(ids[0]) - 4                   # read well before the end: later cells exist
    want = ids[0][read + 1]

    def value(batch):                        # log p(the clean next token) at `read`
        logits = model(inputs_embeds=batch, use_cache=False).logits[:, read].float()
        return torch.log_softmax(logits, -1)[:, want]

    for site in ("residual", "mlp", "attention"):
        f_clean, acts = patching.record(model, sites, site, value, x_clean)
        with torch.no_grad():
            f_bad = float(value(x_bad)[0])
        g = patching.grid(model, sites, site, value, x_bad, acts,
                          patching.Layout.single(len(ids[0])), chunk=7)
        np.testing.assert_allclose(g[:, read + 1:], f_bad, atol=1e-5)
        assert np.abs(g[:, :read + 1] - f_bad).max() > 1e-3, site
        if site == "residual":
            assert g[-1, read] == pytest.approx(f_clean, abs=TOL)


def test_the_chunk_size_changes_nothing(served):
    engine, folders = served
    adapter = engine.adapter(folders["llama"])
    one = patching.patch(adapter, *NEXT, "water", "banks", site="mlp", chunk=1)
    many = patching.patch(adapter, *NEXT, "water", "banks", site="mlp")
    assert patching.chunk_size(adapter.model, len(many.tokens), many.patched.size) > 1
    np.testing.assert_allclose(one.patched, many.patched, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_noise_sits_on_the_named_words_only(served, name):
    engine, folders = served
    texts, kind = case(name)
    target = "bank" if kind == "masked" else "water"
    p = engine.patch(folders[name], texts[0], None, target, site="residual", kind=kind,
                     noise_words="river", seeds=3)
    at = p.tokens.index(next(t for t in p.tokens if "river" in t))
    assert abs(p.corrupt - p.clean) > 1e-3
    # row 0 is the input: putting back the one noised piece undoes all the noise, and putting
    # back any other piece (never noised) changes nothing
    assert p.patched[0, at] == pytest.approx(p.clean, abs=TOL)
    others = np.delete(p.patched[0], at)
    np.testing.assert_allclose(others, p.corrupt, atol=1e-5)
    assert "3 seeds" in p.corruption and "'river'" in p.corruption
    # the seeds are averaged: one seed alone gives another corrupted f
    one = engine.patch(folders[name], texts[0], None, target, site="residual", kind=kind,
                       noise_words="river", seeds=1)
    assert one.corrupt != pytest.approx(p.corrupt, abs=1e-6)


@pytest.mark.parametrize("args, says", [
    (dict(clean=NEXT[0], corrupt="She sat on the lake bank and watched the"),
     "reads as 12 tokens and the corrupted text as 16"),
    (dict(clean=NEXT[0], corrupt=NEXT[1], site="heads"), "site must be one of"),
    (dict(clean=NEXT[0], corrupt=None, noise_words="Paris"), "'Paris' is not a word of"),
    (dict(clean=NEXT[0], corrupt=None, noise_words="bank river"), "do not stand together"),
    (dict(clean=NEXT[0], corrupt=NEXT[1], kind="masked"), "kind 'masked' is not supported"),
    (dict(clean=NEXT[0], corrupt=NEXT[1], noise_words="river"), "not both"),
    (dict(clean=NEXT[0], corrupt=None, noise_words="river", seeds=0), "seeds must be"),
])
def test_bad_input_is_one_line(served, args, says):
    engine, folders = served
    with pytest.raises(EngineError) as err:
        engine.patch(folders["gpt2"], target="water", **args)
    assert says in str(err.value) and "\n" not in str(err.value)
    if "tokens" in says:
        assert "must tokenize alike" in str(err.value)


def test_a_masked_lm_refuses_the_next_word(served):
    engine, folders = served
    with pytest.raises(EngineError, match="kind 'next' is not supported.*\\[MASK\\]"):
        engine.patch(folders["bert"], *MASKED, "bank", kind="next")


@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_cells_the_corruption_leaves_alone_are_not_rerun(served, name):
    engine, folders = served
    adapter = engine.adapter(folders[name])
    model, sites = adapter.model, sites_of(adapter.model)
    texts, kind = case(name)
    target = "bank" if kind == "masked" else "water"
    clean, bad = (objective_of(adapter, to_word_text(t), target, None, kind) for t in texts)
    layout = patching.Layout.single(len(clean.pieces))
    f_clean, acts = patching.record(model, sites, "residual", clean.value, clean.x)
    f_bad, bad_acts = patching.record(model, sites, "residual", bad.value, bad.x)
    rows = []
    handle = model.register_forward_pre_hook(
        lambda m, args, kwargs: rows.append((kwargs.get("inputs_embeds") if "inputs_embeds"
                                             in kwargs else args[0]).shape[0]),
        with_kwargs=True)
    try:
        full = patching.grid(model, sites, "residual", bad.value, bad.x, acts, layout)
        n_full, rows[:] = sum(rows), []
        skipped = patching.grid(model, sites, "residual", bad.value, bad.x, acts, layout,
                                corrupt=(f_bad, bad_acts))
        n_skipped = sum(rows)
    finally:
        handle.remove()
    np.testing.assert_allclose(skipped, full, atol=1e-5)
    same = patching.unchanged(acts, bad_acts, layout)
    assert n_full == full.size and n_skipped == full.size - same.sum()
    # a decoder's positions before "river"/"water" are the same in both runs at every layer;
    # a masked LM's attention sees the changed word from everywhere, so only its input
    # embeddings of the other words stay the same
    first = next(i for i, (a, b) in enumerate(zip(clean.pieces, bad.pieces)) if a != b)
    if kind == "next":
        assert same[:, :first].all() and not same[1:, first:].any()
    else:
        assert same[0].sum() == len(clean.pieces) - 1 and not same[1:].any()


def test_a_window_restores_that_many_layers_at_once(served):
    engine, folders = served
    adapter = engine.adapter(folders["llama"])
    sites = sites_of(adapter.model)
    clean, bad = (objective_of(adapter, to_word_text(t), "water", None, "next") for t in NEXT)
    col = len(clean.pieces) - 1          # the read position: the last layer's MLP counts
    seen = {}

    def grab(layer):
        def hook(m, args, out):
            seen[layer] = _first(out)[0].clone()
        return hook

    def put(layer):
        def hook(m, args, out):
            h = _first(out).clone()
            h[:, col] = seen[layer][col]
            return h.view(out.shape)
        return hook

    handles = [sites.mlp[i].register_forward_hook(grab(i)) for i in (0, 1)]
    with torch.no_grad():
        clean.value(clean.x)
    for h in handles:
        h.remove()
    handles = [sites.mlp[i].register_forward_hook(put(i)) for i in (0, 1)]
    try:
        with torch.no_grad():
            want = float(bad.value(bad.x)[0])
    finally:
        for h in handles:
            h.remove()
    p = patching.patch(adapter, *NEXT, "water", site="mlp", window=2)
    one = patching.patch(adapter, *NEXT, "water", site="mlp")
    assert p.patched[0, col] == pytest.approx(want, abs=TOL)
    assert abs(p.patched[0, col] - one.patched[0, col]) > 1e-4   # two layers, not one
    np.testing.assert_allclose(p.patched[1], one.patched[1], atol=1e-5)   # the last row: one
    assert "each cell restores 2 rows" in p.corruption
    with pytest.raises(EngineError, match="the window must be between 1 and 2 rows, not 3"):
        patching.patch(adapter, *NEXT, "water", site="mlp", window=3)
