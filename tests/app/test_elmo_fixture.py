"""ELMo through the real ELMo adapter: the tiny bilm-tf reference checkpoint in
shared/fixtures/elmo-reference (2 biLSTM layers, 32 dims, no LM softmax), offered in the sidebar
as a local model folder from CTXLENS_MODEL_DIRS."""
import numpy as np
import pytest
import streamlit as st

from app import engine_access

from tests.app.helpers import figure, messages, no_failures, page

pytestmark = pytest.mark.slow
SENTENCES = ("A bat flew out of the cave.\nHe swung the bat hard.\nThe bat slept all day.\n"
             "She bought a new bat.")


@pytest.fixture
def elmo_page(elmo_fixture_dir, monkeypatch):
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(elmo_fixture_dir.parent))
    st.cache_resource.clear()
    engine_access.get_engine().results.clear()

    def open_page(name):
        at = page(name, timeout=600)
        for k, v in {"sentences": SENTENCES, "target": "bat", "labels": "animal|sport|animal|sport",
                     "model_elmo": str(elmo_fixture_dir.resolve()), "model_gpt": "(none)",
                     "model_bert": "(none)"}.items():
            at.query_params[k] = v
        return at.run()
    yield open_page
    st.cache_resource.clear()
    engine_access.get_engine().results.clear()


def test_elmo_weights_page_mixes_the_three_elmo_layers_and_learns(elmo_page, elmo_fixture_dir):
    at = elmo_page("elmo_weights")
    no_failures(at)
    assert [s.label for s in at.slider] == ["s for char CNN", "s for biLSTM 1", "s for biLSTM 2",
                                            "γ"]
    next(b for b in at.button if b.label == "Learn the mix").click().run()
    no_failures(at)
    learned = at.session_state["mix_learned"]
    assert np.isclose(learned.weights.sum(), 1.0) and learned.gamma > 0
    # the char-CNN layer is context-free: one vector for every "bat", no help with senses
    assert learned.weights[0] < max(learned.weights[1:])


def test_elmo_clusters_collapse_layer0_and_predictions_explain_the_missing_softmax(elmo_page):
    at = elmo_page("clusters")
    no_failures(at)
    assert any("every context gives the same vector" in c.value for c in at.caption)
    at = elmo_page("predictions")
    no_failures(at)
    assert any("no LM softmax" in i for i in messages(at)["info"])
