"""Hugging Face hub ids: any model a user names that is not in the registry or a folder.

The local Hugging Face cache is read first (HF_HUB_CACHE, else HF_HOME/hub, read at each call so
that a test or a user can point it elsewhere); offline (HF_HUB_OFFLINE=1, or the hub unreachable
within seconds) a model that is not cached fails at once with a message saying it needs a
download. Online, the files and their sizes are listed before any is fetched, and only files
that load without unpickling code are fetched.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine import checkpoint
from engine.checkpoint import DTYPE_BYTES, Kind, kind_of, read_config
from engine.errors import ModelUnavailable, NeedsDownload

HUB_HOST = "huggingface.co"
CONNECT_TIMEOUT_S = 3.0
PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors"]
# `org/name` or a legacy bare name; the hub's own rules (96 characters, no "--" or "..")
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
MAX_SHOWN = 80


def shown(model_id: str) -> str:
    """A model id as a message quotes it: never more than MAX_SHOWN characters."""
    return repr(model_id if len(model_id) <= MAX_SHOWN else model_id[:MAX_SHOWN] + "…")


def looks_like_repo_id(model_id: str) -> bool:
    return bool(_REPO_ID.fullmatch(model_id)) and "--" not in model_id \
        and ".." not in model_id and not model_id.endswith((".", "-"))


def endpoint() -> str:
    """The hub's address: HF_ENDPOINT (a mirror, or a test's local hub), read at each call."""
    return os.environ.get("HF_ENDPOINT", f"https://{HUB_HOST}").rstrip("/")


def _endpoint_host() -> tuple[str, int]:
    from urllib.parse import urlparse

    url = urlparse(endpoint())
    return url.hostname or HUB_HOST, url.port or (80 if url.scheme == "http" else 443)


def cache_root() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) \
        / "huggingface"
    return Path(home).expanduser() / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") or \
        os.environ.get("CTXLENS_OFFLINE") == "1"


# a revision as the hub's cache names it: a commit hash (refs/main, the snapshots' folders)
_COMMIT = re.compile(r"[0-9a-f]{40}")


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of a repo (its main revision) holding a config.json, or None.
    refs/main and the snapshot's name must be a commit hash, and the snapshot a folder of the
    repo's own: a ref holding '../../../outside' or a snapshot linked elsewhere would make a
    folder outside the cache and the model directories load as a hub model."""
    if not looks_like_repo_id(repo_id):
        return None
    repo = cache_root() / ("models--" + repo_id.replace("/", "--"))
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except OSError:
        found = (repo / "snapshots").glob("*") if (repo / "snapshots").is_dir() else ()
        snaps = sorted(p.name for p in found if _COMMIT.fullmatch(p.name))
        commit = snaps[-1] if snaps else ""
    if not _COMMIT.fullmatch(commit):
        return None
    snap = repo / "snapshots" / commit
    try:
        own = snap.is_dir() and not snap.is_symlink() and \
            snap.resolve().parent == (repo / "snapshots").resolve()
    except OSError:
        return None
    return snap if own and _complete(snap) else None


def _complete(snap: Path) -> bool:
    """A snapshot a model loads from: its config and its weights (every shard an index names).
    A config alone is what reading a repo's kind leaves behind."""
    if not (snap / "config.json").is_file():
        return False
    index = snap / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            return False
        return all((snap / shard).is_file() for shard in shards)
    return any(snap.glob("*.safetensors"))


def _config_only(repo_id: str) -> Path | None:
    """A snapshot holding the repo's config without its weights (what kind() fetched)."""
    snaps = cache_root() / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    found = sorted(snaps.glob("*/config.json")) if snaps.is_dir() else []
    return found[-1].parent if found else None


def config_cached(repo_id: str) -> bool:
    """Whether the repo's config is in the local cache, so that kind() asks the hub nothing."""
    return cached_snapshot(repo_id) is not None or _config_only(repo_id) is not None


def cached_repos() -> list[str]:
    """Repo ids of the models in the local Hugging Face cache."""
    root = cache_root()
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.glob("models--*")):
        repo_id = d.name.removeprefix("models--").replace("--", "/")
        if cached_snapshot(repo_id) is not None:
            out.append(repo_id)
    return out


