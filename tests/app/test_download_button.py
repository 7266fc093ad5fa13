"""The model box's Download button (issue 52, item 4), against a local stand-in for the hub that
records every request: the button's label gives the download's size and the memory its model
takes; a download refused before its first byte (too big for the memory) is one line and no
button; and a read-only server (CTXLENS_READ_ONLY=1) fetches nothing a visitor typed: no
button, no config read from the hub, one line saying the model is not available here."""
import pytest

from tests.app.helpers import app, messages
from tests.engine.test_download_checks import (GB, room, sized_hub,  # noqa: F401 - fixtures
                                               tiny_repo, weights_fetched)

pytestmark = pytest.mark.usefixtures("tiny_engine")


def opened_with(asked: str):
    at = app()
    at.query_params["model_gpt"] = asked
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def errors(at, containing: str) -> list[str]:
    """The error lines saying `containing`, as read (the box escapes markdown)."""
    return [e for e in (m.replace("\\", "") for m in messages(at)["error"]) if containing in e]


def download_buttons(at) -> list:
    return [b for b in at.sidebar.button if b.key == "download_gpt"]


def test_the_button_gives_the_size_and_the_memory(sized_hub, monkeypatch):
    room(monkeypatch)
    at = opened_with("org/tiny")
    (button,) = download_buttons(at)
    assert "files, 0.2 MB" in button.label and "of memory in float32" in button.label
    assert weights_fetched(sized_hub) == []


def test_a_model_too_big_for_memory_has_no_button_and_says_why(sized_hub, monkeypatch):
    room(monkeypatch, memory=16 * GB)
    at = opened_with("org/huge")
    said = errors(at, "12.80B parameters")
    assert len(said) == 1 and "use a smaller model" in said[0] and "\n" not in said[0]
    assert download_buttons(at) == []
    assert weights_fetched(sized_hub) == []


def test_a_read_only_server_fetches_nothing_a_visitor_typed(sized_hub, monkeypatch, tmp_path):
    """Typing an id fetched its config into the server's cache, and the button downloaded it."""
    monkeypatch.setenv("CTXLENS_READ_ONLY", "1")
    room(monkeypatch)
    at = opened_with("org/tiny")
    said = errors(at, "not available on this server")
    assert len(said) == 1 and "CTXLENS_READ_ONLY" in said[0]
    assert download_buttons(at) == []
    assert sized_hub.requests == []
    assert not (tmp_path / "hf-hub" / "models--org--tiny").exists()


def test_a_read_only_server_downloads_nothing_even_when_asked(sized_hub, monkeypatch):
    """Behind the button: the app's download itself refuses, so no page can start one."""
    from app import engine_access
    from engine.errors import EngineError

    monkeypatch.setenv("CTXLENS_READ_ONLY", "1")
    room(monkeypatch)
    assert engine_access.download_plan("org/tiny") is None
    with pytest.raises(EngineError, match="not available on this server"):
        engine_access.download("org/tiny", bar=None)
    assert sized_hub.requests == []


def test_a_repo_with_pickled_weights_only_says_so_online(sized_hub, monkeypatch, tmp_path):
    """The hub lists no safetensors for it: the box said "needs a download" with no reason
    and no button; the listing's own line is what it says now."""
    import shutil

    pickled = tmp_path / "pickled"
    shutil.copytree(sized_hub.repos["org/tiny"], pickled)
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    sized_hub.repos["org/pickled"] = pickled
    room(monkeypatch)
    at = opened_with("org/pickled")
    said = errors(at, "pickled")
    assert len(said) == 1 and "safetensors" in said[0], messages(at)["error"]
    assert download_buttons(at) == []
    assert weights_fetched(sized_hub) == []
