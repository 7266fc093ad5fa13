"""Compare-layers page with the real engine and tiny random checkpoints (tests/zoo.py)."""
import numpy as np
import pytest

from app import state
from engine.analysis import geometry
from engine.api import Engine
from tests.app.helpers import figure, figures, messages, no_failures, page, set_sentences, title

pytestmark = pytest.mark.usefixtures("tiny_engine")


def _preset_encodings(model_id):
    return Engine().encode(model_id, list(state.presets()["mouse"].sentences))


def test_shows_four_metric_charts_with_a_line_per_model_and_a_cka_heatmap_per_model(tiny_engine):
    m = tiny_engine
    at = page("layers").run()
    no_failures(at)
    for name in ("Self-similarity − baseline", "Intra-sentence similarity − baseline",
                 "Anisotropy baseline", "Maximum explainable variance"):
        fig = figure(at, name)
        assert {tr["name"] for tr in fig["data"]} == {m.elmo, m.gpt, m.bert}
    for model in (m.gpt, m.elmo, m.bert):
        encs = _preset_encodings(model)
        words = np.concatenate([e.word_vectors("mean") for e in encs], axis=1)
        cka = np.array(figure(at, model)["data"][0]["z"])
        assert np.allclose(cka, geometry.linear_cka_matrix(words), atol=1e-5)
        assert cka.shape == (encs[0].n_layers,) * 2
        assert np.allclose(np.diag(cka), 1.0, atol=1e-5) and np.allclose(cka, cka.T)


def test_plotted_anisotropy_is_the_engines_per_layer_value(tiny_engine):
    at = page("layers").run()
    no_failures(at)
    expected = geometry.layer_metrics(_preset_encodings(tiny_engine.gpt), pool="mean", seed=0,
                                      lowercase=False)
    line = next(tr for tr in figure(at, "Anisotropy baseline")["data"]
                if tr["name"] == tiny_engine.gpt)
    assert np.allclose(line["y"], expected.anisotropy, atol=1e-6)


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


def test_cka_heatmaps_of_deep_models_get_the_full_width():
    """#18 item 9: three maps share a row only while every cell stays readable."""
    from app.figures import heatmaps_per_row as cka_columns

    assert cka_columns([8, 8, 7]) == 3
    assert cka_columns([4, 31, 7]) == 1          # SmolLM2: 31 layers x 18 px needs the row
    assert cka_columns([25, 13]) == 2
    assert cka_columns([31]) == 1
    for n in (7, 13, 25, 31, 49):
        cols = cka_columns([n, n, n])
        assert 1200 / cols - 120 >= n * 18 or cols == 1


def test_one_sentence_says_why_each_empty_chart_is_empty():
    """With one sentence four empty charts on a -1..4 axis; only self-similarity's emptiness was
    explained."""
    at = page("layers").run()
    set_sentences(at, ["Hi there."], "hi").run()
    no_failures(at)
    why = [c.value for c in at.caption if c.value.startswith("Undefined here")]
    assert len(why) == 4
    assert sum("(and not the same word twice); add a sentence." in w
               for w in why) == 1                                  # the baseline itself
    assert sum("minus the anisotropy baseline" in w for w in why) == 1      # intra − baseline
    at.toggle(key="adjusted").set_value(False).run()
    why = [c.value for c in at.caption if c.value.startswith("Undefined here")]
    assert len(why) == 3 and not any("minus the anisotropy" in w for w in why)


def test_an_exported_table_says_when_the_baseline_is_subtracted(monkeypatch):
    """The CSV had the same header, self_similarity, with and without the subtraction: read
    alone, the adjusted values passed for raw ones (lower by the whole baseline)."""
    from tests.app.helpers import exported_tables

    tables = exported_tables(monkeypatch)
    at = page("layers").run()
    no_failures(at)
    assert "self_similarity_minus_baseline" in tables["layers-self_similarity"].columns
    assert "intra_sentence_minus_baseline" in tables["layers-intra_sentence"].columns
    assert "anisotropy" in tables["layers-anisotropy"].columns
    at.toggle(key="adjusted").set_value(False).run()
    assert "self_similarity" in tables["layers-self_similarity"].columns


def test_between_two_models_shows_a_layers_by_layers_heatmap_with_intervals(tiny_engine,
                                                                            monkeypatch):
    """#45 item 4: model A's layers (rows) x model B's (columns), the sidebar's first and last
    models by default; the exported CSV carries each cell's 95% interval."""
    from engine.analysis.model_cka import compare_models
    from tests.app.helpers import exported_tables

    m = tiny_engine
    tables = exported_tables(monkeypatch)
    at = page("layers").run()
    no_failures(at)
    model_a, model_b = at.selectbox(key="cka_model_a").value, at.selectbox(key="cka_model_b").value
    assert (model_a, model_b) == (m.elmo, m.bert)
    fig = figure(at, "CKA between models")
    z = np.array(fig["data"][0]["z"])
    expected = compare_models(_preset_encodings(m.elmo), _preset_encodings(m.bert))
    assert z.shape == (expected.cka.shape[0], expected.cka.shape[1]) == (3, 3)
    assert np.allclose(z, expected.cka, atol=1e-6)
    assert np.allclose(np.array(fig["data"][0]["customdata"])[..., 0], expected.low, atol=1e-6)
    table = tables["cka-between-models"]
    assert {"ci_low", "ci_high", "cka", "layer_a_name", "layer_b_name"} <= set(table.columns)
    assert len(table) == z.size and (table.ci_low <= table.cka).all()
    assert (table.cka <= table.ci_high).all() and (table.n_sentences == 8).all()
    at.selectbox(key="cka_model_b").set_value(m.gpt).run()
    no_failures(at)
    assert title(figure(at, "CKA between models")).endswith(f"{m.gpt} (columns)")


def test_between_two_models_with_one_sentence_says_it_needs_two():
    at = page("layers").run()
    set_sentences(at, ["Hi there friend."], "hi").run()
    no_failures(at)
    assert any("at least 2 sentences" in i for i in messages(at)["info"])
    assert not [f for f in figures(at) if title(f).startswith("CKA between models")]


def test_a_rerun_with_nothing_changed_recomputes_nothing(tiny_engine, monkeypatch):
    """#47: a rerun redraws from the Engine's cache; no model, metric or CKA runs again."""
    from app import engine_access, results
    from engine.analysis import model_cka

    calls = []

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)

    counted(geometry, "layer_metrics")
    counted(geometry, "linear_cka_matrix")
    counted(model_cka, "compare_models")
    monkeypatch.setattr(results, "compare_models", model_cka.compare_models)
    eng = engine_access.get_engine()
    for model_id in (tiny_engine.elmo, tiny_engine.gpt, tiny_engine.bert):
        counted(eng.adapter(model_id), "encode")
        counted(eng.hidden_state_encoder(model_id), "encode")
    at = page("layers").run()
    no_failures(at)
    assert {"layer_metrics", "linear_cka_matrix", "compare_models"} <= set(calls)
    calls.clear()
    at.run()
    no_failures(at)
    assert calls == []
