"""Head importance (engine/components/importance.py) on tiny random checkpoints: each head's
knocked-out drop is f minus f under Engine.ablated of that head, the batched rows give what one
forward pass per head gives, and the gate gradient is a finite difference of f worked out here
with a hand-written hook that scales the head's slice."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.api import Engine
from engine.attribution.explain import objective_of
from engine.components import importance
from engine.errors import EngineError
from engine.text import to_word_text
from tests.zoo import HEADS, LAYERS

MASKED = "She sat on the river [MASK] and watched the water."
PREFIX = "She sat on the river bank and watched the"
# name -> (text, kind, target, contrast)
CASES = {"bert": (MASKED, "masked", "bank", None),
         "gpt2": (PREFIX, "next", "water", "river"),
         "llama": (PREFIX, "next", "water", None)}


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("importance-zoo")
    folders = {name: str(zoo.copy(f"arch:{name}", root / name)) for name in CASES}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield folders


@pytest.fixture(scope="module")
def engine(models):
    return Engine(device="cpu")


def f_of(engine, folder, name, ablate=None):
    text, kind, target, contrast = CASES[name]
    with engine.ablated(folder, ablate):
        obj = objective_of(engine.adapter(folder), to_word_text(text), target, contrast, kind)
        with torch.no_grad():
            return float(obj.value(obj.x)[0])


@pytest.mark.parametrize("name", list(CASES))
def test_knocked_is_f_minus_f_with_that_head_ablated(models, engine, name):
    text, kind, target, contrast = CASES[name]
    hi = engine.head_importance(models[name], text, target, contrast, kind)
    f = f_of(engine, models[name], name)
    assert hi.f == pytest.approx(f, abs=1e-6)
    assert hi.knocked.shape == hi.gradient.shape == (LAYERS, HEADS)
    want = np.array([[f - f_of(engine, models[name], name, f"{l + 1}.{h + 1}")
                      for h in range(HEADS)] for l in range(LAYERS)])
    np.testing.assert_allclose(hi.knocked, want, atol=2e-5)
    assert np.abs(want).max() > 1e-3          # the heads matter to these random models
    # Spearman's rho of the drops worked out above and the gradient map (a finite difference
    # in the test below), by hand: Pearson's r of the ranks (no ties among 8 heads here)
    ranks = [np.argsort(np.argsort(m.ravel())) for m in (want, hi.gradient)]
    assert len(set(want.ravel().round(6))) == want.size
    rho = float(np.corrcoef(*ranks)[0, 1])
    assert hi.spearman == pytest.approx(rho, abs=1e-6)


def test_batched_rows_give_what_one_forward_per_head_gives(models, engine, monkeypatch):
    text, kind, target, contrast = CASES["gpt2"]
    adapter = engine.adapter(models["gpt2"])
    batched = importance.head_importance(adapter, to_word_text(text), target, contrast, kind)
    monkeypatch.setattr(importance, "CHUNK_TOKENS", 1)        # one row per forward pass
    single = importance.head_importance(adapter, to_word_text(text), target, contrast, kind)
    np.testing.assert_allclose(batched.knocked, single.knocked, atol=1e-5)
    np.testing.assert_allclose(batched.gradient, single.gradient, rtol=1e-5)


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_gradient_is_a_finite_difference_of_f_in_the_heads_gate(models, tmp_path, name):
    """In float64, so that a central difference with a small step is exact to ~1e-8."""
    text, kind, target, contrast = CASES[name]
    mine = Engine(device="cpu")                  # its own model, made float64 here
    adapter = mine.adapter(models[name])
    adapter.model.double()
    hi = importance.head_importance(adapter, to_word_text(text), target, contrast, kind)
    obj = objective_of(adapter, to_word_text(text), target, contrast, kind)
    proj = {"bert": "bert.encoder.layer.{}.attention.output.dense",
            "gpt2": "transformer.h.{}.attn.c_proj"}[name]
    eps = 1e-4
    for layer, head in [(0, 1), (1, 3)]:
        module = adapter.model.get_submodule(proj.format(layer))
        width = module.weight.shape[0] if name == "gpt2" else module.in_features
        cut = slice(head * width // HEADS, (head + 1) * width // HEADS)

        def f_at(scale):
            def scaled(mod, args):
                x = args[0].clone()
                x[..., cut] = x[..., cut] * scale
                return (x, *args[1:])
            handle = module.register_forward_pre_hook(scaled)
            try:
                with torch.no_grad():
                    return float(obj.value(obj.x)[0])
            finally:
                handle.remove()

        fd = (f_at(1 + eps) - f_at(1 - eps)) / (2 * eps)
        assert hi.gradient[layer, head] == pytest.approx(abs(fd), rel=1e-3, abs=1e-6)


def test_importance_refuses_a_bad_target_in_one_line(models, engine):
    with pytest.raises(EngineError) as err:
        engine.head_importance(models["bert"], MASKED, "two words")
    assert "\n" not in str(err.value) and "one word" in str(err.value)
