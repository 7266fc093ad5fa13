"""One key and one owner for each result the app keeps (issue 53, part 3): a projection is
stored once, deleting one corpus index drops that index's results and no other's, an opened
index is a resource shared by every session, and the app asks the Engine through its public
methods."""
from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from app import corpus_access, engine_access, explain_access, results
from engine.cache import nbytes
from engine.corpus import catalog
from engine.corpus import index as corpus_index
from tests.engine.corpus.test_index import _corpus

ROOT = Path(__file__).resolve().parents[2]
SENTENCES = ("The bank is open.", "A river bank.", "The bank closed.", "Bank day.")


def test_a_projection_computed_once_is_stored_once(tiny_engine):
    """Its bytes count once against the cache's bound: the app's key is its only key (it was
    kept a second time by Engine.project, under the vectors' hash)."""
    eng = engine_access.get_engine()
    args = (tiny_engine.bert, SENTENCES, "bank", "mean")
    results.target_vectors(*args)
    results.occurrences(*args, "target")
    for project in (lambda: results.project(*args, "pca"),
                    lambda: results.grid_projection(*args, "target", "pca")):
        entries, held = len(eng.results), eng.results.nbytes
        proj = project()
        assert len(eng.results) == entries + 1
        assert eng.results.nbytes - held == nbytes(proj)
        assert project() is proj


def test_an_attribution_and_a_generation_are_stored_once(tiny_engine):
    """The Engine keeps both itself: the door kept the same object a second time under its own
    key, so each counted twice against the cache's bound."""
    eng = engine_access.get_engine()
    for ask in (lambda: explain_access.attribute(tiny_engine.bert_mlm, "Your [MASK] likes cheese.",
                                                 "mouse"),
                lambda: explain_access.generate(tiny_engine.gpt, "The cat", 4)):
        entries, held = len(eng.results), eng.results.nbytes
        result = ask()
        assert len(eng.results) == entries + 1
        assert eng.results.nbytes - held == nbytes(result)
        assert ask() is result


def test_a_result_asked_for_with_a_default_written_out_or_left_out_is_one_entry(tiny_engine):
    """The door binds the arguments to the function's signature, defaults filled in, before
    it keys them: the clusters page asked for a separation without `unlabelled` and its chart
    with it, and each call kept its own copy (one per model and page visit)."""
    eng = engine_access.get_engine()
    args = (tiny_engine.bert, SENTENCES, "bank", "mean")
    labels = ("money", "river", "money", "day")
    occ = results.occurrences(*args)
    sep = results.separation(*args, labels)
    entries = len(eng.results)
    assert results.occurrences(*args, "target") is occ
    assert results.occurrences(*args, scope="target") is occ
    assert results.occurrences(tiny_engine.bert, SENTENCES, "bank", pool="mean") is occ
    assert results.separation(*args, labels, "?") is sep
    assert results.separation(*args, labels=labels, unlabelled="?") is sep
    assert len(eng.results) == entries
    # a different value is a different result
    assert results.occurrences(*args, "all") is not occ
    assert len(eng.results) == entries + 1


def _app_keys(eng) -> list[tuple]:
    return [k for k in eng.results._items if k[0] == "app"]


def test_a_clusters_page_visit_keeps_each_result_once(tiny_engine):
    """One visit of the preset (three models, two senses labelled): each model's separation
    is kept once, though the opening view and the chart ask for it in two spellings (six
    entries for three results before the door bound defaults)."""
    from tests.app.helpers import no_failures, page

    eng = engine_access.get_engine()
    no_failures(page("clusters").run())
    names = [k[1] for k in _app_keys(eng)]
    models = {tiny_engine.elmo, tiny_engine.gpt, tiny_engine.bert}
    assert names.count("separation") == len(models)
    assert names.count("target_vectors") == len(models)
    assert names.count("occurrences") == len(models)


