"""The component commands and flags of the CLI (issue 55) on tiny random checkpoints in a
configured model folder: what they print is the Engine's own result, and each bad input is one
line and exit 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import Engine
from tests.engine.cli_run import run
from tests.zoo import HEADS, LAYERS

MASKED = "She sat on the river [MASK] and watched the water ."
PREFIX = "She sat on the river bank and watched the"


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("components-cli")
    return {name: zoo.copy(f"arch:{name}", root / name) for name in ("bert", "gpt2")}


@pytest.fixture(autouse=True)
def configured(models, monkeypatch, tmp_path):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(models["bert"].parent))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))


# -- --ablate on predict and attribute; `ctxlens heads` (issue 55 parts 1-2) ---------------
def test_predict_with_ablate_is_the_engines_ablated_prediction(models, capsys):
    bert = str(models["bert"])
    code, plain, _ = run(capsys, "predict", "--model", bert, "--text", MASKED, "--top-k", "5")
    assert code == 0
    code, out, err = run(capsys, "predict", "--model", bert, "--text", MASKED, "--top-k", "5",
                          "--ablate", "1.*,2.mlp", "--ablate-mode", "mean")
    assert code == 0, err
    assert out != plain
    want = Engine(device="cpu").predict_masked(bert, MASKED, top_k=5, ablate="1.*,2.mlp",
                                               ablate_mode="mean").as_json()
    got = json.loads(out)
    assert [c["token"] for c in got] == [c["token"] for c in want]
    assert [c["prob"] for c in got] == pytest.approx([c["prob"] for c in want], abs=1e-6)
    assert "with 1.*,2.mlp knocked out (mean)" in err


def test_predict_next_with_ablate_from_a_file_of_texts(models, capsys, tmp_path):
    gpt2 = str(models["gpt2"])
    texts = tmp_path / "texts.txt"
    texts.write_text(PREFIX + "\n")
    code, out, err = run(capsys, "predict", "--model", gpt2, "--input", str(texts), "--kind",
                          "next", "--top-k", "3", "--ablate", "2.1, 1.4")
    assert code == 0, err
    row = json.loads(out)
    assert row["ablated"] == "1.4,2.1" and row["ablate_mode"] == "zero"
    want = Engine(device="cpu").predict_next(gpt2, PREFIX, top_k=3, ablate="1.4,2.1")
    assert [c["prob"] for c in row["candidates"]] == pytest.approx(
        [c.prob for c in want.candidates], abs=1e-6)


@pytest.mark.parametrize("spec, message", [
    ("99.1", f"layer 99 is out of range: this model has layers 1-{LAYERS}"),
    ("1.x", "ablate entries are L.H, L.* or L.mlp, from 1: got '1.x'"),
    ("1.*,2.*", "knocking out every head leaves no attention at all; keep at least one"),
])
def test_a_bad_ablate_is_one_line_and_exit_2(models, capsys, spec, message):
    for command in (["predict", "--text", MASKED],
                    ["attribute", "--text", MASKED, "--target", "river"]):
        code, out, err = run(capsys, *command, "--model", str(models["bert"]), "--ablate",
                              spec)
        assert code == 2 and out == ""
        assert err.strip().splitlines() == [f"ctxlens: error: {message}"]


def test_attribute_with_ablate_is_computed_with_those_parts_off(models, capsys):
    gpt2 = str(models["gpt2"])
    args = ["attribute", "--model", gpt2, "--next", PREFIX, "--target", "water",
            "--method", "gradxinput"]
    code, out, err = run(capsys, *args)
    assert code == 0, err
    plain = json.loads(out)
    assert "ablated" not in plain
    code, out, err = run(capsys, *args, "--ablate", "1.2,1.mlp")
    assert code == 0, err
    got = json.loads(out)
    assert got["ablated"] == "1.2,1.mlp" and got["ablate_mode"] == "zero"
    want = Engine(device="cpu").attribute(gpt2, PREFIX, "water", method="gradxinput",
                                          kind="next", ablate="1.2,1.mlp")
    assert got["f"] == pytest.approx(want.f, abs=1e-5) and got["f"] != plain["f"]
    assert got["scores"] == pytest.approx(list(want.scores), abs=1e-5)
    assert set(got) - {"ablated", "ablate_mode"} == set(plain)    # otherwise the same shape


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_heads_writes_the_engines_head_importance(models, capsys, tmp_path, suffix):
    gpt2 = str(models["gpt2"])
    out = tmp_path / f"h{suffix}"
    code, _, err = run(capsys, "heads", "--model", gpt2, "--text", PREFIX, "--target", "water",
                        "--contrast", "river", "--kind", "next", "--output", str(out))
    assert code == 0, err
    want = Engine(device="cpu").head_importance(gpt2, PREFIX, "water", "river", "next")
    got = json.loads(out.read_text()) if suffix == ".json" else np.load(out)
    assert np.asarray(got["knocked"]).shape == (LAYERS, HEADS)
    np.testing.assert_allclose(np.asarray(got["knocked"]), want.knocked, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got["gradient"]), want.gradient, rtol=1e-5)
    assert float(got["spearman"]) == pytest.approx(want.spearman)
    assert float(got["f"]) == pytest.approx(want.f, abs=1e-6)
    assert "Spearman" in err
    # and by transformers alone: f = log p(water) − log p(river) next, and two heads' drops
    # with the head's slice of GPT-2's attn.c_proj input zeroed by a hook written here
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gpt2)
    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    ids = torch.tensor([tok(PREFIX)["input_ids"]])
    (water,), (river,) = (tok(" " + w, add_special_tokens=False)["input_ids"]
                          for w in ("water", "river"))

    def f() -> float:
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), -1)
        return float(logp[water] - logp[river])

    plain = f()
    assert float(got["f"]) == pytest.approx(plain, abs=1e-5)
    width = model.config.n_embd // HEADS
    for layer, head in ((0, 1), (LAYERS - 1, HEADS - 1)):
        def off(m, args):
            x = args[0].clone()
            x[..., head * width:(head + 1) * width] = 0
            return (x, *args[1:])

        handle = model.transformer.h[layer].attn.c_proj.register_forward_pre_hook(off)
        try:
            knocked = plain - f()
        finally:
            handle.remove()
        assert float(np.asarray(got["knocked"])[layer, head]) == pytest.approx(knocked, abs=1e-5)


def test_heads_refuses_a_bad_output_and_a_previous_word_model_in_one_line(models, capsys):
    code, out, err = run(capsys, "heads", "--model", str(models["bert"]), "--text", MASKED,
                          "--target", "river", "--output", "h.csv")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["ctxlens: error: --output must end in .json or .npz, "
                                        "not 'h.csv'"]
    code, out, err = run(capsys, "heads", "--model", str(models["bert"]), "--text", PREFIX,
                          "--target", "river", "--kind", "next")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
