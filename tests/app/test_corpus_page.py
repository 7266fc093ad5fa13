"""Corpus page on an index of a tiny BERT built into a configured index folder."""
import re

import numpy as np
import pytest

from engine.corpus import catalog
from engine.corpus import index as corpus_index
from engine.corpus import manifest as corpus_manifest
from engine.text import split_words
from tests.app.helpers import figure, no_failures, page
from tests.engine.corpus.test_index import _corpus

pytestmark = pytest.mark.usefixtures("tiny_engine")


@pytest.fixture
def indexes(tiny_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "indexes"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    sentences = _corpus(80, seed=11)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny_engine.bert, str(src), tmp_path / "indexes" / "tiny", layers="0,1,2",
                       progress=False)
    return sentences


def test_without_an_index_the_page_offers_to_build_brown(tiny_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "none"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    at = page("corpus").run()
    no_failures(at)
    assert any("No corpus index yet" in i.value for i in at.info)
    assert any(b.label.startswith("Build the Brown index") for b in at.button)


def test_an_older_format_index_in_the_apps_folder_is_built_again(tiny_engine, tmp_path,
                                                                  monkeypatch):
    """An index of format 1 (one table for all layers) where the page builds Brown: the page
    offers the build, and the build replaces it (it used to end in "another format")."""
    import json

    from engine.corpus import sources

    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "none"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    # a small stand-in for Brown, so the build takes seconds
    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(40, seed=13))))
    at = page("corpus").run()
    model = next(b.label for b in at.button
                 if b.label.startswith("Build the Brown index")).removeprefix(
        "Build the Brown index for ")
    old = catalog.brown_index_path(model)
    (old / "db" / "occurrences.lance").mkdir(parents=True)
    (old / "manifest.json").write_text(json.dumps({"schema": "ctxlens-index/1"}))
    at = page("corpus").run()
    no_failures(at)
    at.button(key="corpus_build").click().run()
    no_failures(at)
    assert json.loads((old / "manifest.json").read_text())["schema"] == \
        corpus_manifest.MANIFEST_SCHEMA
    assert not any(b.label.startswith("Build the Brown index") for b in at.button)


def _corpus_page(**query) -> "AppTest":
    """The Corpus page opened with a link's settings, run once, without errors."""
    at = page("corpus")
    at.query_params.update(query)
    at.run()
    no_failures(at)
    return at


def test_a_word_is_mapped_with_every_occurrence_and_coloured_by_clusters(indexes):
    at = _corpus_page(corpus_word="bank", corpus_layer="2")
    n = sum(w.lower() == "bank" for s in indexes for w in split_words(s).words)
    fig = figure(at, f"'bank' in ")
    points = sum(len(tr["x"]) for tr in fig["data"])
    assert points == n and f"{n:,} of {n:,} occurrences" in fig["layout"]["title"]["text"]
    assert all(tr["name"].startswith("cluster ") for tr in fig["data"])


def test_the_maps_export_has_the_one_settings_schema_of_every_export(indexes, monkeypatch):
    """Its JSON export carries every key of the settings manifest (Inputs.settings) and the
    map's own settings, as the other pages' exports do; it used to be a dict of its own under
    the same schema id."""
    from app import export, state

    seen = []
    real = export.manifest_json
    monkeypatch.setattr(export, "manifest_json", lambda s: seen.append(s) or real(s))
    _corpus_page(corpus_word="bank", corpus_layer="2")
    corpus = [s for s in seen if "index" in s]
    assert corpus, "the map's export got no settings"
    common = state.Inputs((), "", (), "mean").settings()
    assert set(common) <= set(corpus[0]) and corpus[0]["manifest"] == state.MANIFEST_SCHEMA
    assert (corpus[0]["word"], corpus[0]["layer"]) == ("bank", 2)


def test_keyword_labels_colour_the_map(indexes):
    at = _corpus_page(corpus_word="bank",
                      corpus_labels="river: river, water, boat\nmoney: money, cash, loan")
    fig = figure(at, "'bank' in ")
    names = {tr["name"] for tr in fig["data"]}
    assert names <= {"river", "money", "?"} and len(names) >= 2
    for tr in fig["data"]:
        for hover in tr["hovertext"]:
            words = set(re.sub(r"<[^>]+>", " ", hover.lower()).split())
            if tr["name"] == "river":
                assert words & {"river", "water", "boat"}


