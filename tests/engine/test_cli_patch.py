"""`ctxlens patch` on tiny random checkpoints in a configured model folder: the arrays it
writes (.npz and .json) are Engine.patch's, and each bad input is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.api import Engine
from tests.engine.cli_run import run

CLEAN = "She sat on the river bank and watched the"
CORRUPT = "She sat on the water bank and watched the"
MASKED = "She sat on the river [MASK] and watched the water ."


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("patch-cli")
    return {name: zoo.copy(f"arch:{name}", root / name) for name in ("bert", "gpt2")}


@pytest.fixture(autouse=True)
def configured(models, monkeypatch):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(models["bert"].parent))


def test_the_npz_holds_engine_patch_arrays(models, tmp_path, capsys):
    gpt = str(models["gpt2"])
    out = tmp_path / "p.npz"
    code, _, err = run(capsys, "patch", "--model", gpt, "--clean", CLEAN, "--corrupt",
                        CORRUPT, "--target", "water", "--contrast", "bank", "--site", "mlp",
                        "--output", str(out), "--device", "cpu")
    assert code == 0, err
    want = Engine(device="cpu").patch(gpt, CLEAN, CORRUPT, "water", "bank", site="mlp")
    got = np.load(out)
    np.testing.assert_allclose(got["patched"], want.patched, atol=1e-6)
    assert float(got["clean"]) == pytest.approx(want.clean, abs=1e-6)
    assert float(got["corrupt"]) == pytest.approx(want.corrupt, abs=1e-6)
    assert tuple(got["tokens"]) == want.tokens
    assert str(got["site"]) == "mlp" and str(got["kind"]) == "next"
    assert want.patched.shape == (2, len(want.tokens))
    # and numbers worked out here with transformers alone: f = log p(water) − log p(bank)
    # next, clean and corrupted, and two cells: the corrupted run with one position of one
    # layer's feed-forward output (GPT-2's transformer.h[i].mlp) put back to the clean run's
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gpt)
    model = AutoModelForCausalLM.from_pretrained(gpt).eval()
    (water,), (bank,) = (tok(" " + w, add_special_tokens=False)["input_ids"]
                         for w in ("water", "bank"))
    clean_ids, corrupt_ids = (torch.tensor([tok(t)["input_ids"]]) for t in (CLEAN, CORRUPT))

    def f(ids) -> float:
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), -1)
        return float(logp[water] - logp[bank])

    assert float(got["clean"]) == pytest.approx(f(clean_ids), abs=1e-5)
    assert float(got["corrupt"]) == pytest.approx(f(corrupt_ids), abs=1e-5)
    changed = int((clean_ids != corrupt_ids).nonzero()[0, 1])          # river -> water
    for layer, col in ((0, changed), (1, clean_ids.shape[1] - 1)):
        mlp = model.transformer.h[layer].mlp
        seen = []
        handle = mlp.register_forward_hook(lambda m, args, out: seen.append(out.clone()))
        f(clean_ids)
        handle.remove()

        def put(m, args, out):
            out = out.clone()
            out[:, col] = seen[0][:, col]
            return out

        handle = mlp.register_forward_hook(put)
        try:
            by_hand = f(corrupt_ids)
        finally:
            handle.remove()
        assert float(got["patched"][layer, col]) == pytest.approx(by_hand, abs=1e-5), (layer, col)
    assert float(got["patched"][0, changed]) != pytest.approx(float(got["corrupt"]), abs=1e-3)


def test_the_json_of_a_noised_masked_lm_holds_engine_patch_arrays(models, tmp_path, capsys):
    bert = str(models["bert"])
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "patch", "--model", bert, "--clean", MASKED, "--noise",
                        "river", "--seeds", "2", "--target", "bank", "--output", str(out),
                        "--device", "cpu")
    assert code == 0, err
    want = Engine(device="cpu").patch(bert, MASKED, None, "bank", kind="masked",
                                      noise_words="river", seeds=2)
    got = json.loads(out.read_text())
    assert got["kind"] == "masked"           # a masked LM's default kind
    np.testing.assert_allclose(np.array(got["patched"]), want.patched, atol=1e-5)
    assert got["clean"] == pytest.approx(want.clean, abs=1e-6)
    assert got["corrupt"] == pytest.approx(want.corrupt, abs=1e-6)
    assert tuple(got["tokens"]) == want.tokens
    assert "2 seeds" in got["corruption"]


@pytest.mark.parametrize("args, says", [
    (("--corrupt", "She sat on the lake bank and watched the"), "must tokenize alike"),
    (("--noise", "Paris"), "'Paris' is not a word of the clean text"),
    (("--corrupt", CORRUPT, "--kind", "masked"), "kind 'masked' is not supported"),
    (("--noise", "river", "--seeds", "0"), "seeds must be between"),
    (("--corrupt", CORRUPT, "--output-as", "x"), "unrecognized arguments"),
    (("--corrupt", CORRUPT, "--site", "heads"), "invalid choice: 'heads'"),
])
def test_bad_input_is_one_line_and_exit_2(models, tmp_path, capsys, args, says):
    out = tmp_path / "p.npz"
    try:
        code, _, err = run(capsys, "patch", "--model", str(models["gpt2"]), "--clean", CLEAN,
                            "--target", "water", "--output", str(out), "--device", "cpu",
                            *args)
    except SystemExit as e:              # argparse's own refusals exit 2 after its usage
        code, err = e.code, capsys.readouterr().err
        assert code == 2 and says in err
        return
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and lines[0].startswith("ctxlens: error:")
    assert not out.exists()


def test_an_output_that_is_neither_npz_nor_json_is_refused(models, tmp_path, capsys):
    code, _, err = run(capsys, "patch", "--model", str(models["gpt2"]), "--clean", CLEAN,
                        "--corrupt", CORRUPT, "--target", "water", "--output",
                        str(tmp_path / "p.csv"))
    assert code == 2 and "--output must end in .npz or .json" in err


NOTHING_TO_RESTORE = "the corrupted run gives the same f as the clean one: nothing to restore"


def test_a_corrupted_text_equal_to_the_clean_one_says_there_is_nothing_to_restore(
        models, tmp_path, capsys):
    out = tmp_path / "p.npz"
    code, _, err = run(capsys, "patch", "--model", str(models["gpt2"]), "--clean", CLEAN,
                        "--corrupt", CLEAN, "--target", "water", "--output", str(out),
                        "--device", "cpu")
    assert code == 0, err
    assert NOTHING_TO_RESTORE in err, err
    got = np.load(out)
    assert float(got["clean"]) == float(got["corrupt"])
    # a real corruption says nothing of the kind
    code, _, err = run(capsys, "patch", "--model", str(models["gpt2"]), "--clean", CLEAN,
                        "--corrupt", CORRUPT, "--target", "water", "--output", str(out),
                        "--device", "cpu")
    assert code == 0 and "nothing to restore" not in err, err


def test_the_npz_names_its_rows_and_holds_the_restored_share(models, tmp_path, capsys):
    gpt = str(models["gpt2"])
    for site in ("residual", "attention"):
        out = tmp_path / f"{site}.npz"
        code, _, err = run(capsys, "patch", "--model", gpt, "--clean", CLEAN, "--corrupt",
                            CORRUPT, "--target", "water", "--site", site, "--output",
                            str(out), "--device", "cpu")
        assert code == 0, err
        want = Engine(device="cpu").patch(gpt, CLEAN, CORRUPT, "water", site=site)
        got = np.load(out)
        n_layers = want.patched.shape[0] - (site == "residual")
        assert list(got["rows"]) == ["embeddings"] * (site == "residual") + [
            f"layer {l}" for l in range(1, n_layers + 1)]
        np.testing.assert_allclose(got["restored"], want.restored, atol=1e-5)
        assert str(got["model"]) == want.model_id and str(got["target"]) == "water"


def test_a_patching_knows_when_there_is_nothing_to_restore():
    from engine.components.result import Patching

    def patching(clean, corrupt):
        return Patching("m", "next", "residual", "x", None, "log p(x)", ("a", "b"),
                        np.full((3, 2), corrupt, np.float32), clean, corrupt, "the text 'a b'")
    same = patching(-2.5, -2.5)
    assert same.nothing_to_restore and np.isnan(same.restored).all()
    apart = patching(-1.0, -3.0)
    assert not apart.nothing_to_restore and np.allclose(apart.restored, 0.0)
    assert list(same.row_labels) == ["embeddings", "layer 1", "layer 2"]
