"""The model registry (assets/models.toml, plus the user's own file) and where each model's
files are found.

A model id is a registry id, a local directory under a configured model directory
(CTXLENS_MODEL_DIRS, os.pathsep-separated; assets/models always included), or a Hugging Face hub
id (`org/name`, or a legacy bare name like `gpt2`). Local paths outside the model directories
are refused so a typed path cannot make the app read arbitrary files. `resolve` turns any of
the three into a ModelEntry; the registry is the curated list, not the limit.
"""
from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from engine.errors import EngineError, ModelUnavailable
from engine.families import ENCODER, FAMILIES, WITH_LM, WITH_MLM_HEAD, Gives

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
REGISTRY_FILE = ASSETS / "models.toml"


@dataclass(frozen=True)
class ModelEntry:
    id: str
    family: str
    name: str = ""           # how lists show it ("" = the id)
    licence: str = ""
    size: str = ""
    bundled: bool = False
    hub: str = ""            # Hugging Face hub id
    urls: tuple[str, ...] = ()  # direct downloads (AllenNLP ELMo: options, weights)
    package: str = ""        # installed Python package holding the files
    path: str = ""           # file or folder inside the package, or a path under assets/
    gguf_file: str = ""      # GGUF file name inside `path`
    description: str = ""
    default: bool = False    # the app's default model for its family
    # What this model can do (engine.families.CAPABILITIES): given as what its checkpoint
    # gives (its files' probe, or its registry entry), kept within its family's row when the
    # entry is made; the one set every view, command and message reads
    capabilities: frozenset[str] = ENCODER
    # capability -> why this model's architecture cannot do it, though its family can
    cannot: Mapping[str, str] = field(default_factory=dict, hash=False)
    base: str = ""           # registry id whose weights this model overlays (an added head)
    fill_order: int = 0      # where the app lists it among the masked LMs (1 first; 0: after
                             # those with an order, by id)
    folder: str = ""         # a model folder under the model directories (not in the registry)
    note: str = ""           # one line the pages show beside the model: what it is

    def __post_init__(self):
        row = FAMILIES.get(self.family)      # a family not registered here can do nothing
        gives = Gives(frozenset(self.capabilities), dict(self.cannot))
        kept = row.capabilities_of(gives) if row is not None else frozenset()
        object.__setattr__(self, "capabilities", kept)
        object.__setattr__(self, "cannot", {c: why for c, why in gives.cannot.items()
                                            if row is not None and c in row.capabilities})

    @property
    def source(self) -> str:
        if self.folder:
            return f"folder {self.folder}"
        if self.package:
            return f"package {self.package}:{self.path}"
        if self.hub:
            return f"hub {self.hub}"
        if self.urls:
            return "url " + self.urls[0].rsplit("/", 1)[0]
        return f"assets/{self.path}"


# What a registry entry's `fills_blank` says its checkpoint gives: the words users' own
# models.toml files use, read here and nowhere else
FILLS_BLANK = {"masked-lm": WITH_MLM_HEAD,     # a trained MLM head
               "both-sides": WITH_LM,          # a GPT's re-ranking, ELMo's forward x backward LM
               "": ENCODER}                    # no head: it cannot fill a [MASK]
FIELDS = (frozenset(ModelEntry.__dataclass_fields__) - {"id", "folder", "capabilities",
                                                         "cannot"}) | {"fills_blank"}


def user_registry_file() -> Path:
    """The user's own registry: CTXLENS_REGISTRY, else $XDG_CONFIG_HOME/ctxlens/models.toml."""
    if os.environ.get("CTXLENS_REGISTRY"):
        return Path(os.environ["CTXLENS_REGISTRY"]).expanduser()
    config = Path(os.environ.get("XDG_CONFIG_HOME", "~/.config")).expanduser()
    return config / "ctxlens" / "models.toml"


