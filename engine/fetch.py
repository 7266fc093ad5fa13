"""Getting hub and URL models onto disk, failing fast (never hanging) when offline."""
from __future__ import annotations

import os
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from engine.families.base import ModelUnavailable
from engine.registry import ModelEntry, cache_dir

CONNECT_TIMEOUT_S = 3.0
HUB_HOST = "huggingface.co"
# Only weight formats that load without unpickling code are fetched.
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors"]


def _reachable(host: str, port: int = 443) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("CTXLENS_OFFLINE") == "1":
        return False
    # The connect timeout does not bound the DNS lookup, which can stall for much longer on a
    # machine without a network; a daemon thread caps the whole probe.
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                result.append(True)
        except OSError:
            result.append(False)

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(CONNECT_TIMEOUT_S + 0.5)
    return bool(result and result[0])


def _offline_message(entry: ModelEntry, host: str) -> str:
    return (f"{entry.id} needs a download from {host}, which cannot be reached; connect once to "
            f"cache it, or pass a local copy as --model /path/under/a/model/dir "
            f"(bundled models work offline: see `ctxlens models`)")


def fetch(entry: ModelEntry, progress: bool = True) -> Path:
    """A local directory holding the model's files, downloading them if needed."""
    if entry.urls:
        return _fetch_urls(entry, progress)
    return _fetch_hub(entry)


def _fetch_hub(entry: ModelEntry) -> Path:
    from huggingface_hub import snapshot_download

    try:  # already cached: no network needed at all
        return Path(snapshot_download(entry.hub, allow_patterns=HUB_PATTERNS,
                                      local_files_only=True))
    except Exception:  # noqa: BLE001 - any cache miss means "go online"
        pass
    if not _reachable(HUB_HOST):
        raise ModelUnavailable(_offline_message(entry, HUB_HOST))
    try:
        return Path(snapshot_download(entry.hub, allow_patterns=HUB_PATTERNS, etag_timeout=10))
    except Exception as e:  # noqa: BLE001 - network/hub errors become one line
        raise ModelUnavailable(f"downloading {entry.hub} failed: {e}") from e


def _fetch_urls(entry: ModelEntry, progress: bool) -> Path:
    target = cache_dir() / "downloads" / entry.id
    target.mkdir(parents=True, exist_ok=True)
    for url in entry.urls:
        dest = target / url.rsplit("/", 1)[-1]
        if dest.exists():
            continue
        host = urlparse(url).hostname or ""
        if not _reachable(host):
            raise ModelUnavailable(_offline_message(entry, host))
        _download(url, dest, progress)
    # The ELMo loader wants options.json + weights.hdf5; AllenNLP names them by model.
    for f in target.iterdir():
        for suffix, name in (("options.json", "options.json"), ("weights.hdf5", "weights.hdf5")):
            link = target / name
            if f.name.endswith(suffix) and f.name != name and not link.exists():
                link.symlink_to(f.name)
    return target


def _download(url: str, dest: Path, progress: bool) -> None:
    from tqdm import tqdm

    tmp = dest.with_suffix(dest.suffix + ".part")
    try:
        with urllib.request.urlopen(url, timeout=30) as r, open(tmp, "wb") as out:
            total = int(r.headers.get("Content-Length") or 0)
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name,
                      disable=not progress) as bar:
                while chunk := r.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
        tmp.rename(dest)
    except (urllib.error.URLError, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise ModelUnavailable(f"downloading {url} failed: {e}") from e