def test_search_the_corpus_for_contexts_like_a_sentence(indexes):
    at = _corpus_page(corpus_query_text=indexes[4],
                      corpus_query_word=split_words(indexes[4]).words[0], corpus_layer="1")
    hits = at.dataframe[-1].value
    assert len(hits) == 10 and hits["cosine"].iloc[0] > 0.999
    assert hits["sentence"].iloc[0] == indexes[hits["sentence_id"].iloc[0]]
    assert np.all(np.diff(hits["cosine"].to_numpy()) <= 1e-9)


def test_the_grid_side_panel_sends_its_point_to_the_corpus_search(indexes, tiny_engine):
    from engine.analysis import occurrences
    from engine.api import Engine
    from app import state

    mouse = state.presets()["mouse"].sentences
    occ = occurrences.collect(Engine().encode(tiny_engine.bert, list(mouse)), "mean", "mouse")
    at = page("grid")
    s, w = occ.ids[0]
    at.query_params.update({"grid_model": tiny_engine.bert, "grid_sel": f"{s}:{w}",
                            "grid_sel_layer": "1", "grid_sel_model": tiny_engine.bert,
                            "model_bert": tiny_engine.bert})
    at.run()
    no_failures(at)
    button = next(b for b in at.button if b.label.startswith("Search the corpus"))
    button.click().run()
    assert at.session_state["corpus_query_text"] == mouse[s]
    assert at.session_state["corpus_query_word"].lower() == "mouse"


def test_a_clicked_point_finds_itself_first_from_the_maps_own_vectors(indexes):
    # the click's neighbours search from the map's own vector of that point: the occurrence
    # clicked comes back first, at cosine 1, at its own sentence and position
    from app import corpus_access
    from app.pages.corpus import MAX_POINTS

    folder = str(catalog.index_dirs()[0] / "tiny")
    vec, sids, pos = corpus_access.corpus_occurrences(folder, "bank", 2, MAX_POINTS)
    for point in (0, len(vec) - 1):
        hits = corpus_access.corpus_neighbours_of(folder, "bank", 2, MAX_POINTS, point, 5)
        assert (hits[0].sentence_id, hits[0].position) == (sids[point], pos[point])
        assert hits[0].cosine > 0.999 and hits[0].word.lower() == "bank"
    with pytest.raises(Exception, match="not on the map"):
        corpus_access.corpus_neighbours_of(folder, "bank", 2, MAX_POINTS, len(vec), 5)


def test_every_layer_side_by_side_shows_the_same_occurrences_in_one_panel_a_layer(indexes):
    at = _corpus_page(corpus_word="bank", corpus_layer="1", corpus_grid="true")
    n = sum(w.lower() == "bank" for s in indexes for w in split_words(s).words)
    fig = figure(at, "'bank' in ")
    assert f"{n:,} of {n:,} occurrences at every layer" in fig["layout"]["title"]["text"]
    panels = {}
    for tr in fig["data"]:
        panels.setdefault(tr.get("xaxis", "x"), []).extend(
            tuple(c) for c in tr["customdata"])
    assert len(panels) == 3                                  # layers 0, 1, 2 of the index
    points = [sorted(p for p, _ in v) for v in panels.values()]
    assert all(p == list(range(n)) for p in points)          # every occurrence in every panel
    assert all(tr["name"].startswith("cluster ") for tr in fig["data"])
    assert any("Coloured by" in c.value and "at layer 1" in c.value for c in at.caption)
    assert at.query_params["corpus_grid"] in ("true", ["true"], "True", ["True"], "1", ["1"])