def _needs_download(repo_id: str, why: str) -> NeedsDownload:
    return NeedsDownload(
        f"{shown(repo_id)} is not in the local Hugging Face cache ({cache_root()}) and needs a "
        f"download from {HUB_HOST}, {why}; connect once to cache it, or see `ctxlens models` "
        "for what is here")


def reachable(host: str, port: int = 443) -> bool:
    if offline():
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


def kind(repo_id: str) -> Kind:
    """What a hub model is, from its cached config (or, online, its config alone)."""
    snap = cached_snapshot(repo_id)
    if snap is not None:
        return kind_of(read_config(snap), shown(repo_id))
    partial = _config_only(repo_id)
    if partial is not None:
        return kind_of(read_config(partial), shown(repo_id))
    cfg_file = _download_one(repo_id, "config.json")
    return kind_of(read_config(Path(cfg_file).parent), shown(repo_id))


def _check_online(repo_id: str) -> None:
    if offline():
        raise _needs_download(repo_id, "which cannot be reached (HF_HUB_OFFLINE is set)")
    if not reachable(*_endpoint_host()):
        raise _needs_download(repo_id, "which cannot be reached")


def _hub_error(repo_id: str, err: Exception) -> ModelUnavailable:
    name = type(err).__name__
    if name == "GatedRepoError":
        return ModelUnavailable(f"{shown(repo_id)} is gated: accept its terms on {HUB_HOST} and "
                                "log in (`hf auth login`), then try again")
    if name in ("RepositoryNotFoundError", "RevisionNotFoundError"):
        return ModelUnavailable(f"no model {shown(repo_id)} on {HUB_HOST} (check the spelling; a "
                                "private repo needs `hf auth login`)")
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else name
    return ModelUnavailable(f"downloading {shown(repo_id)} failed: {first}")


def _download_one(repo_id: str, filename: str) -> str:
    from huggingface_hub import hf_hub_download

    _check_online(repo_id)
    try:
        return hf_hub_download(repo_id, filename, cache_dir=str(cache_root()), etag_timeout=10,
                               endpoint=endpoint())
    except Exception as err:  # noqa: BLE001 - hub errors of every kind become one line
        raise _hub_error(repo_id, err) from err


@dataclass(frozen=True)
class DownloadPlan:
    repo_id: str
    files: tuple[tuple[str, int], ...]     # (name, bytes) of what would be fetched
    parameters: int = 0                    # the model's parameter count; 0 where unknown
    present: tuple[str, ...] = ()          # files already in the cache (reading the kind)

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    @property
    def fetch_bytes(self) -> int:
        """What the download writes to the disk: the files not already cached."""
        return sum(size for name, size in self.files if name not in self.present)

    def memory_bytes(self, dtype: str) -> int:
        """The weights' memory once loaded in `dtype` (what the load's guard compares)."""
        return self.parameters * DTYPE_BYTES.get(dtype, 4)

    def size(self) -> str:
        return f"{len(self.files)} files, {self.total_bytes / 2**20:,.1f} MB"

    def memory(self, dtype: str) -> str:
        if not self.parameters:
            return "memory unknown (the hub lists no weight sizes)"
        need = self.memory_bytes(dtype)
        amount = f"{need / 2**30:,.1f} GB" if need >= 2**30 else f"{need / 2**20:,.0f} MB"
        return f"about {amount} of memory in {dtype}"

    def describe(self, dtype: str | None = None) -> str:
        return (f"{self.repo_id}: {self.size()} ("
                + ", ".join(f"{n} {s / 2**20:,.1f} MB" for n, s in self.files[:6])
                + (", …" if len(self.files) > 6 else "") + ")"
                + (f"; {self.memory(dtype)}" if dtype else ""))


def plan(repo_id: str) -> DownloadPlan:
    """The files a download of the repo fetches, with their sizes and the model's parameter
    count (asks the hub for its listing; fetches no file)."""
    from fnmatch import fnmatch

    from huggingface_hub import HfApi

    _check_online(repo_id)
    try:
        info = HfApi(endpoint=endpoint()).model_info(repo_id, files_metadata=True, timeout=10)
    except Exception as err:  # noqa: BLE001
        raise _hub_error(repo_id, err) from err
    files = tuple((s.rfilename, int(s.size or 0)) for s in info.siblings or []
                  if "/" not in s.rfilename and any(fnmatch(s.rfilename, p) for p in PATTERNS))
    if not any(n.endswith(".safetensors") for n, _ in files):
        raise ModelUnavailable(f"{shown(repo_id)} ships no safetensors weights (pickled .bin "
                               "only, which can run code when read); ctxlens loads safetensors")
    local = cached_snapshot(repo_id) or _config_only(repo_id)
    present = tuple(n for n, _ in files if local is not None and (local / n).is_file())
    return DownloadPlan(repo_id, files, _parameters(info, files, local), present)


