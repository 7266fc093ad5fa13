"""results/README.md: what was run, on what, and links to every report."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

REPORTS = (("geometry.md", "Ethayarajh (2019) geometry per layer, invariants"),
           ("senses.md", "Word senses per layer (WordNet 3.0), learned scalar mix"),
           ("pos.md", "POS linear probe per layer (Brown)"),
           ("speed.md", "Speed and memory against the targets"))


def _invariant_line(text: str) -> str:
    passed, failed = text.count("| PASS |"), text.count("| FAIL |")
    return f"invariants: {passed} pass, {failed} fail"


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
        if name == "geometry.md":
            note = f" ({_invariant_line(path.read_text())})"
        if name == "speed.md":
            text = path.read_text()
            note = (f" ({len(re.findall('meets target', text))} meet, "
                    f"{len(re.findall('MISSES target', text))} miss their targets)")
        out.append(f"- [{title}]({name}){note}")
    failures = results / "tmp" / "failures.json"
    if failures.exists():
        for model, err in json.loads(failures.read_text()):
            out.append(f"- model {model} skipped: {err}")
    out += ["", "Plots: geometry.png, senses.png, pos.png. Published values come from "
            "shared/reference-numbers.md (bench/published.py).", ""]
    return "\n".join(out)
