"""The sidebar's reading of the typed sentences (app/state.py)."""
from __future__ import annotations

from types import SimpleNamespace

from tests.app import helpers


def test_a_typed_line_ends_at_a_newline_only(monkeypatch):
    """str.splitlines() cut a pasted line at U+2028, U+2029, U+0085, VT and FF."""
    from app import state

    typed = "The mouse\u2028ran .\r\nA mouse\x0cslept .\n\nThe mouse\u0085left ."
    monkeypatch.setattr(state, "st", SimpleNamespace(session_state={"sentences": typed}))
    assert state.sentence_lines() == ("The mouse\u2028ran .", "A mouse slept .",
                                      "The mouse left .")


def test_a_script_written_without_spaces_gets_a_note_in_the_sidebar(tiny_engine):
    at = helpers.app()
    at.query_params.update(sentences="ภาษาไทย ง่าย .\nThe mouse ran .", target="mouse")
    at.run()
    notes = [c.value for c in at.sidebar.caption if "without spaces" in c.value]
    assert notes == ["Thai is written without spaces: ctxlens takes each run of it between "
                     "spaces or punctuation as one word; put spaces between words to choose the "
                     "split yourself."]
