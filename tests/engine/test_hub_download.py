"""The online path for a hub id, against a local stand-in for the Hugging Face hub (HF_ENDPOINT):
the files and their sizes are listed before any is fetched, only safetensors and text files are
fetched, progress is shown, and the model then loads from the cache; a typo'd or gated repo is
one line. The real hub speaks the same few endpoints (model info, HEAD and GET of a file)."""
from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine import cli
from engine.api import Engine
from engine.errors import ModelUnavailable
from tests.arch_zoo import save_arch

COMMIT = "0" * 40


class FakeHub(BaseHTTPRequestHandler):
    repos: dict[str, Path] = {}
    gated: set[str] = set()
    fetched: list[str] = []
    requests: list[tuple[str, str]] = []     # every request: (method, path), in order

    def log_message(self, *args):        # quiet test output
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _file(self):
        # /{org}/{name}/resolve/{revision}/{file}
        parts = self.path.split("?")[0].strip("/").split("/")
        repo, name = "/".join(parts[:2]), parts[-1]
        if repo in self.gated:
            return self._send(403, b"gated", {"X-Error-Code": "GatedRepo",
                                              "X-Error-Message": "Access to this repo is gated"})
        folder = self.repos.get(repo)
        if folder is None or not (folder / name).is_file():
            return self._send(404, b"not found", {"X-Error-Code": "RepoNotFound",
                                                  "X-Error-Message": "Repository not found"})
        data = (folder / name).read_bytes()
        if self.command == "GET":
            self.fetched.append(name)
        self._send(200, data, {"X-Repo-Commit": COMMIT,
                               "ETag": '"' + hashlib.sha256(data).hexdigest() + '"'})

    def do_HEAD(self):
        self.requests.append(("HEAD", self.path))
        self._file()

    def do_GET(self):
        self.requests.append(("GET", self.path))
        if self.path.startswith("/api/models/"):
            repo = "/".join(self.path.split("?")[0].split("/")[3:5])
            folder = self.repos.get(repo)
            if folder is None:
                return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound",
                                               "X-Error-Message": "Repository not found"})
            files = [{"rfilename": f.name, "size": f.stat().st_size}
                     for f in sorted(folder.iterdir())]
            body = json.dumps({"id": repo, "sha": COMMIT, "siblings": files}).encode()
            return self._send(200, body, {"Content-Type": "application/json"})
        self._file()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    folder = save_arch("gpt-neox", tmp_path / "repo")
    (folder / "pytorch_model.bin").write_bytes(b"never fetched")      # a pickle beside it
    FakeHub.repos = {"org/tiny-neox": folder, "org/gated": folder}
    FakeHub.gated = {"org/gated"}
    FakeHub.fetched = []
    FakeHub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeHub.server = server
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "ctxlens"))
    monkeypatch.setenv("CTXLENS_REGISTRY", str(tmp_path / "none.toml"))
    yield folder
    server.shutdown()
    server.server_close()


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
