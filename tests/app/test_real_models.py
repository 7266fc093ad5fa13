"""The pages with the bundled models (minilm-l6: BERT, 6 layers x 12 heads, no MLM head;
smollm2-135m: GPT, 30 layers x 9 heads). One engine is shared by every test in this module."""
import re

import numpy as np
import pytest
import streamlit as st

from app import engine_access, results

from tests.app.helpers import figure, messages, no_failures, page

pytestmark = pytest.mark.slow
SENTENCES = "A bat flew out of the cave.\nHe swung the bat hard.\nThe bat slept all day."
PARAMS = {"sentences": SENTENCES, "target": "bat", "labels": "animal|sport|animal",
          "model_elmo": "(none)", "model_gpt": "smollm2-135m", "model_bert": "minilm-l6"}


@pytest.fixture(scope="module", autouse=True)
def real_engine():
    st.cache_resource.clear()
    engine_access.get_engine().results.clear()
    yield


def opened(name: str):
    at = page(name, timeout=600)
    for k, v in PARAMS.items():
        at.query_params[k] = v
    return at.run()


def test_clusters_show_every_layer_of_both_bundled_models():
    at = opened("clusters")
    no_failures(at)
    assert at.slider(key="layer_smollm2-135m").max == 30
    assert at.slider(key="layer_minilm-l6").max == 6
    shown = at.slider(key="layer_smollm2-135m").value     # where the page opened it
    cos = np.array(figure(at, f"Cosine similarity, layer {shown}")["data"][0]["z"])
    assert cos.shape == (3, 3) and np.allclose(np.diag(cos), 1.0, atol=1e-4)
    sil = figure(at, "Silhouette")
    assert {tr["name"] for tr in sil["data"]} == {"smollm2-135m", "minilm-l6"}


def test_attention_statistics_have_one_cell_per_layer_and_head():
    at = opened("attention")
    no_failures(at)
    assert np.array(figure(at, "Entropy")["data"][0]["z"]).shape == (30, 9)
    at.radio(key="att_model").set_value("minilm-l6").run()
    no_failures(at)
    assert np.array(figure(at, "Entropy")["data"][0]["z"]).shape == (6, 12)
    sink = np.array(figure(at, "Sink share")["data"][0]["z"])
    assert ((sink >= 0) & (sink <= 1 + 1e-5)).all()


def test_predictions_note_the_missing_mlm_head_and_read_smollm2_layers():
    at = opened("predictions")
    no_failures(at)
    # the caption is markdown with the model id escaped (minilm\-l6): read as it shows
    assert any("minilm-l6 (the sidebar's BERT) has no masked-LM head" in
               re.sub(r"\\(.)", r"\1", c.value) for c in at.caption)
    fill = figure(at, "Fill from both sides")["data"][0]["x"]
    assert len(fill) == 8 and all(0 < p <= 1 for p in fill)
    nxt = figure(at, "Next word")
    probs = nxt["data"][0]["x"]
    assert len(probs) == 8 and all(0 < p <= 1 for p in probs)
    lens = np.array(figure(at, "Top next token per layer")["data"][0]["z"])
    assert lens.shape == (31, 1)             # "A" is the prefix; 30 layers + embeddings


def test_layer_metrics_for_both_models():
    at = opened("layers")
    no_failures(at)
    aniso = figure(at, "Anisotropy baseline")
    lengths = {tr["name"]: len(tr["y"]) for tr in aniso["data"]}
    assert lengths == {"smollm2-135m": 31, "minilm-l6": 7}


def test_every_bundled_masked_lm_fills_the_blank():
    from engine.registry import availability, load_registry

    reg = load_registry()
    bundled = [m for m in ("minilm-l6-mlm", "bert-brown-mlm")
               if m in reg and availability(reg[m]) in ("bundled", "installed")]
    if not bundled:
        pytest.skip("no bundled masked LM is trained/installed here")
    at = opened("predictions")
    no_failures(at)
    pick = at.selectbox(key="pred_bert")
    assert pick.value == bundled[0]          # minilm-l6 (the sidebar's) has no head
    for model_id in bundled:
        pick.set_value(model_id).run()
        no_failures(at)
        check_masked_bars(at)


def check_masked_bars(at) -> None:
    masked = figure(at, "Masked LM")["data"][0]
    assert len(masked["x"]) == 8 and all(0 < p <= 1 for p in masked["x"])
    assert sorted(masked["x"], reverse=True) == masked["x"][::-1]   # drawn best at the top


def test_elmo_brown_predicts_from_both_sides_of_the_blank():
    from engine.registry import availability, load_registry

    entry = load_registry().get("elmo-brown")
    if entry is None or availability(entry) not in ("bundled", "installed"):
        pytest.skip("elmo-brown is not trained/installed here")
    at = page("predictions", timeout=600)
    for k, v in {**PARAMS, "model_elmo": "elmo-brown", "model_gpt": "(none)",
                 "model_bert": "(none)"}.items():
        at.query_params[k] = v
    at.run()
    no_failures(at)
    for side in ("Both LMs together", "Forward LM", "Backward LM"):
        probs = figure(at, side)["data"][0]["x"]
        assert len(probs) == 8 and all(0 < p <= 1 for p in probs)


def test_a_baseline_that_differs_only_by_position_says_so():
    """minilm-l6's input layer adds position embeddings: its 'bat' points are nearly one
    vector, yet the panel, scaled to fill its box, drew them as far apart as the top layer's;
    smollm2-135m's input layer has no positions, so its points are one (said already)."""
    at = opened("clusters")
    no_failures(at)
    notes = [c.value for c in at.caption if "nearly one vector" in c.value]
    assert len(notes) == 1 and notes[0].startswith("embeddings holds the word and its position")
    cos = float(notes[0].split("mean cosine ")[1].split(")")[0])
    tv = results.target_vectors("minilm-l6", tuple(SENTENCES.splitlines()), "bat", "mean")
    u = tv.vectors[0] / np.linalg.norm(tv.vectors[0], axis=1, keepdims=True)
    assert cos == pytest.approx((u @ u.T)[np.triu_indices(3, 1)].mean(), abs=1e-3) and cos > 0.9
    assert any(c.value.startswith("embeddings is context-free: all 3 sentences")
               for c in at.caption)          # smollm2-135m's, unchanged
