"""Compare-layers page against the fake engine."""
import numpy as np
import pytest

from tests.app.helpers import figure, messages, no_failures, page, set_sentences, title, figures

pytestmark = pytest.mark.usefixtures("fake_engine")


def test_shows_four_metric_charts_with_a_line_per_model_and_a_cka_heatmap_per_model():
    at = page("layers").run()
    no_failures(at)
    for name in ("Self-similarity − baseline", "Intra-sentence similarity − baseline",
                 "Anisotropy baseline", "Maximum explainable variance"):
        fig = figure(at, name)
        assert {tr["name"] for tr in fig["data"]} == {"fake-elmo", "fake-gpt", "fake-bert"}
    for model, layers in (("fake-gpt", 4), ("fake-elmo", 3)):
        cka = np.array(figure(at, model)["data"][0]["z"])
        assert cka.shape == (layers, layers)
        assert np.allclose(np.diag(cka), 1.0) and np.allclose(cka, cka.T)


def test_raw_values_are_shown_when_the_baseline_toggle_is_off():
    at = page("layers").run()
    adjusted = figure(at, "Self-similarity − baseline")["data"][0]["y"]
    at.toggle(key="adjusted").set_value(False).run()
    no_failures(at)
    raw = figure(at, "Self-similarity")
    assert title(raw) == "Self-similarity"
    baseline = figure(at, "Anisotropy baseline")["data"][0]["y"]
    assert np.allclose(np.array(raw["data"][0]["y"]) - np.array(baseline), adjusted, atol=1e-6)


def test_sentences_without_a_repeated_word_explain_why_self_similarity_is_empty():
    at = page("layers").run()
    set_sentences(at, ["Cats sleep.", "Dogs bark loudly."], "cats").run()
    no_failures(at)
    assert any("No word occurs twice" in i for i in messages(at)["info"])
