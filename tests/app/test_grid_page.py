"""Layers side by side (app/pages/grid.py) with the real engine on tiny random checkpoints."""
import numpy as np
import pytest

from app import state
from app import selection
from engine.analysis import occurrences, projection
from engine.api import Engine
from tests.app.helpers import exported_tables, figure, no_failures, page

pytestmark = pytest.mark.usefixtures("tiny_engine")
MOUSE = state.presets()["mouse"].sentences


def _panels(fig) -> list[np.ndarray]:
    """Points per panel, in panel order (traces carry customdata [point, panel])."""
    out: dict[int, list] = {}
    for tr in fig["data"]:
        for (i, p), x, y in zip(tr["customdata"], tr["x"], tr["y"]):
            out.setdefault(int(p), []).append((int(i), x, y))
    return [np.array([xy for _, *xy in sorted(out[p])]) for p in sorted(out)]


def test_one_panel_per_layer_with_the_engines_aligned_projection(tiny_engine):
    at = page("grid")
    at.query_params["grid_model"] = tiny_engine.gpt
    at.run()
    no_failures(at)
    fig = figure(at, f"{tiny_engine.gpt}: 'mouse', 8 points")
    encs = Engine().encode(tiny_engine.gpt, list(MOUSE))
    n_layers = encs[0].n_layers
    panels = _panels(fig)
    assert len(panels) == n_layers == len(fig["layout"]["annotations"])
    assert fig["layout"]["annotations"][0]["text"].endswith("(baseline)")
    occ = occurrences.collect(encs, "mean", "mouse")
    expected = projection.project(occ.vectors, "pca")
    for layer, pts in enumerate(panels):
        assert np.allclose(pts, expected.coords[layer], atol=1e-4)
    assert {tr["name"] for tr in fig["data"]} == {"animal", "device"}


def test_the_csv_counts_sentences_and_word_positions_from_0_as_the_cli_does(tiny_engine,
                                                                          monkeypatch):
    """The grid's CSV said (sentence 1, position 5) for the word `ctxlens embed` and
    `ctxlens neighbours` call (sentence 0, position 4), under the same column name."""
    from engine.text import split_words

    tables = exported_tables(monkeypatch)
    at = page("grid")
    at.query_params["grid_model"] = tiny_engine.gpt
    at.run()
    no_failures(at)
    table = tables[f"grid-{tiny_engine.gpt}"]
    assert "sentence" not in table.columns
    first = table[table.layer_index == 0]
    expected = [(s, [w.lower() for w in split_words(text).words].index("mouse"))
                for s, text in enumerate(MOUSE)]
    assert list(zip(first.sentence_index, first.position)) == expected


def _select(at, model_id: str, sel: str, layer: int):
    at.query_params["grid_model"] = model_id
    at.query_params["grid_sel"] = sel
    at.query_params["grid_sel_layer"] = str(layer)
    at.query_params["grid_sel_model"] = model_id
    return at


