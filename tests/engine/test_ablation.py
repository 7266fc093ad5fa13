"""Knocking heads and feed-forward blocks out (engine/components/ablation.py) on the tiny
checkpoint of every architecture in tests/zoo.py: each ablation's predictions are those
of a hook written here by hand on the module transformers built (found by its own name in each
architecture, not by engine/families/hf/parts.py), and each bad spec is one line."""
from __future__ import annotations

import pytest
import torch

from engine.api import Engine
from engine.components import ablation
from engine.errors import EngineError
from tests.zoo import ARCHITECTURES, DECODERS, HEADS, LAYERS

MASKED = "She sat on the river [MASK] and watched the water."
PREFIX = "She sat on the river bank and watched the"

# layer 2's attention output projection and feed-forward block, by the names transformers
# gives them (ALBERT: its one shared block, called once per layer)
OUT_PROJ = {
    "bert": "bert.encoder.layer.1.attention.output.dense",
    "roberta": "roberta.encoder.layer.1.attention.output.dense",
    "xlm-roberta": "roberta.encoder.layer.1.attention.output.dense",
    "distilbert": "distilbert.transformer.layer.1.attention.out_lin",
    "albert": "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.dense",
    "electra": "electra.encoder.layer.1.attention.output.dense",
    "deberta-v2": "deberta.encoder.layer.1.attention.output.dense",
    "modernbert": "model.layers.1.attn.Wo",
    "gpt2": "transformer.h.1.attn.c_proj",
    "gpt-neox": "gpt_neox.layers.1.attention.dense",
    "opt": "model.decoder.layers.1.self_attn.out_proj",
    "llama": "model.layers.1.self_attn.o_proj",
    "qwen2": "model.layers.1.self_attn.o_proj",
    "mistral": "model.layers.1.self_attn.o_proj",
    "phi3": "model.layers.1.self_attn.o_proj",
    "gemma2": "model.layers.1.self_attn.o_proj",
}
FEED_FORWARD = {
    "bert": "bert.encoder.layer.1.output.dense",
    "roberta": "roberta.encoder.layer.1.output.dense",
    "xlm-roberta": "roberta.encoder.layer.1.output.dense",
    "distilbert": "distilbert.transformer.layer.1.ffn",
    "albert": "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output",
    "electra": "electra.encoder.layer.1.output.dense",
    "deberta-v2": "deberta.encoder.layer.1.output.dense",
    "modernbert": "model.layers.1.mlp",
    "gpt2": "transformer.h.1.mlp",
    "gpt-neox": "gpt_neox.layers.1.mlp",
    "opt": "model.decoder.layers.1.fc2",
    "llama": "model.layers.1.mlp",
    "qwen2": "model.layers.1.mlp",
    "mistral": "model.layers.1.mlp",
    "phi3": "model.layers.1.mlp",
    "gemma2": "model.layers.1.mlp",
}
HEAD = 2          # head 3 of layer 2: spec "2.3"


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("ablation-zoo")
    folders = {name: str(zoo.copy(f"arch:{name}", root / name)) for name in ARCHITECTURES}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), folders


def predict(engine, name, folder, **ablate):
    if name in DECODERS:
        return engine.predict_next(folder, PREFIX, top_k=5, **ablate)
    return engine.predict_masked(folder, MASKED, top_k=5, **ablate)


def as_pairs(pred):
    return [(c.token, c.prob) for c in pred.candidates]


def layer_2_calls(name):
    """Whether a call of the hooked module is layer 2's: ALBERT's one block runs once per
    layer, so its second call in each forward pass is layer 2's."""
    calls = []

    def is_layer_2() -> bool:
        calls.append(1)
        return name != "albert" or len(calls) % LAYERS == 2 % LAYERS
    return is_layer_2


def head_slice(module):
    width = module.weight.shape[0] if type(module).__name__ == "Conv1D" else module.in_features
    d = width // HEADS
    return slice(HEAD * d, (HEAD + 1) * d)


def assert_same(got, want, tol=1e-6):
    assert [t for t, _ in got] == [t for t, _ in want]
    assert [p for _, p in got] == pytest.approx([p for _, p in want], abs=tol)


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_no_ablation_is_the_plain_prediction_and_leaves_no_hook_behind(served, name):
    engine, folders = served
    plain = as_pairs(predict(engine, name, folders[name]))
    assert as_pairs(predict(engine, name, folders[name], ablate="")) == plain
    knocked = as_pairs(predict(engine, name, folders[name], ablate="1.1,2.mlp"))
    assert knocked != plain
    assert as_pairs(predict(engine, name, folders[name])) == plain


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_a_knocked_out_head_is_a_hand_written_hook_zeroing_its_slice(served, name):
    engine, folders = served
    model = engine.adapter(folders[name]).model
    proj = model.get_submodule(OUT_PROJ[name])
    cut, is_layer_2 = head_slice(proj), layer_2_calls(name)

    def zero_head(module, args):
        if not is_layer_2():
            return None
        x = args[0].clone()
        x[..., cut] = 0
        return (x, *args[1:])

    handle = proj.register_forward_pre_hook(zero_head)
    try:
        by_hand = as_pairs(predict(engine, name, folders[name]))
    finally:
        handle.remove()
    got = as_pairs(predict(engine, name, folders[name], ablate=f"2.{HEAD + 1}"))
    assert_same(got, by_hand)
    assert got != as_pairs(predict(engine, name, folders[name]))


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_a_knocked_out_feed_forward_block_is_a_hook_zeroing_its_output(served, name):
    engine, folders = served
    mlp = engine.adapter(folders[name]).model.get_submodule(FEED_FORWARD[name])
    is_layer_2 = layer_2_calls(name)

    def zero_out(module, args, output):
        if not is_layer_2():
            return None
        return torch.zeros_like(output)

    handle = mlp.register_forward_hook(zero_out)
    try:
        by_hand = as_pairs(predict(engine, name, folders[name]))
    finally:
        handle.remove()
    got = as_pairs(predict(engine, name, folders[name], ablate="2.mlp"))
    assert_same(got, by_hand)
    assert got != as_pairs(predict(engine, name, folders[name]))


