"""Each trainer, on a tiny corpus for a few dozen steps: the loss falls, the export loads."""
from __future__ import annotations

import json

import pytest

from engine.training import bert, elmo, gpt


def _run(module, tiny_corpus, tmp_path, extra):
    args = module.parser().parse_args([
        "--corpus", str(tiny_corpus), "--run-dir", str(tmp_path / "run"),
        "--out", str(tmp_path / "out"), "--budget-minutes", "2", "--seed", "3",
        "--warmup", "5", "--eval-every", "10", *extra])
    report = module.run(args)
    history = json.loads((tmp_path / "out" / "training_report.json").read_text())["history"]
    return report, history


def test_gpt_trainer_lowers_heldout_loss_and_beats_nothing_learned(tiny_corpus, tmp_path):
    report, hist = _run(gpt, tiny_corpus, tmp_path, [
        "--max-words", "2000", "--vocab-size", "300", "--seq-len", "16", "--dim", "32",
        "--layers", "1", "--heads", "2", "--batch-size", "8", "--lr", "3e-3",
        "--eval-blocks", "8"])
    assert report["steps"] >= 20
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert (tmp_path / "out" / "learning_curve.png").stat().st_size > 1000


def test_bert_trainer_lowers_masked_lm_loss(tiny_corpus, tmp_path):
    report, hist = _run(bert, tiny_corpus, tmp_path, [
        "--max-words", "6000", "--vocab-size", "200", "--seq-len", "16", "--dim", "32",
        "--layers", "1", "--heads", "2", "--batch-size", "8", "--lr", "3e-3",
        "--eval-blocks", "8", "--pppl-sentences", "4"])
    assert report["steps"] >= 20
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    assert report["pseudo_ppl_token"] < 200


def test_masked_only_head_gives_the_loss_bert_for_masked_lm_gives():
    import torch

    class Shape:
        dim, layers, heads, seq_len = 32, 2, 2, 24

    torch.manual_seed(0)
    model = bert.build_model(300, Shape).eval()
    ids = torch.randint(5, 300, (6, 24))
    inputs, labels = bert.mask_tokens(ids, 7, 300)
    sel = labels != bert.IGNORE
    with torch.no_grad():
        full = model(input_ids=inputs, labels=labels).loss
        mine = torch.nn.functional.cross_entropy(bert.masked_logits(model, inputs, sel), labels[sel])
        logits = model(input_ids=inputs).logits[sel]
    assert sel.sum() > 5
    assert abs(float(full) - float(mine)) < 1e-5
    assert torch.allclose(bert.masked_logits(model, inputs, sel), logits, atol=1e-5)


def test_bert_masking_follows_80_10_10_and_skips_special_tokens():
    import torch

    ids = torch.randint(5, 1000, (400, 50))
    ids[:, 0] = bert.CLS
    inputs, labels = bert.mask_tokens(ids, seed=0, vocab_size=1000)
    chosen = labels != bert.IGNORE
    assert not chosen[:, 0].any()
    assert abs(chosen.float().mean().item() - 0.15 * 49 / 50) < 0.01
    as_mask = (inputs == bert.MASK_ID) & chosen
    unchanged = (inputs == ids) & chosen
    assert abs(as_mask.sum().item() / chosen.sum().item() - 0.8) < 0.02
    assert abs(unchanged.sum().item() / chosen.sum().item() - 0.1) < 0.02
    # the same seed gives the same batch: resumed runs see identical masks
    assert torch.equal(bert.mask_tokens(ids, 0, 1000)[0], inputs)


@pytest.fixture(scope="module")
def tiny_elmo(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elmo")
    return _run(elmo, tiny_corpus, tmp, [
        "--max-words", "3000", "--vocab-size", "100", "--min-count", "1", "--batch-size", "8",
        "--cell-size", "32", "--proj-dim", "16", "--filters", "[[1, 8], [2, 8], [3, 16]]",
        "--lr", "1e-2", "--eval-sentences", "20"]) + (tmp / "out",)


def test_elmo_trainer_lowers_both_directions_losses(tiny_elmo):
    report, hist, _ = tiny_elmo
    assert report["steps"] >= 20
    assert hist[-1]["heldout_fwd_loss"] < hist[0]["heldout_fwd_loss"] - 0.5
    assert hist[-1]["heldout_bwd_loss"] < hist[0]["heldout_bwd_loss"] - 0.5
    assert report["heldout_ppl_forward"] < 30 and report["heldout_ppl_backward"] < 30


def test_device_flag_resolves_and_refuses_cuda_it_does_not_have():
    import torch

    from engine.training.loop import resolve_device, to_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(SystemExit, match="expected auto, cpu or cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="no CUDA device"):
            resolve_device("cuda")
    nest = to_device(({"a": torch.ones(2)}, [torch.zeros(1), 3]), "cpu")
    assert isinstance(nest, tuple) and isinstance(nest[1], list) and nest[1][1] == 3
    assert nest[0]["a"].device.type == "cpu"