def test_a_rollout_reads_its_encoding_from_the_encoding_cache(tiny_engine):
    """Engine.rollout encodes through the result cache (the door ran the adapter itself, so
    the same text's maps were computed again at every new key and never shared)."""
    from engine.attribution.rollout import rollout_scores
    from engine.text import to_word_text

    eng = engine_access.get_engine()
    # a text no earlier test encoded: the encoding store on disk is the session's
    text = f"Your [MASK] likes cheese {uuid.uuid4().hex[:8]}."
    assert not eng.has_encodings(tiny_engine.bert_mlm, [text])
    roll = explain_access.rollout_words(tiny_engine.bert_mlm, text, "masked")
    assert eng.has_encodings(tiny_engine.bert_mlm, [text])
    enc = engine_access.encodings(tiny_engine.bert_mlm, (text,), attentions=True)[0]
    assert enc.attentions is not None
    direct = rollout_scores(eng.adapter(tiny_engine.bert_mlm), to_word_text(text), "masked")
    assert roll.words == direct.words and roll.position == direct.position
    assert (roll.piece_scores == direct.piece_scores).all()


def test_no_app_module_asks_the_engine_for_a_models_adapter():
    """What a page shows comes from the Engine's methods (rollout, generation_attention, ...),
    which keep their results and check what a model can do; an adapter in the app is a model
    run outside both."""
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "adapter"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


@pytest.fixture
def two_indexes(tiny_engine, tmp_path, monkeypatch):
    """Two indexes of the app's own (under its folder), a and b."""
    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "none"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(30, seed=3)))
    folders = []
    for name in ("a", "b"):
        folder = tmp_path / "default" / name
        corpus_index.build(tiny_engine.bert, str(src), folder, layers="0,1", progress=False)
        folders.append(str(folder.resolve()))
    return folders


def test_deleting_one_index_keeps_every_other_indexs_results(two_indexes, tiny_engine):
    """The Engine's cache is every session's: a delete drops the deleted index's results only
    (it used to clear the whole cache, every session's encodings and analyses with it)."""
    a, b = two_indexes
    eng = engine_access.get_engine()
    for folder in (a, b):
        corpus_access.corpus_occurrences(folder, "bank", 1, 50)
    occ = results.occurrences(tiny_engine.bert, SENTENCES, "bank", "mean", "target")

    def kept(folder: str) -> bool:
        return eng.has_result((corpus_access.INDEX_RESULT, "corpus_occurrences", folder,
                               "bank", 1, 50))

    assert kept(a) and kept(b)
    corpus_access.remove_index(a)
    assert not kept(a) and kept(b)
    assert results.occurrences(tiny_engine.bert, SENTENCES, "bank", "mean", "target") is occ
    # the index left still reads from the same opened index
    assert corpus_access.corpus_manifest(b).layers == [0, 1]


def test_an_opened_index_is_one_resource_per_folder_and_build(two_indexes):
    """Opened once for every session and rerun (st.cache_resource); a folder built again is
    opened again, not read through the old build's mapped files."""
    a, _ = two_indexes
    first = corpus_access._index(a)
    assert corpus_access._index(a) is first
    assert corpus_access._index(str(Path(a) / ".." / "a")) is first   # one spelling per folder


def test_the_app_reads_no_engine_internals():
    """The app asks the Engine through its methods (has_result, cached, forget, ...), never
    its result cache, encoding store or loaded models; the app's tests may."""
    internals = {"results", "store", "_adapters", "_resolved", "_identities"}
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in internals:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert found == []


def test_each_streamlit_cache_has_one_owner():
    """st.cache_resource holds the Engine and the opened indexes; st.cache_data only what the
    Engine does not know (the model catalogue, a hub's listing of a download). Every result
    is the Engine's (engine_cached), so no page or view caches one of its own."""
    owners = {}
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    call = d.func if isinstance(d, ast.Call) else d
                    if isinstance(call, ast.Attribute) and call.attr.startswith("cache_"):
                        owners[node.name] = (path.relative_to(ROOT).as_posix(), call.attr)
    assert owners == {
        "get_engine": ("app/engine_access.py", "cache_resource"),
        "_catalogue": ("app/engine_access.py", "cache_data"),
        "_listing": ("app/engine_access.py", "cache_data"),
        "_opened": ("app/corpus_access.py", "cache_resource"),
    }
