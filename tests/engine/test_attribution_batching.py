"""The attributions' passes batched by memory (engine/memory.py; issue 66, M2): a long input
takes fewer rows a pass, so its activations stay under the bound; the count is an upper bound
of what autograd keeps; and the rows a pass change no attribution."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine import memory
from engine.attribution import faithfulness, methods
from engine.attribution.explain import objective_of
from engine.components import patching
from engine.families import bert, gpt
from engine.families.base import LoadOptions
from engine.families.elmo import adapter as elmo
from engine.text import split_words

CPU = LoadOptions(device="cpu")
ELMO_TEXT = "the bank of the river is money ."
LONG = " ".join(["the old man walked to the river bank and sat down to watch the water"] * 2)


@pytest.fixture(scope="module")
def adapters(zoo):
    return {"bert": bert.load("tiny-bert", zoo.path("arch:bert"), CPU, progress=False),
            "llama": gpt.load("tiny-llama", zoo.path("arch:llama"), CPU, progress=False),
            "gpt2": gpt.load("tiny-gpt2", zoo.path("arch:gpt2"), CPU, progress=False),
            "elmo": elmo.load("tiny-elmo", zoo.path("elmo", sentences=[ELMO_TEXT]), CPU,
                              progress=False)}


def smollm2_like():
    """SmolLM2-135M's sizes and weights' bytes, without its weights (a meta tensor)."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                      num_key_value_heads=3, num_hidden_layers=30, vocab_size=49152)
    return SimpleNamespace(config=cfg, parameters=lambda: iter(
        [torch.empty(134_515_008, device="meta")]))


def test_a_longer_input_takes_fewer_rows_and_stays_under_half_the_weights():
    model = smollm2_like()
    half = memory.weight_bytes(model) // 2
    for grad in (False, True):
        before = memory.MAX_ROWS
        for tokens in (8, 24, 93, 170, 600):
            rows = memory.rows_per_pass(model, tokens, 256, grad=grad, reads=33)
            per_row = memory.row_bytes(model, tokens, grad, reads=33)
            assert rows <= before
            assert rows == 1 or rows * per_row <= half, (grad, tokens, rows)
            before = rows
    # the input (93 tokens read at 33 positions): one row a gradient pass, not 32
    assert memory.rows_per_pass(model, 93, 32, grad=True, reads=33) == 1
    assert memory.rows_per_pass(model, 93, 32, grad=True, reads=33, readings=2) == 1
    assert memory.rows_per_pass(model, 12, 256, grad=True) > 1
    # a gradient pass keeps every layer: fewer rows than a forward; a contrast: fewer again
    assert memory.rows_per_pass(model, 24, 256, grad=True) < \
        memory.rows_per_pass(model, 24, 256, grad=False)
    assert memory.rows_per_pass(model, 24, 256, grad=True, readings=2) < \
        memory.rows_per_pass(model, 24, 256, grad=True)
    # the floor only raises the budget of a model whose half is under it
    assert memory.rows_per_pass(model, 93, 32, grad=True, reads=33,
                                floor=memory.FLOOR) == 1


