"""ELMo layer-weights page with the real engine on the tiny random ELMo (char CNN + 2 biLSTM
layers, with an LM softmax; tests/zoo.py)."""
import numpy as np
import pytest

from app import state
from engine.analysis import senses
from engine.api import Engine
from tests.app.helpers import figure, messages, no_failures, page

pytestmark = pytest.mark.usefixtures("tiny_engine")
MOUSE = state.presets()["mouse"]


def _weights(at) -> np.ndarray:
    bars = [tr for tr in figure(at, "")["data"] if tr["name"] == "softmax(s)"]
    return np.array(bars[0]["y"])


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def _mouse_vectors(model_id) -> np.ndarray:
    """[layers, sentences, dim]: 'mouse' in each preset sentence, straight from the engine."""
    encs = Engine().encode(model_id, list(MOUSE.sentences))
    return np.stack([e.word_vectors("mean")[:, [w.lower() for w in e.words].index("mouse")]
                     for e in encs], axis=1)


def test_default_mix_is_uniform_with_one_slider_per_elmo_layer(tiny_engine):
    at = page("elmo_weights").run()
    no_failures(at)
    assert np.allclose(_weights(at), 1 / 3)
    names = Engine().encode(tiny_engine.elmo, [MOUSE.sentences[0]])[0].layer_names
    assert [s.label for s in at.slider] == [f"s for {n}" for n in names] + ["γ"]
    assert [s.label for s in at.slider][:3] == ["s for char CNN", "s for biLSTM 1",
                                                "s for biLSTM 2"]


def test_layer0_preset_puts_all_weight_on_layer_0():
    at = page("elmo_weights").run()
    _button(at, "Layer 0 only").click().run()
    no_failures(at)
    w = _weights(at)
    assert w[0] > 0.99 and w[1:].max() < 0.01


def test_moving_a_slider_changes_the_weights_and_the_mixed_cluster_plot(tiny_engine):
    at = page("elmo_weights").run()
    name = f"{tiny_engine.elmo}: 'mouse', mixed"
    before = figure(at, name)["data"][0]["x"]
    at.slider(key="mix_s2").set_value(3.0).run()
    no_failures(at)
    w = _weights(at)
    assert np.isclose(w[2], np.exp(3) / (2 + np.exp(3)), atol=1e-3)
    after = figure(at, name)["data"][0]["x"]
    assert not np.allclose(before, after)


def test_learning_the_mix_reports_weights_and_separation_before_and_after(tiny_engine):
    at = page("elmo_weights").run()
    _button(at, "Learn the mix").click().run()
    no_failures(at)
    assert any(s.startswith("Learned weights") for s in messages(at)["success"])
    labels = [m.label for m in at.metric]
    assert "silhouette, uniform mix" in labels and "silhouette, learned mix" in labels
    learned = at.session_state["mix_learned"]
    assert np.allclose(_weights(at), learned.weights, atol=0.02)
    # the page learns from the engine's vectors of 'mouse' and the preset's sense labels
    direct = senses.learn_mix(_mouse_vectors(tiny_engine.elmo), list(MOUSE.labels))
    assert np.allclose(learned.weights, direct.weights, atol=1e-4)
    assert learned.gamma == pytest.approx(direct.gamma, rel=1e-3)
    # the char-CNN layer is context-free: one vector for every "mouse", no help with senses
    assert learned.weights[0] < max(learned.weights[1:])


def test_without_an_elmo_model_the_page_asks_for_one():
    at = page("elmo_weights")
    at.query_params["model_elmo"] = "(none)"
    at.run()
    no_failures(at)
    assert any("Choose an ELMo model" in i for i in messages(at)["info"])
    assert not at.slider


def test_the_learned_mix_is_compared_with_the_top_layer_alone(tiny_engine):
    at = page("elmo_weights").run()
    _button(at, "Learn the mix").click().run()
    no_failures(at)
    vectors, labels = _mouse_vectors(tiny_engine.elmo), list(MOUSE.labels)
    top = senses.sense_separation(vectors[-1][None], labels).silhouette[0]
    learned = at.session_state["mix_learned"].after.silhouette[0]
    verdict = "beats" if learned > top + 1e-9 else "does not beat"
    assert any(c.value.startswith(f"Top layer only: silhouette {top:.3f}. The learned mix "
                                  f"{verdict} it ({learned - top:+.3f})") for c in at.caption)


