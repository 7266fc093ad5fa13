"""ELMo layer-weights page against the fake engine (fake-elmo: 3 layers)."""
import numpy as np
import pytest

from tests.app.helpers import figure, messages, no_failures, page

pytestmark = pytest.mark.usefixtures("fake_engine")


def _weights(at) -> np.ndarray:
    bars = [tr for tr in figure(at, "")["data"] if tr["name"] == "softmax(s)"]
    return np.array(bars[0]["y"])


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def test_default_mix_is_uniform_with_gamma_one():
    at = page("elmo_weights").run()
    no_failures(at)
    assert np.allclose(_weights(at), 1 / 3)
    assert [s.label for s in at.slider] == ["s for layer 0", "s for layer 1", "s for layer 2", "γ"]


def test_layer0_preset_puts_all_weight_on_layer_0():
    at = page("elmo_weights").run()
    _button(at, "Layer 0 only").click().run()
    no_failures(at)
    w = _weights(at)
    assert w[0] > 0.99 and w[1:].max() < 0.01


def test_moving_a_slider_changes_the_weights_and_the_mixed_cluster_plot():
    at = page("elmo_weights").run()
    before = figure(at, "fake-elmo: 'mouse', mixed")["data"][0]["x"]
    at.slider(key="mix_s2").set_value(3.0).run()
    no_failures(at)
    w = _weights(at)
    assert np.isclose(w[2], np.exp(3) / (2 + np.exp(3)), atol=1e-3)
    after = figure(at, "fake-elmo: 'mouse', mixed")["data"][0]["x"]
    assert not np.allclose(before, after)


def test_learning_the_mix_reports_weights_and_separation_before_and_after():
    at = page("elmo_weights").run()
    _button(at, "Learn the mix").click().run()
    no_failures(at)
    assert any(s.startswith("Learned weights") for s in messages(at)["success"])
    labels = [m.label for m in at.metric]
    assert "silhouette, uniform mix" in labels and "silhouette, learned mix" in labels
    learned = at.session_state["mix_learned"]
    assert np.allclose(_weights(at), learned.weights, atol=0.02)
    # the fake's upper layers carry the context, so the learned mix leans away from layer 0
    assert learned.weights[0] < 1 / 3


def test_without_an_elmo_model_the_page_asks_for_one():
    at = page("elmo_weights")
    at.query_params["model_elmo"] = "(none)"
    at.run()
    no_failures(at)
    assert any("Choose an ELMo model" in i for i in messages(at)["info"])
    assert not at.slider
