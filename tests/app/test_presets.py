"""Presets and what the user typed (Issue 47, item 6): picking a preset keeps the typed
sentences, target and labels aside, and "(custom)" brings them back."""
from streamlit.testing.v1 import AppTest

from app import state
from tests.app.helpers import no_failures

TYPED = ["My own first line about a crane.", "A crane lifted the beam."]


def _sidebar_script():
    from app import state

    state.sidebar()


def _sidebar() -> AppTest:
    at = AppTest.from_function(_sidebar_script, default_timeout=60)
    at.run()
    no_failures(at)
    return at


def test_custom_brings_back_the_typed_sentences_target_and_labels_after_a_preset():
    at = _sidebar()
    at.sidebar.text_area(key="sentences").set_value("\n".join(TYPED)).run()
    at.sidebar.text_input(key="target").set_value("crane").run()
    state_labels = "bird|machine"
    at.session_state["labels"] = state_labels
    at.session_state["_labels_for"] = tuple(TYPED)
    assert at.sidebar.selectbox(key="preset").value == state.CUSTOM
    at.sidebar.selectbox(key="preset").set_value("bank").run()
    assert at.sidebar.text_area(key="sentences").value == "\n".join(
        state.presets()["bank"].sentences)
    at.sidebar.selectbox(key="preset").set_value("mouse").run()     # a second preset
    at.sidebar.selectbox(key="preset").set_value(state.CUSTOM).run()
    no_failures(at)
    assert at.sidebar.text_area(key="sentences").value == "\n".join(TYPED)
    assert at.sidebar.text_input(key="target").value == "crane"
    assert at.session_state["labels"] == state_labels


def test_custom_after_an_edited_preset_brings_back_the_edit():
    at = _sidebar()                                   # a first visit opens the mouse preset
    edited = at.sidebar.text_area(key="sentences").value + "\nA mouse in the house."
    at.sidebar.text_area(key="sentences").set_value(edited).run()
    at.sidebar.selectbox(key="preset").set_value("bank").run()
    at.sidebar.selectbox(key="preset").set_value(state.CUSTOM).run()
    assert at.sidebar.text_area(key="sentences").value == edited
    assert at.sidebar.text_input(key="target").value == "mouse"