def test_layer_norm_toggle_mixes_and_learns_on_layer_normed_layers(tiny_engine):
    """AllenNLP's do_layer_norm on the page: the mixed points move, learning reads the normed
    layers (the same weights as senses.learn_mix(..., do_layer_norm=True)), and the toggle is in
    the link."""
    at = page("elmo_weights").run()
    name = f"{tiny_engine.elmo}: 'mouse', mixed"
    before = figure(at, name)["data"][0]["x"]
    at.toggle(key="mix_ln").set_value(True).run()
    no_failures(at)
    assert not np.allclose(before, figure(at, name)["data"][0]["x"])
    _button(at, "Learn the mix").click().run()
    no_failures(at)
    direct = senses.learn_mix(_mouse_vectors(tiny_engine.elmo), list(MOUSE.labels),
                              do_layer_norm=True)
    assert np.allclose(at.session_state["mix_learned"].weights, direct.weights, atol=1e-4)
    assert at.query_params["mix_ln"] in (["1"], "1", ["true"], "true", ["True"], "True")


def test_layer0_only_says_every_point_is_the_same_instead_of_scoring_rounding_noise():
    """The char CNN gives every "mouse" one vector; scored on the 1e-9 left on the other layers
    the page read silhouette -0.582, nearest centroid 0.62 on elmo-brown."""
    at = page("elmo_weights").run()
    _button(at, "Layer 0 only").click().run()
    no_failures(at)
    now = next(c.value for c in at.caption if c.value.startswith("Current mix"))
    assert now.startswith("Current mix: silhouette 0.000, leave-one-out nearest-centroid "
                          "accuracy 0.50. Every occurrence has the same vector")
    assert "n/a" not in now
    _button(at, "Uniform").click().run()
    now = next(c.value for c in at.caption if c.value.startswith("Current mix"))
    assert "same vector" not in now and "n/a" not in now


@pytest.mark.parametrize("query", [{"mix_s0": "11"}, {"mix_gamma": "0"}, {"mix_s1": "nan"},
                                   {"mix_s0": "1e9"}])
def test_a_mix_value_out_of_range_in_the_link_keeps_the_default(query):
    """Streamlit replaced the whole page with StreamlitValueAboveMaxError."""
    at = page("elmo_weights")
    at.query_params.update(query)
    at.run()
    no_failures(at)
    assert len(at.slider) == 4 and np.allclose(_weights(at), 1 / 3)
    assert at.slider(key="mix_gamma").value == 1.0


def test_learning_the_mix_of_one_sense_says_why_in_one_line():
    """The button's callback runs before the page and its guard: a refusal is a warning."""
    at = page("elmo_weights")
    at.query_params["labels"] = "|".join(["small animal"] * len(MOUSE.sentences))
    at.run()
    _button(at, "Learn the mix").click().run()
    no_failures(at)
    assert messages(at)["warning"] == ["label at least two senses to learn the mix"]


def test_a_learned_gamma_past_the_slider_says_where_the_slider_stopped(tiny_engine):
    """A learned γ of 4.79 showed as "γ = 4.79" beside a slider (and bars) held at 4.00, with
    nothing saying why they differ; the message now names the slider's end and why no score
    changes (γ scales every vector alike)."""
    at = page("elmo_weights").run()
    _button(at, "Learn the mix").click().run()
    learned = at.session_state["mix_learned"]
    wide = senses.LearnedMix(learned.s, 4.79, learned.weights, learned.before, learned.after)
    at.session_state["mix_learned"] = wide
    at.session_state["mix_gamma"] = 4.0
    at.run()
    no_failures(at)
    said = next(s for s in messages(at)["success"] if s.startswith("Learned weights"))
    assert "γ = 4.79" in said and "slider stops at 4.00" in said, said
    assert at.slider(key="mix_gamma").value == 4.0
    # a γ inside the slider's range gets no such note
    at.session_state["mix_learned"] = senses.LearnedMix(learned.s, 1.5, learned.weights,
                                                        learned.before, learned.after)
    at.run()
    said = next(s for s in messages(at)["success"] if s.startswith("Learned weights"))
    assert "slider stops" not in said