@pytest.mark.parametrize("name", ["bert", "albert", "gpt2", "llama"])
def test_mean_ablation_puts_in_the_heads_mean_over_the_reference_sentences(served, name):
    engine, folders = served
    adapter = engine.adapter(folders[name])
    proj = adapter.model.get_submodule(OUT_PROJ[name])
    cut = head_slice(proj)
    seen = []
    is_layer_2 = layer_2_calls(name)

    def collect(module, args):
        if is_layer_2():
            seen.append(args[0][0, :, cut].detach())

    handle = proj.register_forward_pre_hook(collect)
    try:
        with torch.no_grad():
            for s in ablation.REFERENCE_SENTENCES:
                ids = torch.tensor([adapter.tokenizer(s)["input_ids"]])
                adapter.model(input_ids=ids)
    finally:
        handle.remove()
    mean = torch.cat(seen).mean(0)
    is_layer_2 = layer_2_calls(name)

    def put_mean(module, args):
        if not is_layer_2():
            return None
        x = args[0].clone()
        x[..., cut] = mean
        return (x, *args[1:])

    handle = proj.register_forward_pre_hook(put_mean)
    try:
        by_hand = as_pairs(predict(engine, name, folders[name]))
    finally:
        handle.remove()
    spec = f"2.{HEAD + 1}"
    got = as_pairs(predict(engine, name, folders[name], ablate=spec, ablate_mode="mean"))
    assert_same(got, by_hand, tol=1e-5)
    assert got != as_pairs(predict(engine, name, folders[name], ablate=spec))


def test_mean_ablation_of_a_feed_forward_block_differs_from_zero(served):
    engine, folders = served
    mean = as_pairs(predict(engine, "gpt2", folders["gpt2"], ablate="1.mlp", ablate_mode="mean"))
    zero = as_pairs(predict(engine, "gpt2", folders["gpt2"], ablate="1.mlp"))
    plain = as_pairs(predict(engine, "gpt2", folders["gpt2"]))
    assert mean != zero and mean != plain


def test_the_spec_is_written_back_canonically_from_1(served):
    engine, folders = served
    s = ablation.sites(engine.adapter(folders["bert"]))
    parsed = ablation.parse(" 2.mlp, 1.3,1.1,2.* ", s)
    assert parsed.heads == frozenset({(0, 0), (0, 2)} | {(1, h) for h in range(HEADS)})
    assert parsed.mlps == frozenset({1})
    assert parsed.spec == "1.1,1.3,2.*,2.mlp"


@pytest.mark.parametrize("spec, message", [
    ("99.1", f"layer 99 is out of range: this model has layers 1-{LAYERS}"),
    ("0.1", f"layer 0 is out of range: this model has layers 1-{LAYERS}"),
    ("1.9", f"head 1.9 is out of range: this model's layers have heads 1-{HEADS}"),
    ("x", "ablate entries are L.H, L.* or L.mlp, from 1: got 'x'"),
    ("1.2,,2.1", "ablate entries are L.H, L.* or L.mlp, from 1: got ''"),
    ("1.-2", "ablate entries are L.H, L.* or L.mlp, from 1: got '1.-2'"),
    ("1.*,2.*", "knocking out every head leaves no attention at all; keep at least one"),
])
def test_a_bad_spec_is_one_line(served, spec, message):
    engine, folders = served
    with pytest.raises(EngineError) as err:
        predict(engine, "bert", folders["bert"], ablate=spec)
    assert str(err.value) == message


def test_a_bad_mode_is_one_line(served):
    engine, folders = served
    with pytest.raises(EngineError) as err:
        predict(engine, "gpt2", folders["gpt2"], ablate="1.1", ablate_mode="median")
    assert str(err.value) == "ablate mode must be one of zero, mean, not 'median'"


def test_elmo_has_no_heads_to_knock_out(zoo, model_dir):
    from engine.errors import UnsupportedPrediction

    folder = str(zoo.copy("elmo", model_dir / "elmo"))
    engine = Engine(device="cpu")
    plain = engine.predict_next(folder, "the river", top_k=2)       # it predicts without
    assert plain.candidates
    with pytest.raises(UnsupportedPrediction) as err:
        engine.predict_next(folder, "the river", top_k=2, ablate="1.1")
    message = str(err.value)
    assert "cannot knock out heads or blocks" in message and "\n" not in message
    assert message.count("models that can") == 1, message
    with pytest.raises(UnsupportedPrediction) as err:
        ablation.sites(engine.adapter(folder))
    assert str(err.value) == ("elmo models have no transformer heads or feed-forward blocks "
                              "to knock out")
