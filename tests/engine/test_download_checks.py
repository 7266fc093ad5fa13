"""Downloads are sized and checked before the first byte (issue 52, item 4): a hub download's
listing gives its size and a memory estimate (the parameter count from the hub's safetensors
metadata, else from the safetensors sizes and the config's dtype, times the bytes per parameter
of the dtype the model will run in), and a download that would not fit on the disk holding the
Hugging Face cache, or whose model would not fit in the free memory, is refused in one line
with the numbers, having fetched none of the model's files. A direct (URL) download is checked
against the disk from its Content-Length before a byte is written.

The local stand-in for the hub records every request, so each test asserts what was fetched."""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine import checkpoint, cli, hub
from engine.errors import ModelUnavailable
from tests.arch_zoo import save_arch

COMMIT = "1" * 40
MB, GB = 2**20, 2**30
Usage = namedtuple("Usage", "total used free")


class SizedHub(BaseHTTPRequestHandler):
    """The hub's model-info, HEAD and GET of a file; a repo's listing may claim other sizes
    (`sizes`) and carry the hub's safetensors metadata (`metadata`) without the bytes behind
    them, so a 50 GB model is refused without anyone holding 50 GB."""
    repos: dict[str, Path] = {}
    sizes: dict[str, dict[str, int]] = {}
    metadata: dict[str, dict] = {}
    requests: list[str] = []        # "METHOD path" of every request
    fetched: list[str] = []         # file names whose bytes were sent

    def log_message(self, *args):
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
        parts = self.path.split("?")[0].strip("/").split("/")
        repo, name = "/".join(parts[:2]), parts[-1]
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
        self.requests.append(f"HEAD {self.path}")
        self._file()

    def do_GET(self):
        self.requests.append(f"GET {self.path}")
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


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> Path:
    return save_arch("gpt-neox", tmp_path_factory.mktemp("sized-hub") / "repo")


def bf16_copy(folder: Path, target: Path) -> Path:
    """The same files with a config saying the weights are stored in bfloat16."""
    shutil.copytree(folder, target)
    cfg = json.loads((target / "config.json").read_text())
    cfg.pop("dtype", None)
    cfg["torch_dtype"] = "bfloat16"
    (target / "config.json").write_text(json.dumps(cfg))
    return target


@pytest.fixture
def sized_hub(tiny_repo, tmp_path, monkeypatch):
    """A local hub serving org/tiny (the real tiny files) and org/huge (the same files, listed
    as 51,200 MB of float32 weights: 12.8B parameters by the hub's metadata); the model
    directories, registry and caches are the test's own."""
    import huggingface_hub.constants as constants

    SizedHub.repos = {"org/tiny": tiny_repo, "org/huge": tiny_repo,
                      "org/huge-bf16": bf16_copy(tiny_repo, tmp_path / "bf16")}
    SizedHub.sizes = {"org/huge": {"model.safetensors": 51_200 * MB},
                      "org/huge-bf16": {"model.safetensors": 20 * GB}}
    SizedHub.metadata = {"org/huge": {"parameters": {"F32": 12_800_000_000},
                                      "total": 12_800_000_000}}
    SizedHub.requests, SizedHub.fetched = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SizedHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("CTXLENS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-hub"))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "ctxlens"))
    monkeypatch.setenv("CTXLENS_REGISTRY", str(tmp_path / "none.toml"))
    yield SizedHub
    server.shutdown()


def room(monkeypatch, disk: int = 10**15, memory: int = 10**15) -> None:
    """What the disk holding the cache and the memory have free, as the checks read them."""
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(disk, 0, disk))
    monkeypatch.setattr(checkpoint, "free_memory_bytes", lambda device: memory)


def embed(tmp_path, model: str) -> int:
    src = tmp_path / "in.txt"
    src.write_text("The bank raised its rates .\n")
    return cli.main(["embed", "--model", model, "--device", "cpu", "--input", str(src),
                     "--output", str(tmp_path / "v.npz")])


