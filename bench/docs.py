"""docs/reproductions.md and docs/performance.md, written from results/*.json (bench/views.py):
the measured numbers of the docs live only in these two files, and only as the JSON has them.
Beside them, results/benchmarks.json: the same views as data for the app's Benchmarks page
(app/benchmark_results.py), which ships without bench/.

    python -m bench.docs            (write them)
    python -m bench.docs --check    (exit 1 when a committed file differs from what it writes)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import views

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HEAD = ("<!-- Written by `python -m bench.docs` from results/*.json; edit bench/views.py or "
        "bench/docs.py, not this file. -->")

PAGES = {
    "reproductions.md": (
        "Reproductions: what the bundled models show",
        "Published findings about contextual embeddings, checked on the models ctxlens "
        "bundles, and the other per-layer and fill-in-the-blank measurements. Every accuracy, "
        "similarity and difference has its 95% interval in brackets; a finding counts as "
        "reproduced only when the interval of the claimed difference excludes 0 on the claimed "
        "side. The published number each one echoes is beside it (bench/published.py). The "
        "app's Benchmarks page draws the same results with charts.",
        ("summary", "senses", "geometry", "pos", "cloze", "elmo_distill", "attribution",
         "head_pruning", "causal_tracing")),
    "performance.md": (
        "Performance: speed, memory, many users, bad input",
        "How fast ctxlens is against its targets, on a GPU, in corpus mode, under many "
        "sessions at once, and what a user sees after bad input.",
        ("speed", "attribution_speed", "components_speed", "patching", "gpu", "corpus",
         "soak", "bad_input")),
}
# Each number once: the findings table is in the summary only (the page repeats it in each
# topic's tab); every model's per-layer table is in the full reports.
SKIP_TABLES = {"senses": lambda t: t.title.startswith("Published findings"),
               "pos": lambda t: t.title.startswith("Published findings"),
               "geometry": lambda t: t.title.startswith("Published findings")
               or t.title.endswith("per layer")}
PAGE_DATA = "benchmarks.json"      # app/benchmark_results.py DATA: the Benchmarks page reads it


def page(name: str, results: Path = views.RESULTS) -> str:
    title, intro, keys = PAGES[name]
    out = [HEAD, "", f"# {title}", "", intro, ""]
    for key in keys:
        topic = views.BY_KEY[key]
        if not (results / topic.data[0]).exists():
            continue
        v = views.view(key, results)
        out += [f"## {topic.title}", "", topic.what, ""]
        report = results / f"{key}.md"
        if report.exists():
            out += [f"Full report, with the method: [results/{key}.md](../results/{key}.md). "
                    f"Measured again by `{topic.command}`.", ""]
        skip = SKIP_TABLES.get(key, lambda t: False)
        for table in v.tables:
            if not skip(table):
                out += [views.markdown(table), ""]
        if len(v.measured) == 1:
            out += [f"Measured {v.measured[0]}.", ""]
        elif v.measured:
            out += ["Measured:", ""] + [f"- {m}" for m in v.measured] + [""]
    return "\n".join(out).rstrip() + "\n"


def outputs() -> dict[Path, str]:
    """Each file this writes and its text."""
    out = {DOCS / name: page(name) for name in PAGES}
    out[views.RESULTS / PAGE_DATA] = views.page_json()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.docs", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if a committed file differs")
    args = ap.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale: {', '.join(stale)} (run python -m bench.docs)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