def load_registry(path: Path = REGISTRY_FILE, user: Path | None = None) -> dict[str, ModelEntry]:
    """The registry's entries, then the user's file's (which may add or replace entries)."""
    entries = _read_registry(path)
    user = user_registry_file() if user is None and path == REGISTRY_FILE else user
    if user is not None and user.is_file():
        entries.update(_read_registry(user))
    return entries


def _read_registry(path: Path) -> dict[str, ModelEntry]:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise EngineError(f"model registry {path} cannot be read: {err}") from err
    entries = {}
    for mid, fields in (raw.get("models") or {}).items():
        if not isinstance(fields, dict):
            raise EngineError(f"{path}: [models.{mid}] is not a table")
        fields = dict(fields)
        unknown = sorted(set(fields) - FIELDS)
        if unknown or "family" not in fields:
            what = f"unknown field {unknown[0]!r}" if unknown else "no `family`"
            raise EngineError(f"{path}: [models.{mid}] has {what} (fields: family, hub, path, "
                              "package, name, description, fills_blank, default, ...)")
        fields["urls"] = tuple(fields.get("urls", ()))
        fills = fields.pop("fills_blank", "")
        if fills not in FILLS_BLANK:
            raise EngineError(f"{path}: [models.{mid}] has fills_blank = {fills!r} (one of: "
                              + ", ".join(repr(k) for k in FILLS_BLANK) + ")")
        entries[mid] = ModelEntry(id=mid, capabilities=FILLS_BLANK[fills], **fields)
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
    if entry.folder:
        return Path(entry.folder)
    if entry.package:
        base = package_dir(entry.package)
        return base / entry.path if base is not None else None
    if entry.path:
        return ASSETS / entry.path
    if entry.hub:
        from engine.hub import cached_snapshot

        return cached_snapshot(entry.hub)
    return None


def availability(entry: ModelEntry) -> str:
    """bundled / installed / needs network / missing."""
    p = local_path(entry)
    if entry.folder:
        return "installed"
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
    from engine.hub import cached_snapshot

    return cached_snapshot(entry.hub) is not None


def is_path(model_id: str) -> bool:
    """Whether a model id names a folder rather than a hub id: a path that exists, or one
    written as a path (absolute, ./, ../, ~)."""
    if model_id.startswith(("/", "./", "../", "~")):
        return True
    try:
        return Path(model_id).expanduser().exists()
    except (OSError, ValueError):
        return False


def canonical_id(model_id: str, registry: dict[str, ModelEntry] | None = None) -> str:
    """The one spelling of a model id that is shown and used: a folder's resolved path (no
    `..`, no symlink, no `~`), anything else as given. The path must be usable: a typed id that
    climbs back with `..` through folders that do not exist would otherwise resolve to a real
    model while its text (a markdown link or image) is what the pages show."""
    registry = load_registry() if registry is None else registry
    if model_id in registry or not model_id.strip() or not is_path(model_id):
        return model_id
    return str(resolve_local_dir(model_id))


def resolve(model_id: str, registry: dict[str, ModelEntry] | None = None) -> ModelEntry:
    """The entry of any model id: the registry's, else a folder's or a hub id's, whose family
    its config.json decides (engine/checkpoint.py). A folder's entry has its canonical path as
    its id (canonical_id)."""
    from engine import hub

    registry = load_registry() if registry is None else registry
    if model_id in registry:
        return registry[model_id]
    if not model_id.strip():
        raise ModelUnavailable("no model id given: name a registry model, a folder under the "
                               "model directories or a Hugging Face hub id (`ctxlens models`)")
    if is_path(model_id):
        path = resolve_local_dir(model_id)
        fam = family_of_dir(path)
        gives = family_row(fam).folder_probe().gives_of_dir(path)
        return ModelEntry(id=str(path), family=fam, name=path.name, folder=str(path),
                          capabilities=gives.capabilities, cannot=gives.cannot)
    if not hub.looks_like_repo_id(model_id):
        raise ModelUnavailable(f"unknown model {hub.shown(model_id)}: not in the registry, not "
                               "a folder under the model directories and not a Hugging Face "
                               "hub id (org/name); see `ctxlens models`")
    kind = hub.kind(model_id)
    return ModelEntry(id=model_id, family=kind.family, name=model_id, hub=model_id,
                      capabilities=kind.gives.capabilities, cannot=kind.gives.cannot,
                      description=kind.architecture)


