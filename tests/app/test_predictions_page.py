"""Predictions page against the fake engine."""
import numpy as np
import pytest

from tests.app.helpers import figure, messages, no_failures, page

pytestmark = pytest.mark.usefixtures("fake_engine")


def test_target_word_is_masked_by_default_and_three_families_answer():
    at = page("predictions").run()
    no_failures(at)
    assert any("Your [MASK] likes cheese." in m.value for m in at.markdown)
    nxt = figure(at, "Next word")
    assert len(nxt["data"][0]["y"]) == 8          # top k = 8 by default
    assert figure(at, "Forward LM") and figure(at, "Backward LM")
    lens = np.array(figure(at, "Top next token per layer")["data"][0]["z"])
    assert lens.shape == (4, 1)                   # fake-gpt: 3 layers + embeddings, 1 prefix word


def test_bert_without_mlm_head_says_so_and_offers_a_switch():
    at = page("predictions").run()
    assert any("no masked-LM head" in i for i in messages(at)["info"])
    switch = next(b for b in at.button if b.label == "Switch to fake-bert-mlm")
    switch.click().run()
    no_failures(at)
    assert at.sidebar.selectbox(key="model_bert").value == "fake-bert-mlm"
    probs = figure(at, "Masked LM")["data"][0]["x"]
    assert len(probs) == 8 and all(0 <= p <= 1 for p in probs)


def test_masking_the_first_word_leaves_no_prefix_for_gpt():
    at = page("predictions").run()
    at.selectbox(key="pred_word_0").set_value(0).run()
    no_failures(at)
    assert any("no words on that side" in i for i in messages(at)["info"])
    assert any("no prefix" in i for i in messages(at)["info"])


def test_top_k_slider_sets_the_number_of_candidates():
    at = page("predictions").run()
    at.slider(key="top_k").set_value(4).run()
    assert len(figure(at, "Next word")["data"][0]["y"]) == 4
