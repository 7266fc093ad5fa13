"""The page guard's parts (app/ui.py): a failing part of a page is one line in its place, and
what follows it still draws."""
from streamlit.testing.v1 import AppTest


def _guarded_parts():
    import streamlit as st

    from app import ui

    with ui.guarded():
        raise RuntimeError("the first tab\nfails")
    with ui.guarded(note="No predictions"):
        raise ValueError("no head")
    result, failed = ui.attempt(int, "x")
    st.write(f"after: {result} / {failed}")


def test_each_guarded_part_fails_as_one_line_and_the_rest_still_draws():
    at = AppTest.from_function(_guarded_parts).run()
    assert not at.exception
    assert [e.value for e in at.error] == ["Something went wrong (RuntimeError): the first tab"]
    assert [c.value for c in at.caption] == ["No predictions: no head"]
    assert at.markdown[-1].value.startswith("after: None / invalid literal for int")