def family_row(name: str):
    """The family table's row `name` (imported here, not at the top: the table's modules
    import the registry)."""
    from engine.families import family

    return family(name)


def resolve_local_dir(model_id: str) -> Path:
    """A model id that is a path: allowed only as a folder under a configured model directory,
    reached as the kernel reads the typed path (each folder on the way must exist, so `..`
    cannot climb back out of names that are not there). Every way of missing says the same
    line, which names no directory of the server: a visitor's typed path learns nothing of what
    exists on it (`ctxlens models` lists the model directories for the one who runs it)."""
    from engine.hub import shown

    refused = ModelUnavailable(
        f"{shown(model_id)} is not a model folder inside the configured model directories "
        "(CTXLENS_MODEL_DIRS; `ctxlens models` lists them)")
    try:
        typed = os.path.expanduser(model_id)
        p = Path(typed).resolve()
        usable = os.path.isdir(typed) and p.is_dir()
    except (OSError, ValueError, RuntimeError):
        raise refused from None
    allowed = model_dirs()
    if not usable or not any(p == d or d in p.parents for d in allowed):
        raise refused
    return p


def family_of_dir(path: Path) -> str:
    """The family whose files a local model folder holds (each family's folder probe says)."""
    from engine.families import FAMILIES

    for name, fam in FAMILIES.items():
        if fam.folder_probe().claims_dir(path):
            return name
    raise ModelUnavailable(f"{path} holds no model files that a known family reads "
                           f"({', '.join(f.label for f in FAMILIES.values())})")


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


def what_it_can(entry: ModelEntry) -> str:
    """What a model gives, in words (its capabilities as `ctxlens models` lists them)."""
    can = entry.capabilities
    views = ["every layer"] + [word for cap, word in (("attention", "attention"),
                                                      ("scalar_mix", "scalar mix"))
                               if cap in can]
    if "masked_lm" in can:
        views.append("masked word")
    elif "fill_blank" in can:
        views.append("filled blank")
    views += [word for cap, word in (("next_word", "next word"),
                                     ("previous_word", "previous word"),
                                     ("logit_lens", "logit lens")) if cap in can]
    return ", ".join(views)


def catalogue(registry: dict[str, ModelEntry] | None = None) -> list[tuple[ModelEntry, str]]:
    """Every model a user can name here, with where it is: the registry's entries, the model
    folders directly under the model directories, and the hub models in the local Hugging Face
    cache. A folder or cached repo that no family can show is left out; one whose files cannot
    load (engine.checkpoint.problems, read from headers alone) is "broken: <why>"."""
    from engine import hub
    from engine.checkpoint import problems

    registry = load_registry() if registry is None else registry
    out = [(e, availability(e)) for e in registry.values()]
    known = {e.hub for e in registry.values() if e.hub}
    for root in model_dirs()[1:]:
        if not root.is_dir() or root == ASSETS / "models":
            continue
        for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                out.append((resolve(str(d), registry), "folder"))
            except EngineError:
                continue
    for repo in hub.cached_repos():
        if repo in registry or repo in known:
            continue
        try:
            out.append((resolve(repo, registry), "in the Hugging Face cache"))
        except EngineError:
            continue

    def marked(entry: ModelEntry, where: str) -> str:
        if where not in ("folder", "in the Hugging Face cache"):
            return where
        folder = Path(entry.folder) if entry.folder else hub.cached_snapshot(entry.hub)
        why = problems(folder) if folder is not None else None
        return f"broken: {why}" if why else where
    return [(e, marked(e, where)) for e, where in out]
