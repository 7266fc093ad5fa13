"""The trained ELMo's export (AllenNLP options.json + weights.hdf5 + LM softmax) round-trips
through the engine's loader."""
from __future__ import annotations

import json

import torch

from engine.families.elmo import adapter as elmo_family
from engine.families.base import LoadOptions
from engine.families.elmo.chars import batch_char_ids
from engine.families.elmo.modules import ElmoBiLm
from engine.text import split_words
from lab.training import elmo

TINY = {"lstm": {"dim": 24, "projection_dim": 8, "n_layers": 2, "cell_clip": 3.0,
                 "proj_clip": 3.0, "use_skip_connections": True},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8]], "n_highway": 1,
                     "activation": "relu", "n_characters": 262, "max_characters_per_token": 50}}


def test_exported_elmo_loads_with_identical_weights_and_outputs(tmp_path):
    vocab = ["<S>", "</S>", "<UNK>", "the", "bank", "river"]
    model = elmo.build_model(len(vocab), seed=5, options=TINY)
    with torch.no_grad():
        model.softmax.bias.copy_(torch.linspace(-1, 1, len(vocab)))
    elmo.export(model, vocab, tmp_path)
    adapter = elmo_family.load("elmo-test", tmp_path, LoadOptions(device="cpu"), progress=False)

    plain = ElmoBiLm(TINY)
    plain.load_state_dict(model.bilm.state_dict())
    for name, p in plain.state_dict().items():
        assert torch.equal(p, adapter.bilm.state_dict()[name]), name
    sents = [["the", "river", "bank"], ["bank"]]
    ids = torch.from_numpy(batch_char_ids(sents))
    with torch.no_grad():
        assert torch.equal(plain(ids).layers, adapter.bilm(ids).layers)
        # the training-time char CNN (one pass per distinct word) gives the same vectors
        torch.testing.assert_close(model.bilm(ids).layers, plain(ids).layers)
    assert adapter.softmax.vocab == tuple(vocab)
    assert torch.equal(adapter.softmax.weight, model.softmax.weight.detach())
    assert torch.equal(adapter.softmax.bias, model.softmax.bias.detach())
    options = json.loads((tmp_path / "options.json").read_text())
    assert options["lstm"]["cell_clip"] == 3.0 and options["lstm"]["use_skip_connections"]


def test_next_word_prediction_of_export_matches_the_trained_softmax(tmp_path):
    vocab = ["<S>", "</S>", "<UNK>", "the", "bank", "river"]
    model = elmo.build_model(len(vocab), seed=6, options=TINY).eval()
    elmo.export(model, vocab, tmp_path)
    adapter = elmo_family.load("elmo-test", tmp_path, LoadOptions(device="cpu"), progress=False)
    pred = adapter.predict_next(split_words("the river"), top_k=len(vocab))
    with torch.no_grad():
        fwd, _, _ = model.bilm.lm_outputs(torch.from_numpy(batch_char_ids([["the", "river"]])))
        probs = torch.softmax(model.softmax(fwd[0, 2]).double(), 0)   # at "river" (after <S>, the)
    got = {c.token: c.prob for c in pred.candidates}
    for i, w in enumerate(vocab):
        assert abs(got[w] - float(probs[i])) < 1e-5
