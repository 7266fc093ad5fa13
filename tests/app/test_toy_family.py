"""A family registered at test time goes through every page with no edit in app/: the sidebar
offers it, views that need only hidden states show it, and views that need a capability it
lacks (attention, predictions, a scalar mix) leave it out or say why, without an error."""
from __future__ import annotations

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from engine import families
from engine.registry import ModelEntry, load_registry
from tests import toy_family
from tests.app.helpers import ROOT, figures, messages, no_failures

PAGES = ("clusters", "layers", "grid", "attention", "predictions", "generation", "components",
         "elmo_weights", "corpus")


@pytest.fixture
def toy_registered(monkeypatch, tmp_path):
    from engine.corpus import catalog

    monkeypatch.setenv("CTXLENS_INDEX_DIRS", str(tmp_path / "indexes"))
    monkeypatch.setattr(catalog, "DEFAULT_DIR", tmp_path / "default")
    entry = ModelEntry(id="toy-1", family="toy", name="Toy model", licence="-", size="0",
                       bundled=True, package="tests", path="toy_family.py")
    registry = {**load_registry(), "toy-1": entry}
    monkeypatch.setattr("engine.api.load_registry", lambda: dict(registry))
    families.register(toy_family.FAMILY)
    st.cache_resource.clear()
    yield
    families.unregister("toy")
    st.cache_resource.clear()


def open_page(name: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
    at.query_params.update({"model_toy": "toy-1", "model_elmo": "(none)",
                            "model_gpt": "(none)", "model_bert": "(none)"})
    at.run()
    if name != "clusters":
        at.switch_page(f"app/pages/{name}.py").run()
    return at


@pytest.mark.parametrize("page", PAGES)
def test_a_new_family_renders_on_every_page_without_app_edits(toy_registered, page):
    at = open_page(page)
    no_failures(at)
    assert at.sidebar.selectbox(key="model_toy").value == "toy-1"
    shown = " ".join(str(v) for kind in messages(at).values() for v in kind)
    titles = [str(f.get("layout", {}).get("title", {}).get("text", "")) for f in figures(at)]
    if page == "clusters":
        assert titles[0].startswith("toy-1: 'mouse' in")
    if page == "layers":
        assert "toy-1" in titles
    if page == "predictions":      # the toy family predicts nothing: no column, no complaint
        assert "Toy" not in shown and "toy-1" not in " ".join(titles)
    if page == "attention":
        # the id as the page writes it: escaped, so a model id is never read as markdown
        assert r"toy\-1 (Toy) has no attention maps" in shown
    if page == "generation":       # the toy family writes nothing: not offered, no complaint
        assert "toy-1" not in at.selectbox(key="gen_model").options and "Toy" not in shown
    if page == "components":       # the toy family has no heads to open up: not offered
        assert "toy-1" not in at.selectbox(key="parts_model").options and "Toy" not in shown
    if page == "elmo_weights":
        assert "Choose an ELMo model" in shown     # no toy model can mix layers
    if page == "grid":
        assert any(t.startswith("toy-1: 'mouse', 8 points") for t in titles)
    if page == "corpus":           # no index here: the page offers to build one, naming no family
        assert "No corpus index yet" in shown


def test_the_toy_family_is_in_the_url_and_the_manifest(toy_registered):
    at = open_page("clusters")
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert params["model_toy"] == "toy-1"