def test_patching_chunk_size_is_the_shared_no_gradient_count():
    """Moved to engine/memory.py unchanged: the formula patching used (half the weights, one
    layer's activations and the logits read) gives the same rows."""
    model = smollm2_like()
    weights = 134_515_008 * 4
    for tokens, cells in ((12, 372), (93, 2883), (1197, 37107), (3, 2)):
        per_row = 4 * (tokens * (6 * 576 + 2 * 1536 + 2 * 9 * tokens) + 4 * 49152)
        want = int(max(1, min(cells, 512, weights // 2 // per_row)))
        assert patching.chunk_size(model, tokens, cells) == want


def _saved_bytes(obj, weights) -> int:
    """Bytes autograd keeps for one row's backward: its saved tensors, the weights' storages
    (`weights`, tensors) left out."""
    skip = {w.untyped_storage().data_ptr() for w in weights}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    x = obj.x.clone().requires_grad_()
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        obj.value(x)
    return sum(seen.values())


@pytest.mark.parametrize("arch,text,target,contrast,kind", [
    ("bert", LONG + " [MASK] .", "river", None, "masked"),
    ("bert", LONG + " [MASK] .", "river", "money", "masked"),
    ("llama", LONG, "water", None, "next"),
    ("gpt2", LONG + " [MASK] .", "river", None, "masked"),
    ("elmo", "the bank of the [MASK] is money .", "river", None, "masked")])
def test_the_count_bounds_what_autograd_keeps(arch, text, target, contrast, kind, adapters):
    from engine.attribution import elmo as elmo_objective

    adapter = adapters[arch]
    obj = objective_of(adapter, split_words(text), target, contrast, kind)
    if arch == "elmo":
        weights = [*adapter.bilm.parameters(), *adapter.softmax[:2]]
        counted = elmo_objective.row_bytes(adapter.bilm, adapter.softmax[0].shape[0],
                                           obj.x.shape[1] + 2, True, 2)
    else:
        weights = list(adapter.model.parameters())
        counted = memory.row_bytes(adapter.model, len(obj.pieces), True) * \
            (2 if contrast else 1)
    kept = _saved_bytes(obj, weights)
    assert kept <= counted <= 8 * kept, (kept, counted)


def _spied(obj, rows: int):
    """obj whose value takes `rows` rows a pass (value.rows) and records each pass's rows."""
    seen: list[int] = []

    def value(batch):
        seen.append(batch.shape[0])
        return obj.value(batch)

    value.rows = lambda n, grad=False: rows
    return replace(obj, value=value), seen


@pytest.mark.parametrize("arch,text,target,contrast,kind", [
    ("bert", "She sat on the [MASK] bank and watched the riverbank .", "river", "money",
     "masked"),
    ("llama", "She sat on the river bank and watched the", "water", None, "next"),
    ("elmo", "the bank of the [MASK] is money .", "river", None, "masked")])
def test_every_pass_takes_the_rows_memory_allows_and_the_maps_do_not_change(
        arch, text, target, contrast, kind, adapters):
    """IG's steps, occlusion's perturbed inputs and the faithfulness measures' variants, one
    row a pass and all in one pass: the same attributions (to float rounding, 1e-5)."""
    obj = objective_of(adapters[arch], split_words(text), target, contrast, kind)
    groups = np.searchsorted(obj.scored_words, obj.slot_words)
    got = {}
    for rows in (1, 64):
        spied, seen = _spied(obj, rows)
        ig = methods.integrated_gradients(spied, 48)
        occ = methods.occlusion(spied, groups)
        f_x = float(methods.f_of(spied, spied.x)[0])
        by_word = np.zeros(len(obj.words), np.float32)
        by_word[obj.scored_words] = occ
        faith = faithfulness.measure(spied, f_x, by_word)
        assert max(seen) <= rows and (rows == 1 or max(seen) > 1), (rows, seen)
        got[rows] = (ig.scores, occ, np.array([f_x, ig.f_baseline, ig.gap,
                                               *(v for v in faith.__dict__.values())]))
    for one, many in zip(got[1], got[64]):
        np.testing.assert_allclose(one, many, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch,text,target,kind", [
    ("llama", LONG, "water", "next"),
    ("bert", LONG + " [MASK] .", "river", "masked"),
    ("elmo", "the bank of the [MASK] is money .", "river", "masked")])
def test_the_objective_sizes_its_passes_from_the_model(arch, text, target, kind, adapters):
    """hf.py and elmo.py give value.rows, the rows the model's memory allows (a tiny model's
    half is under one row: the floor's budget); a gradient pass takes no more rows than a
    forward pass, and never more than asked for."""
    adapter = adapters[arch]
    obj = objective_of(adapter, split_words(text), target, None, kind)
    grad, forward = obj.value.rows(512, grad=True), obj.value.rows(512, grad=False)
    assert 1 <= grad <= forward <= 512
    assert obj.value.rows(7, grad=True) == min(7, grad)
    if arch != "elmo":
        model, n = adapter.model, len(obj.pieces)
        assert grad == memory.rows_within(memory.weight_bytes(model),
                                          memory.row_bytes(model, n, True), 512, memory.FLOOR)
        assert memory.rows_per_pass(model, n, 512, grad=True) == 1     # half its weights


@pytest.mark.slow
def test_smollm2_takes_one_row_a_gradient_pass_on_a_127_word_sentence():
    """The issue's input: 93 tokens, f read at 33 positions (the filled blank and the 32
    tokens after it): IG's steps one a pass, where a fixed 32 took 6.2 GB."""
    from engine.api import Engine

    # make install bundles SmolLM2: a missing one is a failed install, not a skip
    adapter = Engine(device="cpu").adapter("smollm2-135m", progress=False)
    from bench.attribution_speed import LONG_SENTENCE

    obj = objective_of(adapter, split_words(LONG_SENTENCE), "car", None, "masked")
    assert len(obj.pieces) == 93
    assert obj.value.rows(32, grad=True) == 1
    assert obj.value.rows(36, grad=False) >= 8