def _parameters(info, files: tuple[tuple[str, int], ...], local: Path | None) -> int:
    """The hub's own count (it reads every safetensors header), else the weights' bytes over
    the bytes per parameter of the dtype the config says they are stored in: float32 where it
    says none, as transformers saves a config without one only for float32 weights."""
    counted = getattr(getattr(info, "safetensors", None), "total", None)
    if counted:
        return int(counted)
    stored = 4
    try:
        cfg = read_config(local) if local is not None else None
    except ModelUnavailable:
        cfg = None
    if cfg:
        stored = DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or ""), 4)
    return sum(size for n, size in files if n.endswith(".safetensors")) // stored


# a download that fills the disk breaks whatever else writes there (the server's own caches,
# its logs), so this much is left free
DISK_SPARE_BYTES = 256 * 2**20


def runs_in(device: str, dtype: str) -> tuple[str, str]:
    """(dtype, device) a model loaded with these options runs in: the load's own rules."""
    from engine.families.base import dtype_name, resolve_device

    device = resolve_device(device)
    return dtype_name(dtype, device), device


def check(todo: DownloadPlan, dtype: str, device: str, advice: str = "") -> None:
    """Refuse, in one line with the numbers, a download whose model would not fit in the free
    memory (the share a load may take, as the load's own guard) or whose files would not fit on
    the disk holding the cache; run before the first byte, as the load's guard runs only on
    files already fetched. `advice` replaces the command-line options a refusal suggests."""
    need, free = todo.memory_bytes(dtype), checkpoint.free_memory_bytes(device)
    if need > checkpoint.MEMORY_SHARE * free:
        where = "GPU memory" if device == "cuda" else "memory"
        if advice:
            options = advice
        elif device != "cuda":
            options = "a machine with a GPU and --dtype bfloat16, or a smaller model"
        elif dtype == "float32":
            options = "--dtype bfloat16 (half the memory), or a smaller model"
        else:
            options = "a smaller model"
        raise ModelUnavailable(
            f"{shown(todo.repo_id)} ({todo.size()}) has {todo.parameters / 1e9:.2f}B parameters: "
            f"about {need / 2**30:.1f} GB in {dtype}, and {free / 2**30:.1f} GB of {where} is "
            f"free; no weights were downloaded; use {options}")
    target = _existing(cache_root())
    room = shutil.disk_usage(target).free
    if todo.fetch_bytes + DISK_SPARE_BYTES > room:
        raise ModelUnavailable(
            f"{shown(todo.repo_id)} is a {todo.fetch_bytes / 2**20:,.1f} MB download and {target} "
            f"has {room / 2**20:,.1f} MB free; no weights were downloaded; free space there, or "
            "point HF_HUB_CACHE at a disk with room")


def _existing(path: Path) -> Path:
    """The folder itself, else its nearest ancestor that exists (the cache may not yet)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def snapshot(repo_id: str, progress: bool = True,
             on_file: Callable[[str, int, int], None] | None = None,
             device: str = "cpu", dtype: str = "float32") -> Path:
    """A local folder of the repo's files: the cached snapshot, else a download, checked
    first (check) for a model loaded with `device` and `dtype` (its plan printed with
    `progress`; `on_file(name, done, total)` after each file for a page)."""
    snap = cached_snapshot(repo_id)
    if snap is not None:
        return snap
    import sys

    from huggingface_hub import hf_hub_download

    todo = plan(repo_id)
    run_dtype, run_device = runs_in(device, dtype)
    check(todo, run_dtype, run_device)
    if progress:
        print(f"ctxlens: downloading {todo.describe(run_dtype)}", file=sys.stderr, flush=True)
    done = 0
    for name, size in todo.files:
        try:
            path = hf_hub_download(repo_id, name, cache_dir=str(cache_root()), etag_timeout=10,
                                   endpoint=endpoint())
        except Exception as err:  # noqa: BLE001
            raise _hub_error(repo_id, err) from err
        done += size
        if on_file is not None:
            on_file(name, done, todo.total_bytes)
    return Path(path).parent
