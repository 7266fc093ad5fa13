"""A local stand-in for the Hugging Face hub (HF_ENDPOINT) for the tests of the online path: the
few endpoints the real hub speaks here (model info, HEAD and GET of a file), every request
recorded. A repo may be gated, and its listing may claim other sizes and carry the hub's
safetensors metadata without the bytes behind them (a 50 GB model refused without anyone
holding 50 GB)."""
from __future__ import annotations

import hashlib
import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "0" * 40


class FakeHub(BaseHTTPRequestHandler):
    repos: dict[str, Path] = {}
    gated: set[str] = set()
    sizes: dict[str, dict[str, int]] = {}     # repo -> file -> the size its listing claims
    metadata: dict[str, dict] = {}            # repo -> the listing's "safetensors" entry
    requests: list[tuple[str, str]] = []      # every request: (method, path), in order
    fetched: list[str] = []                   # file names whose bytes were sent
    server: ThreadingHTTPServer | None = None

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
            claimed = self.sizes.get(repo, {})
            files = [{"rfilename": f.name, "size": claimed.get(f.name, f.stat().st_size)}
                     for f in sorted(folder.iterdir())]
            info = {"id": repo, "sha": COMMIT, "siblings": files}
            if repo in self.metadata:
                info["safetensors"] = self.metadata[repo]
            return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
        self._file()


@contextmanager
def serving(repos: dict[str, Path], tmp_path: Path, monkeypatch, gated=(), sizes=None,
            metadata=None):
    """The stand-in hub serving `repos`, online (no offline switch set), with the hub cache,
    ctxlens's cache and the user's registry the test's own; yields the FakeHub class, whose
    `requests` and `fetched` say what was asked."""
    import huggingface_hub.constants as constants

    FakeHub.repos, FakeHub.gated = dict(repos), set(gated)
    FakeHub.sizes, FakeHub.metadata = dict(sizes or {}), dict(metadata or {})
    FakeHub.requests, FakeHub.fetched = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeHub.server = server
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CTXLENS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "ctxlens"))
    monkeypatch.setenv("CTXLENS_REGISTRY", str(tmp_path / "none.toml"))
    try:
        yield FakeHub
    finally:
        server.shutdown()
        server.server_close()
