"""The "What each part does" page and the knock-out box on the Predictions page, on the tiny
random checkpoints: every map drawn is the Engine's own result for the same question, a head
knocked out changes the predictions shown beside the originals, bad input is one line that
keeps what was typed, and the link keeps it all."""
import re

import numpy as np
import pytest

from engine.api import Engine
from tests.app.helpers import figure, figures, messages, no_failures, page, title

pytestmark = pytest.mark.usefixtures("tiny_engine")
TEXT, TARGET = "The bank is", "open"


def _captions(at) -> list[str]:
    """The captions as read: markdown's escapes removed."""
    return [re.sub(r"\\(.)", r"\1", c.value) for c in at.caption]


def _parts(model: str, view: str, **boxes):
    at = page("components")
    at.query_params["parts_model"] = model
    at.query_params["parts_view"] = view
    for key, value in boxes.items():
        at.query_params[key] = value
    return at.run()


def test_head_importance_maps_are_the_engines(tiny_engine):
    at = _parts(tiny_engine.gpt, "Head importance", imp_text_next=TEXT, imp_target_next=TARGET)
    no_failures(at)
    imp = Engine().head_importance(tiny_engine.gpt, TEXT, TARGET, None, "next")
    drop_fig = figure(at, "Drop in f with the head knocked out")
    grad = figure(at, "Gradient estimate")
    assert np.allclose(np.array(drop_fig["data"][0]["z"], float), imp.knocked, atol=1e-6)
    assert np.allclose(np.array(grad["data"][0]["z"], float), imp.gradient, atol=1e-6)
    assert any(f"over all heads: {imp.spearman:.2f}" in c for c in _captions(at))
    # head 1.2's drop by hand with transformers: f = log p(TARGET next) by the chain rule over
    # its pieces, again with that head's slice of layer 1's attn.c_proj input zeroed
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_engine.gpt)
    model = AutoModelForCausalLM.from_pretrained(tiny_engine.gpt).eval()
    n = len(tok(TEXT)["input_ids"])
    full = tok(TEXT + " " + TARGET)["input_ids"]

    def f() -> float:
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([full])).logits[0].double(), -1)
        return sum(float(logp[t - 1, full[t]]) for t in range(n, len(full)))

    width = model.config.n_embd // model.config.n_head

    def head_off(m, args):
        x = args[0].clone()
        x[..., width:2 * width] = 0                                   # head 2 (of layer 1)
        return (x, *args[1:])

    plain = f()
    handle = model.transformer.h[0].attn.c_proj.register_forward_pre_hook(head_off)
    try:
        drop = plain - f()
    finally:
        handle.remove()
    shown = np.array(drop_fig["data"][0]["z"], float)             # [layers, heads]
    assert abs(drop) > 1e-4 and shown[0, 1] == pytest.approx(drop, abs=1e-5), shown


def test_the_patching_grid_is_the_engines_restored_share(tiny_engine):
    at = _parts(tiny_engine.gpt, "Activation patching", patch_text_next=TEXT,
                patch_target_next=TARGET, patch_how="noise on words", patch_noise_next="bank")
    no_failures(at)
    p = Engine().patch(tiny_engine.gpt, TEXT, None, TARGET, None, site="residual",
                       kind="next", noise_words="bank")
    grid = figure(at, "residual: share of f restored")
    shown = np.array(grid["data"][0]["z"], float)
    assert shown.shape == p.patched.shape == (len(grid["data"][0]["y"]), len(p.tokens))
    assert np.allclose(shown, p.restored, atol=1e-6, equal_nan=True)


def test_tokens_of_other_lengths_are_one_line_and_keep_both_texts(tiny_engine):
    long = "The bank is open and the river is wide and"
    at = _parts(tiny_engine.gpt, "Activation patching", patch_text_next=TEXT,
                patch_target_next=TARGET, patch_corrupt_next=long)
    assert not at.exception and not at.error
    warned = messages(at)["warning"]
    assert len(warned) == 1 and "tokenize alike" in warned[0], warned
    assert at.text_input(key="patch_corrupt_next").value == long
    assert at.text_input(key="patch_text_next").value == TEXT


def test_the_direct_effects_are_the_engines_and_add_up(tiny_engine):
    at = _parts(tiny_engine.gpt, "Direct logit attribution", dla_text_next=TEXT,
                dla_target_next=TARGET)
    no_failures(at)
    c = Engine().components(tiny_engine.gpt, TEXT, TARGET)
    heads = figure(at, "Each head's direct effect")
    assert np.allclose(np.array(heads["data"][0]["z"], float), c.heads, atol=1e-6)
    blocks = figure(at, "Each block's direct effect")
    assert np.allclose(blocks["data"][0]["y"][0], c.embed, atol=1e-6)
    said = [x for x in _captions(at) if x.startswith("The parts add up")]
    assert said and f"= {c.total:.3f}" in said[0] and f": {c.logit:.3f}" in said[0], said


def test_a_masked_lm_says_why_it_has_no_direct_logit_attribution(tiny_engine):
    at = _parts(tiny_engine.bert_mlm, "Direct logit attribution")
    assert not at.exception and not at.error
    info = messages(at)["info"]
    assert any("no direct logit attribution" in m for m in info), info
    assert not [f for f in figures(at) if title(f).startswith("Each head")]