def test_a_point_clicked_in_a_panel_finds_itself_first_at_that_panels_layer(indexes):
    from app import corpus_access
    from app.pages.corpus import GRID_POINTS

    folder = str(catalog.index_dirs()[0] / "tiny")
    vec, sids, pos = corpus_access.corpus_layer_occurrences(folder, "bank", GRID_POINTS)
    for panel, layer in enumerate((0, 1, 2)):
        hits = corpus_access.corpus_grid_neighbours_of(folder, "bank", GRID_POINTS, 3, panel, 5)
        assert (hits[0].sentence_id, hits[0].position) == (sids[3], pos[3])
        assert hits[0].cosine > 0.999 and hits[0].layer == layer
    with pytest.raises(Exception, match="not on the map"):
        corpus_access.corpus_grid_neighbours_of(folder, "bank", GRID_POINTS, 0, 3, 5)


def test_with_an_index_the_page_builds_brown_for_another_model_at_the_layers_chosen(
        indexes, monkeypatch):
    """Brown for any installed model, not only the suggested one, and at the layers picked:
    the build lands in its own folder and the index list offers it."""
    from engine.corpus import sources

    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(40, seed=13))))
    at = _corpus_page(corpus_word="bank")
    assert not any(s.key == "corpus_build_model" for s in at.selectbox)   # until asked
    at.toggle(key="corpus_build_more").set_value(True).run()
    models = at.selectbox(key="corpus_build_model").options
    assert models[0] == catalog.BROWN_INDEX_MODEL and "elmo-brown" in models
    at.selectbox(key="corpus_build_model").set_value("elmo-brown").run()
    layers = at.multiselect(key="corpus_build_layers-elmo-brown")
    assert layers.value == [0, 1, 2]                       # every layer of a 3-layer model
    layers.set_value([0, 2]).run()
    no_failures(at)
    assert any("2 of 3 layers" in c.value and "GiB on disk" in c.value for c in at.caption)
    at.button(key="corpus_build").click().run()
    no_failures(at)
    folder = catalog.brown_index_path("elmo-brown", [0, 2], 3)
    built = corpus_manifest.Manifest.read(folder)
    assert built.complete and built.model == "elmo-brown" and built.layers == [0, 2]
    chosen = next(s for s in at.selectbox if s.label == "Index")
    assert len(chosen.options) == 2 and chosen.value == str(folder)    # opened at once
    # the layers it holds, not the range they span (it read "layers 0–2")
    assert sorted(o.split(" sentences, ")[1] for o in chosen.options) == ["layers 0, 2",
                                                                          "layers 0–2"]
    assert "elmo-brown" in figure(at, "'bank' in ")["layout"]["title"]["text"]
    # the same choice again is not built twice
    at.toggle(key="corpus_build_more").set_value(True).run()
    at.selectbox(key="corpus_build_model").set_value("elmo-brown").run()
    at.multiselect(key="corpus_build_layers-elmo-brown").set_value([0, 2]).run()
    assert any("Already built" in c.value for c in at.caption)
    assert not any(b.key == "corpus_build" for b in at.button)


def test_a_deep_models_build_offers_seven_layers_and_says_how_big_it_gets(indexes,
                                                                          monkeypatch):
    import shutil

    # 5 GiB free: less than smollm2-135m's seven layers need (9.5 GiB), more than three (4.1)
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=5 * 2**30))
    at = _corpus_page(corpus_word="bank")
    at.toggle(key="corpus_build_more").set_value(True).run()
    at.selectbox(key="corpus_build_model").set_value("smollm2-135m").run()
    no_failures(at)
    assert at.multiselect(key="corpus_build_layers-smollm2-135m").value == \
        [0, 5, 10, 15, 20, 25, 30]
    size = next(c.value for c in at.caption if "7 of 31 layers" in c.value)
    # 1,156,281 occurrences x 7 layers x (576 x 2 + 72 + 37) bytes
    assert "about 9.5 GiB" in size
    assert any("5.0 GiB free, less than the index needs" in w.value for w in at.warning)
    at.multiselect(key="corpus_build_layers-smollm2-135m").set_value([0, 15, 30]).run()
    assert any("3 of 31 layers" in c.value and "about 4.1 GiB" in c.value for c in at.caption)
    assert not any("less than the index needs" in w.value for w in at.warning)


class _Bar:
    def __init__(self):
        self.shown = []

    def progress(self, value, text=""):
        self.shown.append((value, text))


