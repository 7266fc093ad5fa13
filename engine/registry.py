"""The model registry (assets/models.toml) and where each model's files are found.

A model id is either a registry id or a local directory under a configured model directory
(CTXLENS_MODEL_DIRS, os.pathsep-separated; assets/models always included). Local paths outside
those directories are refused so a typed path cannot make the app read arbitrary files.
"""
from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError, ModelUnavailable

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
REGISTRY_FILE = ASSETS / "models.toml"


@dataclass(frozen=True)
class ModelEntry:
    id: str
    family: str
    name: str
    licence: str
    size: str
    bundled: bool
    hub: str = ""            # Hugging Face hub id
    urls: tuple[str, ...] = ()  # direct downloads (AllenNLP ELMo: options, weights)
    package: str = ""        # installed Python package holding the files
    path: str = ""           # file or folder inside the package, or a path under assets/
    gguf_file: str = ""      # GGUF file name inside `path`
    description: str = ""
    default: bool = False    # the app's default model for its family
    fills_blank: str = ""    # "masked-lm" (a trained MLM head), "both-sides" (GPT re-ranking,
                             # ELMo forward x backward LM) or "" (cannot fill a [MASK])
    base: str = ""           # registry id whose weights this model overlays (an added head)
    fill_order: int = 0      # where the app lists it among the masked LMs (1 first; 0: after
                             # those with an order, by id)

    @property
    def source(self) -> str:
        if self.package:
            return f"package {self.package}:{self.path}"
        if self.hub:
            return f"hub {self.hub}"
        if self.urls:
            return "url " + self.urls[0].rsplit("/", 1)[0]
        return f"assets/{self.path}"


def load_registry(path: Path = REGISTRY_FILE) -> dict[str, ModelEntry]:
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    entries = {}
    for mid, fields in raw["models"].items():
        fields = dict(fields)
        fields["urls"] = tuple(fields.get("urls", ()))
        entries[mid] = ModelEntry(id=mid, **fields)
    return entries


def model_dirs() -> list[Path]:
    dirs = [ASSETS / "models", cache_dir() / "models"]
    for d in os.environ.get("CTXLENS_MODEL_DIRS", "").split(os.pathsep):
        if d.strip():
            dirs.append(Path(d).expanduser().resolve())
    return dirs


def cache_dir() -> Path:
    d = Path(os.environ.get("CTXLENS_CACHE", Path.home() / ".cache" / "ctxlens")).expanduser()
    return d


def package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def local_path(entry: ModelEntry) -> Path | None:
    """The on-disk location of a bundled or installed model, or None if it needs a download."""
    if entry.package:
        base = package_dir(entry.package)
        return base / entry.path if base is not None else None
    if entry.path:
        return ASSETS / entry.path
    return None


def availability(entry: ModelEntry) -> str:
    """bundled / installed / needs network / missing."""
    p = local_path(entry)
    if entry.package or entry.path:
        # a folder must hold the model's files, not just exist (an interrupted copy is empty)
        if p is not None and p.exists() and (p.is_file() or any(p.iterdir())):
            return "bundled" if entry.bundled else "installed"
        return "missing"
    if _hub_cached(entry):
        return "installed"
    return "needs network"


def _hub_cached(entry: ModelEntry) -> bool:
    if entry.urls:
        return all((cache_dir() / "downloads" / entry.id / u.rsplit("/", 1)[-1]).exists()
                   for u in entry.urls)
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on it
        return False
    hit = try_to_load_from_cache(entry.hub, "config.json")
    return isinstance(hit, str)


def resolve_local_dir(model_id: str) -> Path:
    """A model id that is a path: allowed only under a configured model directory."""
    p = Path(model_id).expanduser().resolve()
    if not p.exists():
        raise ModelUnavailable(f"unknown model {model_id!r}: not in the registry and no such "
                               "directory (see `ctxlens models`)")
    if not p.is_dir():
        raise ModelUnavailable(f"{model_id!r} is not a model directory")
    allowed = model_dirs()
    if not any(p == d or d in p.parents for d in allowed):
        raise ModelUnavailable(
            f"{p} is outside the configured model directories; add its parent to "
            "CTXLENS_MODEL_DIRS (allowed: " + ", ".join(str(d) for d in allowed) + ")")
    return p


def family_of_dir(path: Path) -> str:
    """The family whose files a local model folder holds (each family's folder probe says)."""
    from engine.families import FAMILIES

    for name, fam in FAMILIES.items():
        if fam.folder_probe().claims_dir(path):
            return name
    raise ModelUnavailable(f"{path} holds no model files that a known family reads "
                           f"({', '.join(f.label for f in FAMILIES.values())})")


def fills_blank_of_dir(path: Path) -> str:
    """What a local model folder can do with a [MASK] (see ModelEntry.fills_blank)."""
    from engine.families import family

    return family(family_of_dir(path)).folder_probe().fills_blank_of_dir(path)


def default_model(family: str, registry: dict[str, ModelEntry] | None = None) -> str:
    registry = registry or load_registry()
    usable = [e for e in registry.values() if e.family == family
              and availability(e) in ("bundled", "installed")]
    for e in usable:
        if e.default:
            return e.id
    if usable:
        return usable[0].id
    raise EngineError(f"no {family} model is available here")
