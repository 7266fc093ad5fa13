"""A model refused while it loads (issue 52, item 8): its one-line refusal is what the page
shows, with no "Loading and running X (first use takes a while) …" box left above it."""
from __future__ import annotations

import pytest

from app import engine_access
from engine.errors import ModelUnavailable
from tests.app.helpers import messages, page


def _labels(at) -> list[str]:
    """The labels of every status box (st.status) on the page, at any depth."""
    found, todo = [], list(at.main)
    while todo:
        node = todo.pop()
        if type(node).__name__ == "Status":
            found.append(node.proto.label)
        todo += list(getattr(node, "children", {}).values())
    return found


@pytest.mark.usefixtures("tiny_engine")
def test_a_refused_load_leaves_no_loading_box_above_its_refusal(tiny_engine, monkeypatch):
    eng = engine_access.get_engine()
    refusal = f"{tiny_engine.gpt}: cannot load the model: its weights are truncated"

    def refuse(model_id, *args, **kwargs):
        raise ModelUnavailable(refusal)

    # a first use (nothing loaded, nothing encoded) whose load is refused
    monkeypatch.setattr(eng, "is_loaded", lambda model_id: False)
    monkeypatch.setattr(eng, "has_encodings", lambda model_id, sentences: False)
    monkeypatch.setattr(eng, "encode", refuse)
    at = page("attention")
    at.query_params["model_bert"] = "(none)"
    at.query_params["model_elmo"] = "(none)"
    at.run()
    assert not at.exception
    assert any("its weights are truncated" in e for e in messages(at)["error"]), messages(at)
    assert not [label for label in _labels(at) if "Loading" in label], _labels(at)
