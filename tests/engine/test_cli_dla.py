"""`ctxlens components` on tiny random checkpoints in a configured model folder: the NPZ holds
exactly what Engine.components returns, its parts add up to its logit, the JSON says the same,
and each bad input is one line and a non-zero exit."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import Engine
from engine.cli import main

TEXT = "She sat on the river bank and watched the"
NUMERIC = {"heads", "mlp", "embed", "rest", "logit"}


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("dla-cli")
    return {n: zoo.copy(f"arch:{n}", root / n) for n in ("llama", "bert")}


@pytest.fixture(autouse=True)
def configured(models, monkeypatch):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(models["llama"].parent))


def _run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_npz_holds_engine_components_and_adds_up(models, capsys, tmp_path):
    out = tmp_path / "c.npz"
    code, _, err = _run(capsys, "components", "--model", str(models["llama"]), "--text", TEXT,
                        "--target", "water", "--contrast", "sky", "--output", str(out),
                        "--device", "cpu")
    assert code == 0, err
    got = np.load(out)
    numeric = {k for k in got.files if got[k].dtype.kind in "fiuc"}
    assert numeric == NUMERIC
    assert set(got.files) == NUMERIC | {"tokens", "model", "target", "contrast", "logit_means"}
    want = Engine(device="cpu").components(str(models["llama"]), TEXT, "water", "sky")
    np.testing.assert_array_equal(got["heads"], want.heads)
    np.testing.assert_array_equal(got["mlp"], want.mlp)
    assert got["heads"].shape == (2, 4) and got["mlp"].shape == (2,)
    for k in ("embed", "rest", "logit"):
        assert float(got[k]) == getattr(want, k)
    assert tuple(got["tokens"]) == want.tokens
    total = got["heads"].sum() + got["mlp"].sum() + got["embed"] + got["rest"]
    assert abs(total - got["logit"]) <= 1e-3
    assert str(got["contrast"]) == "sky" and "minus" in str(got["logit_means"])


def test_json_says_the_same(models, capsys, tmp_path):
    out = tmp_path / "c.json"
    code, _, err = _run(capsys, "components", "--model", str(models["llama"]), "--text", TEXT,
                        "--target", "water", "--output", str(out), "--device", "cpu")
    assert code == 0, err
    got = json.loads(out.read_text())
    want = Engine(device="cpu").components(str(models["llama"]), TEXT, "water")
    np.testing.assert_allclose(got["heads"], want.heads, rtol=1e-6)
    assert got["logit"] == pytest.approx(want.logit) and got["contrast"] == ""
    assert abs(np.sum(got["heads"]) + np.sum(got["mlp"]) + got["embed"] + got["rest"]
               - got["logit"]) <= 1e-3


@pytest.mark.parametrize("extra,match", [
    (("--target", "water", "--contrast", "water"), "is the target itself"),
    (("--target", "日本語"), "cannot spell"),
    (("--target", ""), "one word"),
    (("--target", "water", "--output-as", "x"), None),    # argparse: a flag it does not know
])
def test_bad_input_is_one_line_and_nonzero(models, capsys, tmp_path, extra, match):
    args = ["components", "--model", str(models["llama"]), "--text", TEXT, "--device", "cpu",
            "--output", str(tmp_path / "c.npz"), *extra]
    if match is None:
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code != 0
        return
    code, _, err = _run(capsys, *args)
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and match in err
    assert not (tmp_path / "c.npz").exists()


def test_a_bert_model_and_a_bad_output_are_refused(models, capsys, tmp_path):
    code, _, err = _run(capsys, "components", "--model", str(models["bert"]), "--text", TEXT,
                        "--target", "water", "--output", str(tmp_path / "c.npz"))
    assert code != 0 and len(err.strip().splitlines()) == 1 and "post-norm" in err
    code, _, err = _run(capsys, "components", "--model", str(models["llama"]), "--text", TEXT,
                        "--target", "water", "--output", str(tmp_path / "c.csv"))
    assert code != 0 and len(err.strip().splitlines()) == 1 and ".npz or .json" in err