def test_the_build_bar_times_this_run_only_and_says_when_the_indexes_are_built():
    """A resumed build (1,000 of 10,000 sentences already in) is timed from its own start, so
    its rate is this run's: 2,000 sentences in 100 s -> 20 a second, 7,000 left -> 6 min."""
    from app import ui

    bar, now = _Bar(), iter([0.0, 100.0, 200.0])
    update = ui.build_progress(bar, "Embedding Brown with m", clock=lambda: next(now))
    update(1000, 10_000)
    assert bar.shown[-1] == (0.1, "Embedding Brown with m: 1,000 of 10,000 sentences")
    update(3000, 10_000)
    assert bar.shown[-1][1].endswith("3,000 of 10,000 sentences, 20 a second, about 6 min left")
    update(10_000, 10_000)
    assert bar.shown[-1][0] == 1.0 and "building the search indexes" in bar.shown[-1][1]
    assert ui.duration(20) == "under a minute" and ui.duration(3 * 3600 + 5 * 60) == "3 h 05 min"


def _stopped_elmo_build(monkeypatch):
    """elmo-brown's layers 0 and 2 of a 40-sentence stand-in for Brown, stopped after its first
    16-sentence commit (as Streamlit stops a page build at the bar's next update), and the
    page's build form opened on that same choice. Returns (the page, the folder)."""
    from engine.corpus import sources

    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(40, seed=13))))
    folder = catalog.brown_index_path("elmo-brown", [0, 2], 3)

    class Left(Exception):
        pass

    def leave(done, total):
        if done:
            raise Left

    with pytest.raises(Left):
        corpus_index.build("elmo-brown", "brown", folder, layers=[0, 2], progress=False,
                           commit_sentences=16, on_progress=leave)
    assert not corpus_manifest.Manifest.read(folder).complete
    at = _corpus_page(corpus_word="bank")
    at.toggle(key="corpus_build_more").set_value(True).run()
    at.selectbox(key="corpus_build_model").set_value("elmo-brown").run()
    at.multiselect(key="corpus_build_layers-elmo-brown").set_value([0, 2]).run()
    return at, folder


def test_a_build_stopped_part_way_is_offered_as_continue_and_ends_complete(indexes,
                                                                          monkeypatch):
    """A page build stops when the user leaves or changes a setting: the page then offers to
    continue it, and continuing completes the same index without building it again from the
    start."""
    at, folder = _stopped_elmo_build(monkeypatch)
    assert any("stopped before the end: this continues it" in c.value for c in at.caption)
    button = at.button(key="corpus_build")
    assert button.label == "Continue the Brown index for elmo-brown"
    button.click().run()
    no_failures(at)
    built = corpus_manifest.Manifest.read(folder)
    assert built.complete and built.rows == 2 * sum(len(split_words(s).words)
                                                    for s in _corpus(40, seed=13))
    assert built.build["runs"][-1]["sentences_indexed_before"] == 16


def test_what_a_stopped_build_wrote_can_be_deleted_from_the_page(indexes, monkeypatch):
    """A stopped build is not in the Index list (it is not complete), so the form is the one
    place that can remove what it wrote (gigabytes for a deep model)."""
    at, folder = _stopped_elmo_build(monkeypatch)
    at.button(key="corpus_delete_partial").click().run()
    no_failures(at)
    assert not folder.exists() and not list(folder.parent.glob(".*deleting*"))
    assert at.button(key="corpus_build").label == "Build the Brown index for elmo-brown"


