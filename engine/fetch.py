"""Getting models onto disk in a loadable form: hub and URL downloads (failing fast, never
hanging, when offline) and the one-time conversion of a GGUF file into a transformers folder."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from engine.errors import ModelUnavailable, NeedsDownload
from engine.folders import publish
from engine.hub import DISK_SPARE_BYTES, reachable as _reachable
from engine.registry import ModelEntry, cache_dir

HUB_HOST = "huggingface.co"
DIGESTS_FILE = "file-digests.json"
MAX_DIGESTS = 512


def _offline_message(entry: ModelEntry, host: str) -> str:
    return (f"{entry.id} needs a download from {host}, which cannot be reached; connect once to "
            f"cache it, or pass a local copy as --model /path/under/a/model/dir "
            f"(bundled models work offline: see `ctxlens models`)")


def fetch(entry: ModelEntry, progress: bool = True) -> Path:
    """A local directory holding the model's direct downloads (AllenNLP's ELMo files),
    fetching them if needed; hub models come through engine.hub."""
    if entry.urls:
        return _fetch_urls(entry, progress)
    raise ModelUnavailable(f"{entry.id} names no files to download (hub, urls, path or package)")


def _fetch_urls(entry: ModelEntry, progress: bool) -> Path:
    target = cache_dir() / "downloads" / entry.id
    target.mkdir(parents=True, exist_ok=True)
    for url in entry.urls:
        dest = target / url.rsplit("/", 1)[-1]
        if dest.exists():
            continue
        host = urlparse(url).hostname or ""
        if not _reachable(host):
            raise NeedsDownload(_offline_message(entry, host))
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
        with urllib.request.urlopen(url, timeout=30) as r:
            total = int(r.headers.get("Content-Length") or 0)
            # the headers come before the body: a file the disk cannot hold is refused before
            # a byte of it is written
            _check_disk(url, total, dest.parent)
            with open(tmp, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                               desc=dest.name, disable=not progress) as bar:
                while chunk := r.read(1 << 20):
                    out.write(chunk)
                    bar.update(len(chunk))
        tmp.rename(dest)
    except (urllib.error.URLError, OSError) as e:
        tmp.unlink(missing_ok=True)
        raise ModelUnavailable(f"downloading {url} failed: {e}") from e


def _check_disk(url: str, size: int, folder: Path) -> None:
    """One line when the disk cannot hold the file and the room a server keeps free beside it
    (the hub's downloads keep the same); a server that says no size is not checked."""
    free = shutil.disk_usage(folder).free
    if size and size + DISK_SPARE_BYTES > free:
        raise ModelUnavailable(f"downloading {url} needs {size:,} bytes and {folder} has "
                               f"{free:,} bytes free; free space there, or point CTXLENS_CACHE "
                               "at a disk with room")


# -- GGUF: dequantise once, cache as safetensors ------------------------------------------
def gguf_source(path: Path, gguf_file: str = "") -> Path | None:
    """The GGUF file a model folder is to be read from: the registry's `gguf_file`, or the one
    .gguf of a folder without a config.json; None for a transformers folder."""
    if gguf_file:
        source = path / gguf_file
        if not source.is_file():
            raise ModelUnavailable(f"{source} does not exist; run `make install`")
        return source
    if (path / "config.json").exists() or not path.is_dir():
        return None
    files = sorted(path.glob("*.gguf"))
    if not files:
        return None
    if len(files) != 1:
        raise ModelUnavailable(f"{path} has no config.json and {len(files)} .gguf files; "
                               "keep exactly one GGUF file in the folder")
    return files[0]


def content_digest(path: Path) -> str:
    """A file's content hash. Caches of what is derived from a model's files key on this, not
    on mtimes: every install of the same wheel (a second checkout, a CI clone) has its own
    mtimes, and each would build the cache again and evict the others' copy."""
    return content_digests([path])[0]


def content_digests(paths) -> list[str]:
    """content_digest of each file. A file is hashed once while its path, size and mtime hold
    (remembered in the cache folder, written once per call: hashing MiniLM's 90 MB costs
    0.1 s a process)."""
    folder = cache_dir()
    out = []
    with _DIGEST_LOCK:
        known, added = _digests(str(folder)), False
        for path in paths:
            path = Path(path).resolve()
            st = path.stat()
            stamp = f"{path}:{st.st_size}:{st.st_mtime_ns}"
            if stamp not in known:
                with open(path, "rb") as f:  # blake2b: 0.13 s for a 98 MB GGUF, sha256 0.36 s
                    known[stamp] = hashlib.file_digest(f, "blake2b").hexdigest()[:16]
                added = True
            out.append(known[stamp])
        if added:
            _save_digests(known, folder / DIGESTS_FILE)
    return out


_DIGEST_LOCK = threading.Lock()


def tree_digest(sources, parts=()) -> str:
    """One hash of `parts` (versions, format names) and the contents of every file under
    `sources` (folders or single files), by relative name: what caches of results derived
    from a model key on."""
    h = hashlib.sha256()
    for part in parts:
        h.update(f"{part}\n".encode())
    for src in sources:
        src = Path(src)
        files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
        for f, digest in zip(files, content_digests(files)):
            h.update(f"{f.relative_to(src) if src.is_dir() else f.name}:{digest}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _digests(folder: str) -> dict[str, str]:
    try:
        known = json.loads((Path(folder) / DIGESTS_FILE).read_text())
        return known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_digests(known: dict[str, str], target: Path) -> None:
    """Written whole and renamed into place; two processes racing lose an entry, never the
    file (the loser's file is hashed again next time)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".digests-", dir=target.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(dict(list(known.items())[-MAX_DIGESTS:]), f)
        os.replace(tmp, target)
    except OSError:
        pass    # a read-only cache folder: hash again next time


def converted_dir(model_id: str, gguf_path: Path) -> Path:
    """Cache folder of a converted GGUF, keyed by the file's size and content (a changed file
    converts again)."""
    safe_id = re.sub(r"[^\w.-]+", "_", model_id).strip("_") or "model"
    return (cache_dir() / "converted" / safe_id
            / f"{gguf_path.stem}-{gguf_path.stat().st_size}-{content_digest(gguf_path)}")


def ensure_converted(model_id: str, gguf_path: Path, convert: Callable[[Path], None],
                     progress: bool = True) -> tuple[Path, bool]:
    """The converted model folder and whether it came from the cache. `convert(folder)` writes
    the model there, published atomically (publish)."""
    final = converted_dir(model_id, gguf_path)
    if (final / "config.json").exists():
        return final, True
    if progress:
        print(f"ctxlens: converting GGUF {gguf_path.name} once, ~30 s (cached in {final})",
              file=sys.stderr, flush=True)
    publish(final, convert, "config.json")
    return final, False