def test_a_selection_rings_its_points_in_every_panel_and_the_side_panel_reads_it(tiny_engine):
    """The selection as a shared link carries it (grid_sel "sentence:word", 0-based)."""
    model = tiny_engine.bert_mlm
    encs = Engine().encode(model, list(MOUSE))
    top = encs[0].n_layers - 1
    at = page("grid")
    at.query_params["model_bert"] = model
    _select(at, model, "2:1", top).run()          # sentence 3, word 2 ("mouse")
    no_failures(at)
    assert encs[2].words[1].lower() == "mouse"
    fig = figure(at, f"{model}: 'mouse'")
    ringed = {int(i) for tr in fig["data"] for (i, _), c in
              zip(tr["customdata"], tr["marker"]["line"]["color"]) if c == "black"}
    assert ringed == {2}                            # occurrence 2 = sentence 3, in every panel
    per_panel = [sum(c == "black" for c in tr["marker"]["line"]["color"]) for tr in fig["data"]]
    assert sum(per_panel) == encs[0].n_layers
    # the side panel: the sentence, its nearest neighbours by cosine at the chosen layer
    tables = [el.value for el in at.dataframe]
    assert tables[0]["text"].tolist() == [MOUSE[2]]
    occ = occurrences.collect(encs, "mean", "mouse")
    v = occ.vectors[top] / np.linalg.norm(occ.vectors[top], axis=1, keepdims=True)
    cos = v @ v[2]
    order = [j for j in np.argsort(-cos) if j != 2][:5]
    near = tables[1]
    assert near["sentence"].tolist() == [j + 1 for j in order]
    assert np.allclose(near["cosine"], cos[order], atol=1e-3)
    # a masked LM fills the word's place, and its attention row is drawn
    guesses = tables[2]
    assert len(guesses) == 5 and guesses["probability"].is_monotonic_decreasing
    att = figure(at, "Where 'mouse' attends")
    row = np.array(att["data"][0]["y"])
    assert len(row) >= len(encs[2].words) and 0.99 < row.sum() < 1.01


def test_a_gpt_point_shows_next_word_guesses_and_isolate_keeps_the_selection(tiny_engine):
    occ = occurrences.collect(Engine().encode(tiny_engine.gpt, list(MOUSE)), "mean", "mouse")
    at = page("grid")
    _select(at, tiny_engine.gpt, ",".join(f"{s}:{w}" for s, w in occ.ids[:3]), 1)
    at.query_params["grid_isolate"] = "True"
    at.run()
    no_failures(at)
    fig = figure(at, f"{tiny_engine.gpt}: 'mouse', 3 points")
    assert all(len(p) == 3 for p in _panels(fig))
    assert any("next-word guesses" in m.value for m in at.markdown)


def test_find_rings_a_words_occurrences_among_every_word(tiny_engine):
    at = page("grid")
    at.query_params["grid_model"] = tiny_engine.gpt
    at.query_params["grid_points"] = "every word"
    at.query_params["grid_find"] = "the"
    at.run()
    no_failures(at)
    fig = figure(at, f"{tiny_engine.gpt}: every word")
    words = [w for s in Engine().encode(tiny_engine.gpt, list(MOUSE)) for w in s.words]
    first = [c for tr in fig["data"] for (i, p), c in
             zip(tr["customdata"], tr["marker"]["line"]["color"]) if p == 0]
    assert len(first) == len(words)
    assert sum(c == "darkorange" for c in first) == sum(w.lower() == "the" for w in words) > 0
    assert {tr["name"] for tr in fig["data"]} >= {"other words", "animal", "device"}


def test_3d_and_the_animation(tiny_engine):
    at = page("grid")
    at.query_params["grid_model"] = tiny_engine.elmo
    at.query_params["grid_3d"] = "True"
    at.run()
    no_failures(at)
    fig = figure(at, f"{tiny_engine.elmo}: 'mouse'")
    assert {tr["type"] for tr in fig["data"]} == {"scatter3d"}
    assert all(len(tr["z"]) == len(tr["x"]) for tr in fig["data"])
    at.query_params["grid_3d"] = "False"
    at2 = page("grid")
    at2.query_params["grid_model"] = tiny_engine.elmo
    at2.run()
    anim = figure(at2, f"{tiny_engine.elmo}: 'mouse', layer by layer")
    grid_fig = figure(at2, f"{tiny_engine.elmo}: 'mouse', 8 points")
    assert len(anim["frames"]) == len(grid_fig["layout"]["annotations"])


@pytest.mark.parametrize("n_layers,every,expected", [
    (31, 0, [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]),
    (7, 0, list(range(7))),
    (13, 1, list(range(13))),
    (13, 5, [0, 5, 10, 12]),
])
def test_shown_layers_keeps_the_baseline_and_the_top_layer(n_layers, every, expected):
    assert selection.shown_layers(n_layers, every, 12) == expected