def weights_fetched(served) -> list[str]:
    """What was fetched beyond the config that reading a repo's kind takes."""
    return [name for name in served.fetched if name != "config.json"]


def test_a_model_too_big_for_memory_is_refused_before_its_download(sized_hub, tmp_path,
                                                                     monkeypatch, capsys):
    """`ctxlens embed --model org/huge` listed 51,200.5 MB and started fetching at once; now it
    is one line with the parameters, the estimate in the dtype it would run in (float32 on the
    CPU, whatever --dtype asks), the free memory and what to do; no weight is fetched."""
    room(monkeypatch, memory=16 * GB)
    assert embed(tmp_path, "org/huge") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "12.80B parameters" in err and "47.7 GB in float32" in err and "16.0 GB" in err
    assert "51,200" in err and "no weights were downloaded" in err
    assert weights_fetched(sized_hub) == []


def test_the_estimate_is_in_the_dtype_the_model_runs_in(sized_hub, monkeypatch):
    """bfloat16 asked for on the CPU runs in float32, so the estimate is float32's; on a GPU the
    same download needs half of it, against the GPU's free memory."""
    room(monkeypatch, memory=32 * GB)
    todo = hub.plan("org/huge")
    with pytest.raises(ModelUnavailable, match="in float32"):
        hub.check(todo, dtype="float32", device="cpu")
    hub.check(todo, dtype="bfloat16", device="cuda")          # 23.8 GB, 25.6 GB allowed
    assert weights_fetched(sized_hub) == []


def test_without_the_hubs_metadata_parameters_come_from_the_sizes_and_the_configs_dtype(
        sized_hub, monkeypatch):
    """A listing without safetensors metadata: 20 GB of weights stored in bfloat16 (the
    config says so) are 10.7B parameters, 40 GB in float32."""
    room(monkeypatch, memory=32 * GB)
    hub.kind("org/huge-bf16")                     # what resolving the id reads: its config
    todo = hub.plan("org/huge-bf16")
    assert todo.parameters == 20 * GB // 2
    with pytest.raises(ModelUnavailable, match=r"10\.74B parameters: about 40\.0 GB in float32"):
        hub.check(todo, dtype="float32", device="cpu")
    assert weights_fetched(sized_hub) == []


def test_a_download_too_big_for_the_disk_is_refused_before_its_first_byte(
        sized_hub, tmp_path, monkeypatch, capsys):
    room(monkeypatch, disk=2 * GB)
    assert embed(tmp_path, "org/huge") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "51,200" in err and "2,048.0 MB free" in err and "HF_HUB_CACHE" in err
    assert weights_fetched(sized_hub) == []


def test_a_download_that_fits_lists_its_size_and_memory_then_loads(sized_hub, tmp_path,
                                                                   monkeypatch, capsys):
    room(monkeypatch)
    assert embed(tmp_path, "org/tiny") == 0
    listed = next(line for line in capsys.readouterr().err.splitlines()
                  if "downloading org/tiny" in line)
    assert "MB" in listed and "of memory in float32" in listed
    assert "model.safetensors" in sized_hub.fetched


class _Sized(BaseHTTPRequestHandler):
    body = b"x" * 4096
    served: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.served.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def test_a_url_download_too_big_for_the_disk_writes_nothing(tmp_path, monkeypatch):
    """Direct downloads (AllenNLP's ELMo files) are checked from their Content-Length."""
    from engine import fetch

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1024, 0, 1024))
    dest = tmp_path / "weights.hdf5"
    try:
        with pytest.raises(ModelUnavailable, match=r"needs 4,096 bytes.*1,024 bytes free") as e:
            fetch._download(f"http://127.0.0.1:{server.server_port}/weights.hdf5", dest, False)
    finally:
        server.shutdown()
    assert "\n" not in str(e.value)
    assert not dest.exists() and not dest.with_suffix(".hdf5.part").exists()
