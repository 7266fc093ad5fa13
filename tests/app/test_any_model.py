"""Any model in the app: a link or a typed id naming a hub model in the local Hugging Face cache
opens it in its family's box; one that cannot be used is said once, under its box, and no other
model is swapped in."""
import pytest

from tests.app.helpers import app, figures, messages, no_failures, title
from tests.zoo import into_hub_cache
from tests.engine.test_hub_download import hub  # noqa: F401 - the local hub fixture

pytestmark = pytest.mark.usefixtures("tiny_engine")


@pytest.fixture
def hub_llama(zoo, tmp_path, monkeypatch):
    cache = tmp_path / "hf-hub"
    into_hub_cache(zoo.path("arch:llama"), cache, "someone/tiny-llama")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from app import engine_access

    engine_access._catalogue.clear()
    yield "someone/tiny-llama"
    engine_access._catalogue.clear()


def test_a_link_naming_a_cached_hub_model_opens_it(hub_llama):
    at = app()
    at.query_params["model_gpt"] = hub_llama
    at.run()
    no_failures(at)
    assert at.sidebar.selectbox(key="model_gpt").value == hub_llama
    assert hub_llama in at.sidebar.selectbox(key="model_gpt").options
    assert any(hub_llama in str(f["layout"].get("title", "")) for f in figures(at))


@pytest.mark.parametrize("asked, reason", [
    ("nobody/not-cached", "needs a download"),
    ("a b c", "not a Hugging Face hub id"),
])
def test_a_model_that_cannot_be_used_is_said_once_and_not_swapped(asked, reason, hub_llama,
                                                                  tiny_engine, monkeypatch):
    from engine.api import Engine

    loaded = []
    real = Engine.adapter
    monkeypatch.setattr(Engine, "adapter", lambda self, model_id, *a, **k:
                        loaded.append(model_id) or real(self, model_id, *a, **k))
    at = app()
    at.query_params["model_gpt"] = asked
    at.run()
    assert not at.exception
    box = at.sidebar.selectbox(key="model_gpt")
    assert box.value == asked                       # what was asked stays in the box
    said = [e for e in messages(at)["error"] if reason in e]
    assert len(said) == 1 and "GPT model" in said[0]
    # no GPT stands in for it (the tiny one the other boxes came with, the cached Llama, a
    # bundled one): only the other two boxes' models are drawn, and none but those is loaded
    # (the engine outlives a test, so a model loaded before is not loaded again)
    assert set(loaded) <= {tiny_engine.elmo, tiny_engine.bert}
    drawn = {t.split(": '")[0] for t in map(title, figures(at)) if ": 'mouse' in " in t}
    assert drawn == {tiny_engine.elmo, tiny_engine.bert}


def test_a_model_of_another_family_is_pointed_to_its_box(hub_llama):
    at = app()
    at.query_params["model_bert"] = hub_llama
    at.run()
    assert any("pick it in the GPT model box" in e for e in messages(at)["error"])


def test_the_neuron_view_of_a_hub_model(hub_llama):
    """Done when: a link /attention?model_gpt=org/name opens the neuron view of a model that is
    only in the (offline) Hugging Face cache."""
    at = app()
    at.query_params["model_gpt"] = hub_llama
    at.switch_page("app/pages/attention.py").run()
    no_failures(at)
    assert any(f["layout"].get("title", {}).get("text", "").endswith("neuron view")
               for f in figures(at) if isinstance(f["layout"].get("title"), dict))


def test_loading_a_model_in_the_app_prints_no_library_bars(tiny_engine, capfd):
    """The server's terminal carried transformers' 'Loading weights' bar for each model at
    every start; the page shows its own progress instead."""
    from app import engine_access

    engine = engine_access.get_engine()
    engine._adapters.pop(tiny_engine.gpt, None)
    capfd.readouterr()
    engine.adapter(tiny_engine.gpt)
    assert "Loading weights" not in capfd.readouterr().err


def test_a_hub_model_not_yet_here_shows_its_size_and_downloads_on_a_click(hub):
    """Online (a local stand-in for the hub): the box says the model needs a download, the
    button names its files and size before anything is fetched, a click fetches it with a
    progress bar, and the model is shown."""
    from tests.fake_hub import FakeHub

    at = app()
    at.query_params["model_gpt"] = "org/tiny-neox"
    at.run()
    assert any("needs a download" in e for e in messages(at)["error"])
    button = next(b for b in at.sidebar.button if b.key == "download_gpt")
    total = sum(f.stat().st_size for f in hub.iterdir()
                if f.suffix in (".json", ".safetensors", ".txt", ".model")) / 2**20
    assert f"files, {total:,.1f} MB; about " in button.label     # and the memory it takes
    assert "model.safetensors" not in FakeHub.fetched
    button.click().run()
    assert "model.safetensors" in FakeHub.fetched and "pytorch_model.bin" not in FakeHub.fetched
    no_failures(at)
    assert any("org/tiny-neox" in str(f["layout"].get("title", "")) for f in figures(at))


def test_the_neuron_view_of_deberta_says_why_not_before_anything_runs(zoo, tmp_path,
                                                                      monkeypatch):
    """DeBERTa's attention scores carry relative-position terms: its config says so, so the
    Neuron view tab gives the reason instead of running the model's attention to find out."""
    from app import engine_access
    from engine.api import Engine

    cache = tmp_path / "hf-hub"
    into_hub_cache(zoo.path("arch:deberta-v2"), cache, "someone/tiny-deberta")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real, asked = Engine.query_key, []
    monkeypatch.setattr(Engine, "query_key",
                        lambda self, model_id, *a: asked.append(model_id) or
                        real(self, model_id, *a))
    engine_access._catalogue.clear()
    try:
        at = app()
        at.query_params.update({"model_bert": "someone/tiny-deberta",
                                "att_model": "someone/tiny-deberta"})
        at.switch_page("app/pages/attention.py").run()
    finally:
        engine_access._catalogue.clear()
    no_failures(at)
    said = [i for i in messages(at)["info"] if i.startswith("No neuron view for this model")]
    assert len(said) == 1 and "relative-position" in said[0]
    assert "someone/tiny-deberta" not in asked