def test_the_apps_own_index_can_be_deleted_and_a_users_index_cannot(indexes, monkeypatch):
    """Delete: only for an index the page built (the app's folder), never one of the user's
    CTXLENS_INDEX_DIRS; the page then opens the index that is left."""
    from engine.corpus import sources

    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(40, seed=13))))
    at = _corpus_page(corpus_word="bank")
    assert not any(b.key == "corpus_delete" for b in at.button)      # the user's own index
    at.toggle(key="corpus_build_more").set_value(True).run()
    at.selectbox(key="corpus_build_model").set_value("elmo-brown").run()
    at.button(key="corpus_build").click().run()
    folder = catalog.brown_index_path("elmo-brown")
    assert next(s for s in at.selectbox if s.label == "Index").value == str(folder)
    at.button(key="corpus_delete").click().run()
    no_failures(at)
    assert not folder.exists()
    chosen = next(s for s in at.selectbox if s.label == "Index")
    assert len(chosen.options) == 1 and chosen.value.endswith("tiny")   # the index left
    assert "'bank' in " in figure(at, "'bank' in ")["layout"]["title"]["text"]
    # built again in the same folder from other text, the page reads the new build (the
    # opened index and the results read from it were kept by folder)
    other = _corpus(30, seed=14)
    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(other)))
    at.toggle(key="corpus_build_more").set_value(True).run()
    at.selectbox(key="corpus_build_model").set_value("elmo-brown").run()
    at.button(key="corpus_build").click().run()
    no_failures(at)
    n = sum(w.lower() == "bank" for s in other for w in split_words(s).words)
    title = figure(at, "'bank' in ")["layout"]["title"]["text"]
    assert "elmo-brown" in title and f"{n:,} of {n:,} occurrences" in title


def test_opening_another_index_starts_at_its_top_layer(indexes, tiny_engine, tmp_path):
    """From layer 2 of one index to another that holds layers 0 and 1 only: the page landed
    on the first (for ELMo the char CNN, where every occurrence is one vector)."""
    src = tmp_path / "c2.txt"
    src.write_text("\n".join(indexes[:30]))
    corpus_index.build(tiny_engine.bert, str(src), tmp_path / "indexes" / "two", layers="0,1",
                       progress=False)
    at = _corpus_page(corpus_word="bank", corpus_layer="2",
                      corpus_index=str(tmp_path / "indexes" / "tiny"))
    at.selectbox(key="corpus_index").set_value(str(tmp_path / "indexes" / "two")).run()
    no_failures(at)
    assert at.select_slider(key="corpus_layer").value == 1


def test_a_read_only_server_offers_no_build_or_delete_and_compute_refuses(indexes,
                                                                          monkeypatch):
    """Issue 47, item 7: with CTXLENS_READ_ONLY=1 (a shared server) the page has no build,
    continue or delete button, says why in one line, and corpus_access refuses both changes even
    when asked directly (a hidden button is not a lock)."""
    from app import corpus_access
    from engine.corpus import sources
    from engine.errors import EngineError

    monkeypatch.setattr(sources, "brown", lambda build=True, progress=True: sources.Corpus(
        "brown", tuple(_corpus(40, seed=13))))
    folder = catalog.brown_index_path("elmo-brown")
    corpus_access.build_brown_index("elmo-brown", [0, 1], folder, lambda done, total: None)
    monkeypatch.setenv("CTXLENS_READ_ONLY", "1")
    at = _corpus_page(corpus_word="bank", corpus_index=str(folder))
    assert next(s for s in at.selectbox if s.label == "Index").value == str(folder)
    keys = {w.key for w in [*at.button, *at.toggle]}
    assert not keys & {"corpus_build", "corpus_build_more", "corpus_delete",
                       "corpus_delete_partial"}, keys
    assert any("CTXLENS_READ_ONLY" in c.value for c in at.caption)
    with pytest.raises(EngineError, match="CTXLENS_READ_ONLY"):
        corpus_access.remove_index(str(folder))
    with pytest.raises(EngineError, match="CTXLENS_READ_ONLY"):
        corpus_access.build_brown_index("elmo-brown", [0],
                                        catalog.brown_index_path("elmo-brown", [0]),
                                        lambda done, total: None)
    assert (folder / "manifest.json").is_file()
    assert not catalog.brown_index_path("elmo-brown", [0]).exists()


def test_a_read_only_server_without_an_index_says_how_to_build_one(tiny_engine, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "none"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    monkeypatch.setenv("CTXLENS_READ_ONLY", "1")
    at = page("corpus").run()
    no_failures(at)
    assert any("No corpus index yet" in i.value and "make index" in i.value for i in at.info)
    assert not any(b.label.startswith("Build the Brown index") for b in at.button)
