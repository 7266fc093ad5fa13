"""The online path for a hub id, against a local stand-in for the Hugging Face hub (HF_ENDPOINT):
the files and their sizes are listed before any is fetched, only safetensors and text files are
fetched, progress is shown, and the model then loads from the cache; a typo'd or gated repo is
one line. The real hub speaks the same few endpoints (model info, HEAD and GET of a file)."""
from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from engine import cli
from engine.api import Engine
from engine.errors import ModelUnavailable
from tests.fake_hub import FakeHub, serving

@pytest.fixture
def hub(zoo, tmp_path, monkeypatch):
    folder = zoo.copy("arch:gpt-neox", tmp_path / "repo")
    (folder / "pytorch_model.bin").write_bytes(b"never fetched")      # a pickle beside it
    with serving({"org/tiny-neox": folder, "org/gated": folder}, tmp_path, monkeypatch,
                 gated={"org/gated"}):
        yield folder


class Terminal(io.StringIO):
    """stderr as a user's terminal: the hub's download bars draw only on a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_hub_id_is_listed_then_downloaded_then_loads(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants as constants
    import numpy as np

    src = tmp_path / "in.txt"
    src.write_text("The bank raised its rates .\n")
    with monkeypatch.context() as mp:
        mp.setattr(sys, "stderr", Terminal())
        assert cli.main(["embed", "--model", "org/tiny-neox", "--input", str(src),
                         "--output", str(tmp_path / "v.npz")]) == 0
        err = sys.stderr.getvalue()
    listed = next(line for line in err.splitlines() if "downloading org/tiny-neox" in line)
    size = (hub / "model.safetensors").stat().st_size / 2**20
    assert f"model.safetensors {size:,.1f} MB" in listed and "files" in listed
    assert "pytorch_model.bin" not in FakeHub.fetched and "model.safetensors" in FakeHub.fetched
    # listed before any file but the config is fetched (the config says which family's box the
    # model goes in): the model info comes before every other file's GET
    gets = [path for m, path in FakeHub.requests if m == "GET"]
    info = next(i for i, path in enumerate(gets) if path.startswith("/api/models/org/tiny-neox"))
    assert all(path.endswith("/config.json") for path in gets[:info])
    # progress is shown: the weights' download draws a bar on the terminal, after the listing,
    # that reaches its end
    assert re.search(r"model\.safetensors: *100%", err[err.index(listed):]), err
    # once cached, the hub is never asked again: online, not a request of any kind (a HEAD
    # for a newer revision or a model-info call would be one) ...
    FakeHub.requests = []
    enc = Engine(device="cpu").encode("org/tiny-neox", ["The bank raised its rates ."])[0]
    assert FakeHub.requests == []
    # ... and offline with the hub gone, the model loads as well
    FakeHub.server.shutdown()
    FakeHub.server.server_close()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    offline = Engine(device="cpu").encode("org/tiny-neox", ["The bank raised its rates ."])[0]
    np.testing.assert_array_equal(offline.hidden_states, enc.hidden_states)
    # the vectors written are the model's: each word's vector is the mean of its tokens' states
    written = np.load(tmp_path / "v.npz")
    assert list(written["words"]) == list(enc.words)
    for w in range(len(enc.words)):
        mine = enc.hidden_states[:, enc.token_to_word == w].mean(axis=1)
        np.testing.assert_allclose(written["vectors"][w], mine, atol=1e-4)


@pytest.mark.parametrize("repo, message", [("org/no-such-model", "no model 'org/no-such-model'"),
                                           ("org/gated", "is gated")])
def test_a_typo_or_a_gated_repo_is_one_line(hub, repo, message):
    with pytest.raises(ModelUnavailable, match=message) as err:
        Engine(device="cpu").encode(repo, ["a b"])
    assert "\n" not in str(err.value)
