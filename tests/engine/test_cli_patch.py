"""`ctxlens patch` on tiny random checkpoints in a configured model folder: the arrays it
writes (.npz and .json) are Engine.patch's, and each bad input is one line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import Engine
from tests.engine.cli_zoo import bert_and_gpt2, folder_of, run

CLEAN = "She sat on the river bank and watched the"
CORRUPT = "She sat on the water bank and watched the"
MASKED = "She sat on the river [MASK] and watched the water ."


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return bert_and_gpt2(tmp_path_factory, "patch-cli")


@pytest.fixture(autouse=True)
def configured(models, monkeypatch):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", folder_of(models))


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
