"""An index folder's manifest.json (engine/corpus/index.py writes it, query.py and catalog.py
read it): what was indexed, how, how far the build got, and with which package versions."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.errors import EngineError

# 3: positions count words as engine.text splits them with their marks (a text with marks had
# other positions under 2)
MANIFEST_SCHEMA = "ctxlens-index/3"

@dataclass
class Manifest:
    schema: str
    model: str
    family: str
    pooling: str
    corpus: str
    corpus_hash: str
    n_sentences: int
    layers: list[int]
    layer_names: list[str]
    dim: int
    vector_dtype: str = "float16"
    complete: bool = False
    rows: int = 0
    rows_per_layer: dict = field(default_factory=dict)
    bytes_on_disk: int = 0
    skipped_lines: int = 0
    ann_index: dict = field(default_factory=dict)
    build: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        path = folder / "manifest.json"
        if not path.exists():
            raise EngineError(f"{folder} is not a ctxlens index (no manifest.json)")
        data = json.loads(path.read_text())
        if data.get("schema") != MANIFEST_SCHEMA:
            raise EngineError(f"{folder} holds an index of another format "
                              f"({data.get('schema')!r}, this ctxlens reads {MANIFEST_SCHEMA}): "
                              "build it again with ctxlens index into a new folder")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def write(self, folder: Path) -> None:
        tmp = folder / "manifest.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(folder / "manifest.json")         # atomic: never a half-written manifest


INDEX_PACKAGES = ("ctxlens", "lancedb", "torch", "transformers", "ray")


def package_versions(names=INDEX_PACKAGES) -> dict[str, str]:
    """{package: installed version} for those of `names` that are installed (an index's
    manifest and the benchmarks' `meta` record them)."""
    import importlib.metadata as md

    out = {}
    for pkg in names:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out
