"""lab.training.soup: the weight average of ELMo runs from one start, exported as an ELMo."""
from __future__ import annotations

import json
import math

import pytest
import torch

from engine.families.base import LoadOptions
from engine.families.elmo import adapter as elmo_family
from lab.training import elmo, soup
from tests.lab.training.test_elmo_export import TINY

VOCAB = ["<S>", "</S>", "<UNK>", "the", "cat", "dog", "sat", "on", "mat", "river", "bank"]


def _export(path, seed, vocab=VOCAB):
    model = elmo.build_model(len(vocab), seed=seed, options=TINY)
    with torch.no_grad():
        model.softmax.bias.copy_(torch.randn(len(vocab), generator=torch.Generator().manual_seed(seed)))
    elmo.export(model, vocab, path)
    return model


def test_weighted_soup_is_the_weighted_mean_of_every_parameter(tmp_path):
    a, b = _export(tmp_path / "a", 5), _export(tmp_path / "b", 6)
    model, vocab = soup.average([tmp_path / "a", tmp_path / "b"], [1, 3], progress=False)
    assert vocab == VOCAB
    sa, sb = a.state_dict(), b.state_dict()
    for name, t in model.state_dict().items():
        if t.is_floating_point():
            torch.testing.assert_close(t, 0.25 * sa[name] + 0.75 * sb[name], rtol=0, atol=1e-6)
    # the export of the soup is what the engine serves
    soup_dir = tmp_path / "soup"
    elmo.export(model, vocab, soup_dir)
    adapter = elmo_family.load("soup", soup_dir, LoadOptions(device="cpu"), progress=False)
    for name, t in adapter.bilm.state_dict().items():
        expected = 0.25 * sa["bilm." + name] + 0.75 * sb["bilm." + name]
        torch.testing.assert_close(t, expected.to(t.dtype), rtol=0, atol=1e-6)
    torch.testing.assert_close(adapter.softmax.bias, 0.25 * sa["softmax.bias"] + 0.75 * sb["softmax.bias"])


def test_a_soup_of_one_run_is_that_run_exactly(tmp_path):
    a = _export(tmp_path / "a", 7)
    model, _ = soup.average([tmp_path / "a"], progress=False)
    for name, t in model.state_dict().items():
        assert torch.equal(t, a.state_dict()[name]), name


def test_runs_from_different_starts_are_refused(tmp_path):
    _export(tmp_path / "a", 5)
    _export(tmp_path / "b", 6, vocab=VOCAB[:-1] + ["shore"])
    with pytest.raises(SystemExit, match="another vocabulary"):
        soup.average([tmp_path / "a", tmp_path / "b"], progress=False)
    with pytest.raises(SystemExit, match="non-negative"):
        soup.average([tmp_path / "a", tmp_path / "a"], [1, -1], progress=False)


def test_cli_reports_the_soups_and_the_starts_heldout_perplexity(tmp_path, tiny_corpus):
    _export(tmp_path / "start", 8)
    _export(tmp_path / "a", 9)
    _export(tmp_path / "b", 10)
    (tmp_path / "a" / "training_report.json").write_text(json.dumps(
        {"words_seen": 1234, "heldout_ppl_forward": 9.0, "heldout_ppl_backward": 8.0,
         "init": {"from": "start"}}))
    out = tmp_path / "out"
    soup.main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out), "--start",
               str(tmp_path / "start"), "--corpus", str(tiny_corpus), "--threads", "1"])
    report = json.loads((out / "training_report.json").read_text())
    model, vocab = soup.average([tmp_path / "a", tmp_path / "b"], progress=False)
    fwd, bwd = soup.heldout_ppl(model, vocab, tiny_corpus)
    assert math.isclose(report["heldout_ppl_forward"], fwd, rel_tol=1e-9)
    assert math.isclose(report["heldout_ppl_backward"], bwd, rel_tol=1e-9)
    start, start_vocab = soup.load(tmp_path / "start")
    assert math.isclose(report["init"]["heldout_ppl_forward"],
                        soup.heldout_ppl(start, start_vocab, tiny_corpus)[0], rel_tol=1e-9)
    first, second = report["soup"]["ingredients"]
    assert first["weight"] == second["weight"] == 0.5 and first["words_seen"] == 1234
    assert second["words_seen"] is None and report["soup"]["method"] == "uniform"
    # a random model's perplexity is near the vocabulary size; the numbers are real evaluations
    assert 1 < fwd < 10 * len(VOCAB) and fwd != report["init"]["heldout_ppl_forward"]
    assert (out / "weights.hdf5").exists() and (out / "lm_softmax.safetensors").exists()
