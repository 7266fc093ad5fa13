"""The whole app through st.navigation: pages, shared sidebar, state in the URL, one-line errors."""
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.helpers import (ROOT, app, figures, messages, no_failures, set_sentences, title,
                               with_query)

pytestmark = pytest.mark.usefixtures("tiny_engine")


def test_every_page_renders_through_navigation_without_errors():
    at = app().run()
    no_failures(at)
    assert at.title[0].value == "Polysemy clusters"
    for name, heading in (("layers", "Compare layers"), ("elmo_weights", "ELMo layer weights"),
                          ("attention", "Attention"), ("predictions", "Predictions"),
                          ("generation", "Generation"), ("components", "What each part does")):
        at.switch_page(f"app/pages/{name}.py").run()
        no_failures(at)
        assert at.title[0].value == heading and figures(at)


def test_sidebar_inputs_survive_a_page_switch():
    at = app().run()
    set_sentences(at, ["A bat flew.", "He swung the bat.", "The bat slept."], "bat").run()
    at.switch_page("app/pages/attention.py").run()
    assert at.sidebar.text_input(key="target").value == "bat"
    assert at.query_params["target"] == ["bat"] or at.query_params["target"] == "bat"


def test_page_url_keys_belong_to_the_session_that_registered_them(tiny_engine):
    """Sessions are threads of one process: a page key one session registers must not appear
    in another's URL keys (the keys once lived in a module-level dict every session mutated)."""
    from app import state

    first = app().run()
    first.switch_page("app/pages/predictions.py").run()
    no_failures(first)
    assert "top_k" in first.session_state["_url_keys"]
    second = app().run()
    assert "top_k" not in second.session_state["_url_keys"]
    assert set(second.session_state["_url_keys"]) >= set(state.sidebar_keys())
    assert "top_k" not in state.sidebar_keys()
    with pytest.raises(TypeError):
        state.sidebar_keys()["top_k"] = int


def test_the_url_holds_the_state_and_reopens_it(tiny_engine):
    layer = f"layer_{tiny_engine.gpt}"
    at = app().run()
    set_sentences(at, ["A bat flew.", "He swung the bat.", "The bat slept."], "bat")
    at.sidebar.radio(key="pool").set_value("last")
    at.run()
    at.slider(key=layer).set_value(1).run()
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert params["target"] == "bat" and params["pool"] == "last"
    assert params[layer] == "1" and params["model_gpt"] == tiny_engine.gpt

    # only the URL: no default models, so the link itself must name them
    reopened = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
    for k, v in params.items():
        reopened.query_params[k] = v
    reopened.run()
    no_failures(reopened)
    assert reopened.sidebar.text_area(key="sentences").value.splitlines()[1] == "He swung the bat."
    assert reopened.sidebar.radio(key="pool").value == "last"
    assert reopened.slider(key=layer).value == 1
    assert reopened.sidebar.selectbox(key="model_gpt").value == tiny_engine.gpt


def test_a_too_long_sentence_is_one_line_not_a_traceback():
    at = app().run()
    set_sentences(at, ["word " * 200, "mouse here", "a mouse", "one mouse"], "mouse").run()
    no_failures(at)
    warnings = messages(at)["warning"]
    assert "Line 1 is left out: the text has 200 words; the cap is 128." in warnings


def test_one_pasted_paragraph_leaves_out_its_line_and_the_rest_still_plots(tiny_engine):
    at = app().run()
    set_sentences(at, ["A mouse ran.", "x" * 5000, "The mouse slept.", "My mouse clicked."],
                  "mouse").run()
    no_failures(at)
    assert "Line 2 is left out: the text has 5000 characters; the cap is 1000." in \
        messages(at)["warning"]
    assert any(title(f).endswith("'mouse' in 3 sentences") for f in figures(at))
    assert at.sidebar.text_area(key="sentences").value.splitlines()[1] == "x" * 5000


def test_typing_sentences_turns_the_preset_into_custom():
    at = app().run()
    assert at.sidebar.selectbox(key="preset").value == "mouse"
    set_sentences(at, ["A bat flew.", "He swung the bat.", "The bat slept."], "bat").run()
    assert at.sidebar.selectbox(key="preset").value == "(custom)"
    at.sidebar.selectbox(key="preset").set_value("crane").run()
    assert at.sidebar.text_input(key="target").value == "crane"
    assert at.session_state["labels"].split("|")[:2] == ["bird", "machine"]


def test_a_hand_edited_link_with_bad_values_falls_back_to_defaults(tiny_engine):
    layer = f"layer_{tiny_engine.gpt}"
    at = app()
    at.query_params["projection"] = "MDS"
    at.query_params[layer] = "banana"
    at.query_params["pool"] = "max"
    at.query_params["preset"] = "unicorn"
    at.run()
    no_failures(at)
    assert at.radio(key="projection").value == "PCA"
    # the layer the page opens on without the bad value (the top, or where the senses
    # separate best)
    assert at.slider(key=layer).value == app().run().slider(key=layer).value
    assert at.sidebar.radio(key="pool").value == "mean"
    assert at.sidebar.selectbox(key="preset").value == "mouse"      # the first-visit example


