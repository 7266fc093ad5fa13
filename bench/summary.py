"""results/README.md: what was run, on what, the headline numbers, and links to every report."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench.report import geometry_invariants, table

REPORTS = (("geometry.md", "Ethayarajh (2019) geometry per layer, invariants"),
           ("senses.md", "Word senses per layer (WordNet 3.0), learned scalar mix"),
           ("pos.md", "POS linear probe per layer (Brown)"),
           ("speed.md", "Speed and memory against the targets"))


def _layer_rows(layers: list[dict]) -> list[list]:
    rows = []
    for r in layers:
        checks = geometry_invariants(r)
        inv = f"{sum(ok for _, ok, _ in checks)}/{len(checks)} pass"
        acc = r["pos"]["accuracy"]
        pos = (f"{max(acc):.3f} at L{int(np.argmax(acc))} "
               f"(majority {r['pos']['majority_baseline']:.3f})")
        s = r.get("senses")
        sense = "n/a" if s is None else (
            f"L0 {s['centroid'][0]:.3f}, best {max(s['centroid']):.3f} at "
            f"L{int(np.nanargmax(s['centroid']))}, learned mix {s['mix_centroid']:.3f} "
            f"(chance {s['chance']:.3f})")
        rows.append([r["model"], r["n_layers"] - 1, inv, pos, sense])
    return rows


def readme(results: Path, elapsed: float, size: str, machine: str) -> str:
    out = ["# Benchmark results", "",
           f"Written by `make bench` (`python -m bench`, {size} size) on "
           f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {elapsed / 60:.1f} min; "
           f"{machine}.", "", "## Reports", ""]
    for name, title in REPORTS:
        path = results / name
        if not path.exists():
            out.append(f"- {title}: not run")
            continue
        note = ""
        if name == "speed.md":
            text = path.read_text()
            note = (f" ({len(re.findall('meets target', text))} meet, "
                    f"{len(re.findall('MISSES target', text))} miss their targets)")
        out.append(f"- [{title}]({name}){note}")
    failures = results / "tmp" / "failures.json"
    if failures.exists():
        for model, err in json.loads(failures.read_text()):
            out.append(f"- model {model} skipped: {err}")
    layers = results / "layers.json"
    if layers.exists():
        out += ["", "## Per-layer headlines", "",
                table(["model", "layers", "geometry invariants", "POS probe best layer",
                       "sense centroid accuracy (held-out lemmas)"],
                      _layer_rows(json.loads(layers.read_text())))]
    speed = results / "speed.json"
    if speed.exists():
        from bench.speed_report import speed_rows

        out += ["", "## Speed and memory", "",
                table(["measurement", "value", "target", "result"],
                      speed_rows(json.loads(speed.read_text())))]
    out += ["", "Plots: geometry.png, senses.png, pos.png. Published values come from "
            "shared/reference-numbers.md (bench/published.py). Raw numbers: layers.json, "
            "speed.json.", ""]
    return "\n".join(out)
