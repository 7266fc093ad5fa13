"""The online path for a hub id, against a local stand-in for the Hugging Face hub (HF_ENDPOINT):
the files and their sizes are listed before any is fetched, only safetensors and text files are
fetched, progress is shown, and the model then loads from the cache; a typo'd or gated repo is
one line. The real hub speaks the same few endpoints (model info, HEAD and GET of a file)."""
from __future__ import annotations

import hashlib
import json
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
        self._file()

    def do_GET(self):
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
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "ctxlens"))
    monkeypatch.setenv("CTXLENS_REGISTRY", str(tmp_path / "none.toml"))
    yield folder
    server.shutdown()


def test_a_hub_id_is_listed_then_downloaded_then_loads(hub, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("The bank raised its rates .\n")
    assert cli.main(["embed", "--model", "org/tiny-neox", "--input", str(src),
                     "--output", str(tmp_path / "v.npz")]) == 0
    err = capsys.readouterr().err
    listed = next(line for line in err.splitlines() if "downloading org/tiny-neox" in line)
    size = (hub / "model.safetensors").stat().st_size / 2**20
    assert f"model.safetensors {size:,.1f} MB" in listed and "files" in listed
    assert "pytorch_model.bin" not in FakeHub.fetched and "model.safetensors" in FakeHub.fetched
    # once cached, offline is enough
    FakeHub.fetched = []
    enc = Engine(device="cpu").encode("org/tiny-neox", ["The bank raised its rates ."])[0]
    assert enc.hidden_states.shape[0] == 3 and FakeHub.fetched == []


@pytest.mark.parametrize("repo, message", [("org/no-such-model", "no model 'org/no-such-model'"),
                                           ("org/gated", "is gated")])
def test_a_typo_or_a_gated_repo_is_one_line(hub, repo, message):
    with pytest.raises(ModelUnavailable, match=message) as err:
        Engine(device="cpu").encode(repo, ["a b"])
    assert "\n" not in str(err.value)