def _predicted(at) -> dict[str, dict]:
    return {title(f): f for f in figures(at) if title(f).startswith("Next word")}


def test_a_head_knocked_out_shows_its_predictions_beside_the_originals(tiny_engine):
    at = page("predictions")
    at.query_params["ablate"] = "1.1, 2.mlp"
    at.run()
    no_failures(at)
    shown = _predicted(at)
    on = [f for t, f in shown.items() if t.endswith("every part on")]
    off = [f for t, f in shown.items() if "1.1, 2.mlp off" in t]
    assert len(on) == 1 and len(off) == 1, list(shown)
    prefix = [c.value for c in at.get("text") if c.value.startswith("The blank: ")][0]
    context = prefix.removeprefix("The blank: ").split("[MASK]")[0].strip()
    eng = Engine()
    for fig, ablate in ((on[0], None), (off[0], "1.1, 2.mlp")):
        pred = eng.predict_next(tiny_engine.gpt, context, top_k=8, ablate=ablate)
        # horizontal bars, the likeliest at the top: x is the probabilities, last first
        assert np.allclose(fig["data"][0]["x"][::-1], [c.prob for c in pred.candidates],
                           atol=1e-6)
    assert not np.allclose(on[0]["data"][0]["x"], off[0]["data"][0]["x"])


def test_a_head_out_of_range_is_one_line_and_keeps_the_box(tiny_engine):
    at = page("predictions")
    at.query_params["ablate"] = "99.1"
    at.run()
    assert not at.exception and not at.error
    warned = messages(at)["warning"]
    assert warned and all("99" in w and "out of range" in w for w in warned), warned
    assert at.text_input(key="ablate").value == "99.1"
    # the predictions with every part on are still drawn
    assert [t for t in _predicted(at) if t.endswith("every part on")]


def test_the_question_lives_in_the_link(tiny_engine):
    at = _parts(tiny_engine.gpt, "Direct logit attribution")
    at.text_input(key="dla_text_next").set_value(TEXT)
    at.text_input(key="dla_target_next").set_value(TARGET)
    at.text_input(key="dla_contrast_next").set_value("closed").run()
    no_failures(at)
    params = {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}
    assert params["dla_text_next"] == TEXT and params["dla_target_next"] == TARGET
    assert params["dla_contrast_next"] == "closed"
    assert params["parts_view"] == "Direct logit attribution"
    again = page("components")
    for k, v in params.items():
        again.query_params[k] = v
    again.run()
    no_failures(again)
    shown = figure(again, "Each head's direct effect")["data"][0]["z"]
    c = Engine().components(tiny_engine.gpt, TEXT, TARGET, "closed")
    assert np.allclose(np.array(shown, float), c.heads, atol=1e-6)


def test_the_model_view_crosses_out_the_heads_switched_off(tiny_engine):
    at = page("attention")
    at.query_params["att_model"] = tiny_engine.gpt
    at.query_params["ablate"] = "1.2, 2.mlp"
    at.run()
    no_failures(at)
    grid = [f for f in figures(at) if len(f["data"]) >= 2 and f["data"][0]["type"] == "heatmap"
            and f["data"][1].get("mode") == "markers"][0]
    clickable, crossed = grid["data"][1], grid["data"][2]
    # the cross sits on head 2 of layer 1's clickable marker (row by row: index 1)
    assert (crossed["x"][0], crossed["y"][0]) == (clickable["x"][1], clickable["y"][1])
    assert len(crossed["x"]) == 1 and "switched off" in crossed["text"][0]
    assert any("Switched off: 1.2" in c for c in _captions(at))


def test_a_contrast_the_model_reads_as_the_target_is_one_line_not_a_map(tiny_engine):
    # the tiny BERT is uncased: 'BANK' is 'bank' to it (f = 0, every drop 0, Spearman nan)
    at = _parts(tiny_engine.bert_mlm, "Head importance", imp_text_masked="The [MASK] is open.",
                imp_target_masked="bank", imp_contrast_masked="BANK")
    assert not at.exception and not at.error
    assert messages(at)["warning"] == ["'bank' and 'BANK' are the same token for this model: "
                                       "a contrast must differ from the target"]
    assert not [f for f in figures(at) if title(f).startswith(("Drop in f", "Gradient"))]
    assert at.text_input(key="imp_contrast_masked").value == "BANK"


def test_over_the_work_cap_the_page_says_the_estimate_and_the_cap(tiny_engine, monkeypatch):
    """Issue 66 H1: patching over the work cap is refused before it runs, in one line that
    gives its estimate and the cap the page states above it; the text typed stays."""
    from engine import budget

    monkeypatch.setenv(budget.MAX_WORK_S_ENV, "60")
    monkeypatch.setenv(budget.RATE_ENV, "1000")          # a slow machine: nothing fits
    at = _parts(tiny_engine.gpt, "Activation patching", patch_text_next=TEXT,
                patch_target_next=TARGET, patch_corrupt_next="The river is")
    no_failures(at)
    assert any("capped at about 60 s of estimated work" in c for c in _captions(at))
    shown = [m for m in messages(at)["warning"] if "refused before it starts" in m]
    assert len(shown) == 1 and "activation patching of 3 × 3 cells" in shown[0], shown
    assert "min here" in shown[0] and "cap of 60 s" in shown[0], shown
    assert not figures(at)
    assert at.text_input(key="patch_text_next").value == TEXT
