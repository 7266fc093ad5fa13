"""Attention page against the fake engine (fake-bert has [CLS]/[SEP], fake-gpt is causal)."""
import numpy as np
import pytest

from tests.app.helpers import figure, figures, messages, no_failures, page, title

pytestmark = pytest.mark.usefixtures("fake_engine")


def _heatmap(at, name):
    return next(f for f in figures(at) if title(f).startswith(name)
                and f["data"][0]["type"] == "heatmap")


def _bert(at):
    return at.radio(key="att_model").set_value("fake-bert").run()


def test_one_head_heatmap_has_rows_summing_to_one_over_all_tokens():
    at = _bert(page("attention").run())
    no_failures(at)
    heat = _heatmap(at, "fake-bert, layer 1, head 0")
    z = np.array(heat["data"][0]["z"])
    assert z.shape == (7, 7) and np.allclose(z.sum(1), 1.0, atol=1e-5)
    assert heat["data"][0]["x"][0] == "[CLS]"
    lines = figure(at, "fake-bert, layer 1, head 0")   # the head view comes first
    drawn = [t for tr in lines["data"] if tr["mode"] == "lines" for t in tr["text"] if t]
    assert any(t.startswith("[CLS] → ") for t in drawn)


def test_hiding_special_tokens_drops_cls_and_sep_and_renormalises():
    at = _bert(page("attention").run())
    at.toggle(key="att_hide").set_value(True).run()
    no_failures(at)
    heat = _heatmap(at, "fake-bert, layer 1, head 0")
    assert "[CLS]" not in heat["data"][0]["x"] and "[SEP]" not in heat["data"][0]["x"]
    z = np.array(heat["data"][0]["z"])
    assert z.shape == (5, 5) and np.allclose(z.sum(1), 1.0, atol=1e-5)


def test_average_over_heads_replaces_the_head_choice():
    at = _bert(page("attention").run())
    at.toggle(key="att_average").set_value(True).run()
    no_failures(at)
    assert figure(at, "fake-bert, layer 1, mean of heads")


def test_model_view_statistics_and_rollout_are_drawn():
    at = page("attention").run()
    no_failures(at)
    grid = [f for f in figures(at) if f["layout"].get("xaxis", {}).get("ticktext", [""])[0] == "head 0"]
    assert grid, "model view missing"
    prev = np.array(figure(at, "Previous-token score")["data"][0]["z"])
    assert prev.shape == (3, 2)             # fake-gpt: 3 layers x 2 heads
    roll = np.array(figure(at, "Rollout to layer 1")["data"][0]["z"])
    assert np.allclose(roll.sum(1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(roll, 1), 0.0)   # causal model: rollout stays causal


def test_elmo_is_said_to_have_no_attention_and_shows_layer_contributions():
    at = page("attention").run()
    assert any("has no attention" in i for i in messages(at)["info"])
    shares = figure(at, "fake-elmo: layer contributions")
    total = np.sum([tr["y"] for tr in shares["data"]], axis=0)
    assert np.allclose(total, 1.0, atol=1e-5)


def test_a_layer_from_the_url_beyond_the_model_is_clamped():
    at = page("attention")
    at.query_params["att_layer"] = "99"
    at.run()
    no_failures(at)
    assert at.slider(key="att_layer").value == 3


def test_switching_model_resets_a_token_focus_that_no_longer_exists():
    at = _bert(page("attention").run())
    at.selectbox(key="att_focus").set_value("6: [SEP]").run()
    no_failures(at)
    drawn = {t for tr in figure(at, "fake-bert, layer 1, head 0")["data"]
             if tr["mode"] == "lines" for t in tr["text"] if t}
    assert drawn and all("[SEP]" in t for t in drawn)      # only lines from or to the focus
    at.radio(key="att_model").set_value("fake-gpt").run()
    no_failures(at)
    assert at.selectbox(key="att_focus").value == "(all)"
