"""When, where and with what a result was measured: the `meta` of each results/*.json entry.

Readers of results/ get dates, machines and versions from here, never from prose. A list of
results (layers.json, cloze.json, ...) carries a `meta` per entry, since `--models` re-measures
some entries and keeps the others; speed.json one per part; any other object one at its top.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

PACKAGES = ("torch", "transformers", "numpy", "streamlit", "lancedb")


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.system()} "
            f"{platform.release()}")


def versions() -> dict[str, str]:
    # imported here: the app imports this module (through bench/views.py) but never measures
    from engine.corpus.manifest import package_versions

    return {"python": platform.python_version(), **package_versions(PACKAGES)}


def meta(command: str) -> dict:
    """This run's metadata: the time (UTC, to the minute), the command, machine, versions."""
    return {"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "command": command,
            "machine": machine(), "versions": versions()}


def stamp(path: Path, command: str, parts: bool = False) -> None:
    """Give the JSON at `path`, just written by this run, this run's `meta`. A list of
    results, or an object of parts (parts=True: speed.json), may keep entries of earlier runs:
    only the entries without a `meta` (those this run wrote) get this one. Any other object
    was written whole by this run and gets it at its top."""
    if not path.exists():
        return
    data = json.loads(path.read_text())
    now = meta(command)
    if isinstance(data, list) or parts:
        entries = data if isinstance(data, list) else list(data.values())
        for entry in entries:
            if isinstance(entry, dict) and "meta" not in entry:
                entry["meta"] = now
    else:
        data["meta"] = now
    path.write_text(json.dumps(data, indent=1))


def of(entry) -> dict:
    """An entry's meta ({} when it has none)."""
    return entry.get("meta", {}) if isinstance(entry, dict) else {}


def line(entry) -> str:
    """'2026-11-26 16:23 UTC on x86_64, 2 CPU cores (`python -m bench --only layers`)'."""
    m = of(entry)
    if not m.get("measured"):
        return ""
    out = m["measured"]
    if m.get("machine"):
        out += f" on {m['machine']}"
    if m.get("command"):
        out += f" (`{m['command']}`)"
    return out
