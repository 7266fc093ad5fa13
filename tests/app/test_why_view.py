"""The Predictions page's "Why this word?" view on the tiny random checkpoints: the coloured
words are the engine's own attribution of the same prediction, a contrast makes f the
difference, a bad target is one line that keeps what was typed, and the link keeps it all."""
import re

import numpy as np
import pytest

from engine.api import Engine
from tests.app.helpers import figure, figures, messages, no_failures, page, title

pytestmark = pytest.mark.usefixtures("tiny_engine")
BLANK = "Your [MASK] likes cheese."      # the mouse preset's first sentence, target masked


def _explained(target: str = "mouse", contrast: str = "", method: str = "gradxinput"):
    at = page("predictions").run()
    at.toggle(key="why").set_value(True).run()
    at.text_input(key="why_target").set_value(target)
    at.text_input(key="why_contrast").set_value(contrast)
    at.radio(key="why_method").set_value(method).run()
    return at


def _unescaped(md: str) -> str:
    return re.sub(r"\\(.)", r"\1", md)


def _word_maps(at) -> list[dict]:
    labels = ("gradient", "saliency", "integrated", "occlusion")
    return [f for f in figures(at) if title(f).startswith(labels) and "per word" not in title(f)]


def test_the_why_view_colours_the_sentences_words_with_the_engines_scores(tiny_engine):
    m = tiny_engine
    at = _explained()
    no_failures(at)
    maps = _word_maps(at)
    # one map per model that fills the blank, side by side: the masked LM's, ELMo's, the GPT's
    assert len(maps) == 3, [title(f) for f in figures(at)]
    eng = Engine()
    for fig, model in zip(maps, (at.selectbox(key="pred_bert").value, m.elmo, m.gpt)):
        att = eng.attribute(model, BLANK, "mouse", method="gradxinput", kind="masked")
        cells = fig["data"][0]
        assert cells["text"][0] == list(att.words)
        assert np.isclose(sum(cells["z"][0]), float(att.scores.sum()), atol=1e-5)
        assert np.allclose(cells["z"][0], att.scores, atol=1e-6)
    assert any("f = " in c.value and "natural log" in c.value for c in at.caption)
    assert any("How far to trust this map" in c.value for c in at.caption)
    # the masked LM's map by hand with transformers: Σ_d x_d ∂f/∂x_d of each piece's input
    # embedding, f = log p(mouse at the blank), each word the sum of its pieces (the blank
    # and the special tokens held fixed, 0)
    # (the model and tokenizer transformers built, as loaded for the loop above: the masked
    # LM offered can be the bundled MiniLM, whose head is an overlay on its base)
    import torch

    loaded = eng.adapter(at.selectbox(key="pred_bert").value)
    tok, model = loaded.tokenizer, loaded.model
    enc = tok(BLANK.replace("[MASK]", tok.mask_token))
    ids = torch.tensor([enc["input_ids"]])
    blank = enc["input_ids"].index(tok.mask_token_id)
    (mouse,) = tok("mouse", add_special_tokens=False)["input_ids"]
    x = model.get_input_embeddings()(ids).detach().requires_grad_()
    f = torch.log_softmax(model(inputs_embeds=x).logits[0, blank], -1)[mouse]
    (grad,) = torch.autograd.grad(f, x)
    piece = (grad * x).sum(-1)[0].detach().numpy()
    words = [0.0] * len(maps[0]["data"][0]["z"][0])
    for i, w in enumerate(enc.word_ids()):
        if w is not None and i != blank:
            words[w] += float(piece[i])
    assert np.abs(words).max() > 1e-3
    assert np.allclose(maps[0]["data"][0]["z"][0], words, atol=1e-5)


def test_a_contrast_makes_f_the_difference_of_the_two_log_probabilities(tiny_engine):
    m = tiny_engine
    at = _explained("mouse", "cat", "occlusion")
    no_failures(at)
    eng = Engine()
    one = eng.attribute(m.gpt, BLANK, "mouse", method="occlusion").f
    other = eng.attribute(m.gpt, BLANK, "cat", method="occlusion").f
    shown = [_unescaped(c.value) for c in at.caption if c.value.startswith("f = ")]
    assert len(shown) == 3 and f": {one - other:.3f} (natural log)" in shown[2], shown
    assert all("rather than 'cat'" in title(f) for f in _word_maps(at))


def test_integrated_gradients_states_its_steps_and_completeness_gap():
    at = _explained(method="ig")
    no_failures(at)
    assert any("completeness gap" in c.value and "steps" in c.value for c in at.caption)


def test_every_method_is_drawn_side_by_side():
    at = _explained(method="all")
    no_failures(at)
    names = {title(f).split(":")[0] for f in _word_maps(at)}
    assert names == {"gradient × input", "saliency", "integrated gradients", "occlusion"}


def test_a_bad_target_is_one_line_and_keeps_what_was_typed():
    at = _explained("mouse", "mouse")
    assert not at.exception
    assert any("is the target itself" in w for w in messages(at)["warning"])
    assert at.text_input(key="why_target").value == "mouse"
    assert at.text_input(key="why_contrast").value == "mouse"
    assert not _word_maps(at)


def test_a_predicted_word_picked_becomes_the_target():
    at = page("predictions").run()
    at.toggle(key="why").set_value(True).run()
    pick = at.selectbox(key="why_pick")
    word = pick.options[1]
    pick.set_value(word).run()
    no_failures(at)
    assert at.text_input(key="why_target").value == word
    assert all(f"why {word!r}" in title(f) for f in _word_maps(at))


def test_the_next_word_is_explained_with_rollout_beside_it(tiny_engine):
    at = _explained()
    at.radio(key="why_kind").set_value("next").run()
    no_failures(at)
    maps = _word_maps(at)          # ELMo's forward LM, then the GPT's next word
    assert len(maps) == 2
    for fig, model in zip(maps, (tiny_engine.elmo, tiny_engine.gpt)):
        att = Engine().attribute(model, "Your", "mouse", method="gradxinput", kind="next")
        assert np.allclose(fig["data"][0]["z"][0], att.scores, atol=1e-6)
    assert figure(at, "Attention rollout")


def test_the_question_lives_in_the_link():
    at = _explained("cheese", "mouse", "occlusion")
    params = dict(at.query_params)
    assert params["why"] in ("True", ["True"])
    for key, value in (("why_target", "cheese"), ("why_contrast", "mouse"),
                       ("why_method", "occlusion")):
        assert params[key] in (value, [value]), params
    again = page("predictions")
    for key, value in params.items():
        again.query_params[key] = value[0] if isinstance(value, list) else value
    again.run()
    no_failures(again)
    assert again.text_input(key="why_target").value == "cheese"
    assert again.radio(key="why_method").value == "occlusion"
    assert all("rather than 'mouse'" in title(f) for f in _word_maps(again))


def test_a_contrast_the_model_reads_as_the_target_is_one_line_not_a_map():
    # the tiny BERT is uncased: 'MOUSE' is 'mouse' to it, so f would be 0 and the map all 0
    at = _explained("mouse", "MOUSE")
    assert not at.exception and not at.error
    said = [w for w in messages(at)["warning"] if "are the same token" in w]
    assert said == ["'mouse' and 'MOUSE' are the same token for this model: a contrast must "
                    "differ from the target"], messages(at)["warning"]
    # the masked LM's map is not drawn (ELMo's vocabulary has no 'MOUSE'; the cased GPT draws)
    assert len(_word_maps(at)) == 1, [title(f) for f in _word_maps(at)]
    assert at.text_input(key="why_contrast").value == "MOUSE"
