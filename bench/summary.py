"""results/README.md: what was run, on what, the headline numbers, and links to every report."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bench.findings import HEADERS, canonical_note, findings_rows
from bench.report import geometry_invariants, table
from engine.analysis.bootstrap import with_ci

REPORTS = (("geometry.md", "Ethayarajh (2019) geometry per layer, invariants"),
           ("senses.md", "Word senses per layer (WordNet 3.0), learned scalar mix"),
           ("pos.md", "POS linear probe per layer (Brown)"),
           ("cloze.md", "Everyday cloze: filling one blank, every family"),
           ("elmo_distill.md", "A stronger ELMo offline: distillation candidates"),
           ("speed.md", "Speed and memory against the targets"),
           ("gpu.md", "GPU batch embedding: the engine against plain Hugging Face on an H200"),
           ("bad_input.md", "Bad input in the browser: cases and what the user sees"),
           ("soak.md", "Soak: concurrent browser sessions"),
           ("corpus.md", "Corpus mode: indexing Brown, searching it, LanceDB or FAISS, Ray"))


def _ci(section: dict, key: str, layer: int | None = None) -> str:
    ci = section.get("ci", {}).get(key)
    if layer is None:
        return with_ci(section[key], ci)
    return with_ci(section[key][layer], ci[layer] if ci else None)


def _verdicts(r: dict) -> str:
    found = [row[4] for row in findings_rows([r])]
    if not found:
        return "none for its family"
    return ", ".join(f"{found.count(v)} {v}" for v in ("yes", "partly", "no", "n/a")
                     if found.count(v))


def _layer_rows(layers: list[dict]) -> list[list]:
    rows = []
    for r in layers:
        checks = geometry_invariants(r)
        inv = f"{sum(ok for _, ok, _ in checks)}/{len(checks)} pass"
        p = r["pos"]
        best = int(np.argmax(p["accuracy"]))
        pos = f"{_ci(p, 'accuracy', best)} at L{best} (majority {_ci(p, 'majority_baseline')})"
        s = r.get("senses")
        sense = "n/a"
        if s is not None:
            best = int(np.nanargmax(s["centroid"]))
            sense = (f"L0 {_ci(s, 'centroid', 0)}, best {_ci(s, 'centroid', best)} at L{best}, "
                     f"learned mix {_ci(s, 'mix_centroid')} (chance {s['chance']:.3f})")
        rows.append([r["model"], r["n_layers"] - 1, inv, pos, sense, _verdicts(r)])
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
        measured = json.loads(layers.read_text())
        out += ["", "## Per-layer headlines", "",
                "Brackets: 95% bootstrap intervals (over held-out sentences for POS, over "
                "held-out lemmas for senses; 1,000 resamples, seed 0). The best layer is "
                "picked on the same data, so its interval is optimistic.", "",
                table(["model", "layers", "geometry invariants", "POS probe best layer",
                       "sense centroid accuracy (held-out lemmas)",
                       "published findings reproduced?"], _layer_rows(measured)),
                "", "## Published findings: reproduced?", "",
                "**yes** only when the claimed difference's 95% bootstrap interval excludes 0 "
                "on the claimed side; **partly**: the right direction within the interval, or "
                "one of two parts; **no**: otherwise. Details in each report.", "",
                table(HEADERS, findings_rows(measured))]
        note = canonical_note(measured)
        out += ["", note] if note else []
    speed = results / "speed.json"
    if speed.exists():
        from bench.speed_report import speed_rows

        out += ["", "## Speed and memory", "",
                table(["measurement", "value", "target", "result"],
                      speed_rows(json.loads(speed.read_text())))]
    out += ["", "Plots: geometry.png, senses.png, pos.png. Published values come from "
            "bench/published.py (copied from the project's reference notes). Raw numbers: "
            "layers.json, "
            "speed.json.", ""]
    return "\n".join(out)