def test_a_linked_target_longer_than_the_box_allows_is_cut_to_its_cap():
    """The box takes 40 characters; a link's 100 got past it."""
    at = app()
    at.query_params["target"] = "x" * 100
    at.run()
    assert not at.exception
    assert at.sidebar.text_input(key="target").value == "x" * 40


def test_more_than_24_sentences_are_capped_with_a_warning():
    at = app().run()
    set_sentences(at, [f"The mouse number {i} ran." for i in range(30)], "mouse").run()
    no_failures(at)
    assert any("only the first 24 are used" in w for w in messages(at)["warning"])
    assert "in 24 sentences" in " ".join(
        f["layout"]["title"]["text"] for f in figures(at) if "title" in f["layout"])


def _manifest_script(layer_key: str):
    import streamlit as st

    from app import state

    state.url_key(layer_key, default=2)
    inputs = state.sidebar()
    st.json(state.current_settings())
    st.json(inputs.settings(model="a figure's model"))


def test_settings_manifest_lists_sentences_labels_models_and_layers(tiny_engine):
    import json

    layer = f"layer_{tiny_engine.gpt}"
    at = with_query(AppTest.from_function(_manifest_script, default_timeout=60, args=(layer,)))
    at.query_params[layer] = "1"
    at.run()
    no_failures(at)
    manifest = json.loads(at.json[0].value)
    assert manifest["widgets"][layer] == 1
    assert manifest["models"] == {"elmo": tiny_engine.elmo, "gpt": tiny_engine.gpt,
                                  "bert": tiny_engine.bert}
    assert manifest["sentences"][0] == "Your mouse likes cheese."
    assert manifest["labels"][:2] == ["animal", "device"] and manifest["pooling"] == "mean"
    assert manifest["manifest"] == "ctxlens-settings/1" and manifest["preset"] == "mouse"
    # a figure's manifest is the same schema: the session's fields, then the figure's own
    figure = json.loads(at.json[1].value)
    assert {k: v for k, v in figure.items() if k != "model"} == \
        {k: v for k, v in manifest.items() if k not in ("preset", "widgets")}


def test_a_link_keeps_other_pages_settings_until_they_are_visited(tiny_engine):
    link = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=120)
    link.query_params.update({**tiny_engine.query(), "top_k": "5", "pred_sentence": "2"})
    link.run()                                     # lands on the clusters page
    no_failures(link)
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in link.query_params.items()}
    assert params["top_k"] == "5" and params["pred_sentence"] == "2"
    link.switch_page("app/pages/predictions.py").run()
    no_failures(link)
    assert link.session_state["top_k"] == 5 and link.session_state["pred_sentence"] == 2


def _settings_files(monkeypatch) -> list[dict]:
    """Every "ctxlens-settings.json" the app hands to Streamlit's media storage, parsed."""
    import json

    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    seen: list[dict] = []
    original = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        if filename == "ctxlens-settings.json":
            seen.append(json.loads(path_or_data))
        return original(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    return seen


def test_the_settings_file_holds_the_page_opened_for_the_first_time(monkeypatch):
    """It was built before the page registered its widgets: "widgets": {} on a first visit."""
    seen = _settings_files(monkeypatch)
    at = app().run()
    at.switch_page("app/pages/grid.py").run()
    no_failures(at)
    widgets = seen[-1]["widgets"]
    assert widgets["grid_3d"] is False and widgets["grid_every"] == 0
    assert {k for k in widgets if k.startswith("grid_")} == \
        {k for k in at.query_params if k.startswith("grid_")}


def test_a_layer_chosen_on_one_page_stays_in_the_link_after_leaving_it(tiny_engine,
                                                                       monkeypatch):
    """Streamlit drops a page widget's value when the user leaves its page, and the link lost
    the clusters page's layer and projection."""
    seen = _settings_files(monkeypatch)
    layer = f"layer_{tiny_engine.gpt}"
    at = app().run()
    at.slider(key=layer).set_value(1).run()
    at.switch_page("app/pages/attention.py").run()
    no_failures(at)
    params = {k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()}
    assert params[layer] == "1" and "projection" in params
    assert seen[-1]["widgets"][layer] == 1


def test_the_benchmarks_page_has_the_settings_file_too(monkeypatch):
    """It does not use ui.run_page, which draws the file: its sidebar had an empty slot."""
    seen = _settings_files(monkeypatch)
    at = app().run()
    at.switch_page("app/pages/benchmarks.py").run()
    assert not at.exception
    assert "Settings (JSON)" in [b.label for b in at.sidebar.get("download_button")]
    assert seen and seen[-1]["manifest"] == "ctxlens-settings/1"


def test_the_terms_a_teacher_stumbled_on_have_help():
    """Projection, the anisotropy baseline, the mix's s and γ and "top k" had no "?"; the sense
    separation charts named silhouette and nearest-centroid without a word on either."""
    at = app().run()
    no_failures(at)
    assert at.radio(key="projection").help
    assert any("Silhouette:" in c.value and "Nearest-centroid:" in c.value for c in at.caption)
    at.switch_page("app/pages/layers.py").run()
    assert at.toggle(key="adjusted").help
    at.switch_page("app/pages/elmo_weights.py").run()
    assert at.slider(key="mix_gamma").help and all(s.help for s in at.slider
                                                    if s.label.startswith("s for "))
    at.switch_page("app/pages/predictions.py").run()
    assert at.slider(key="top_k").help
