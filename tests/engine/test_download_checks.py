"""Downloads are sized and checked before the first byte (issue 52, item 4): a hub download's
listing gives its size and a memory estimate (the parameter count from the hub's safetensors
metadata, else from the safetensors sizes and the config's dtype, times the bytes per parameter
of the dtype the model will run in), and a download that would not fit on the disk holding the
Hugging Face cache, or whose model would not fit in the free memory, is refused in one line
with the numbers, having fetched none of the model's files. A direct (URL) download is checked
against the disk from its Content-Length before a byte is written.

The local stand-in for the hub records every request, so each test asserts what was fetched."""
from __future__ import annotations

import json
import shutil
import threading
from collections import namedtuple
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine import checkpoint, cli, hub
from engine.errors import ModelUnavailable
from tests.fake_hub import serving

MB, GB = 2**20, 2**30
Usage = namedtuple("Usage", "total used free")


@pytest.fixture(scope="module")
def tiny_repo(zoo) -> Path:
    return zoo.path("arch:gpt-neox")          # only served (read) by the stand-in hub


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
    repos = {"org/tiny": tiny_repo, "org/huge": tiny_repo,
             "org/huge-bf16": bf16_copy(tiny_repo, tmp_path / "bf16")}
    sizes = {"org/huge": {"model.safetensors": 51_200 * MB},
             "org/huge-bf16": {"model.safetensors": 20 * GB}}
    metadata = {"org/huge": {"parameters": {"F32": 12_800_000_000}, "total": 12_800_000_000}}
    with serving(repos, tmp_path, monkeypatch, sizes=sizes, metadata=metadata) as served:
        yield served


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
