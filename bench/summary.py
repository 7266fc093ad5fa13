"""results/README.md: what each report is, the JSON it is written from, and the command that
measures it again. No numbers and no run log: when, where and with what each entry was
measured is in its JSON's `meta` (bench/meta.py).

    python -m bench.summary        (also written by `python -m bench`)
"""
from __future__ import annotations

from pathlib import Path

from bench.views import RESULTS, TOPICS

REPORTS = {"geometry": "How contextual is each layer? Ethayarajh (2019) geometry, invariants",
           "senses": "Word senses per layer (WordNet 3.0), the learned scalar mix",
           "pos": "Part-of-speech linear probe per layer (Brown)",
           "cloze": "Everyday cloze: filling one blank, every family",
           "elmo_distill": "A stronger ELMo offline: distillation candidates",
           "attribution": "Attribution: faithfulness across held-out sentences, attention "
                          "against occlusion, speed",
           "speed": "Speed and memory against the targets",
           "gpu": "GPU batch embedding: the engine against plain Hugging Face",
           "bad_input": "Bad input in the browser: cases and what the user sees",
           "soak": "Soak: concurrent browser sessions",
           "corpus": "Corpus mode: indexing Brown, searching it, LanceDB or FAISS, Ray"}


def readme(results: Path = RESULTS) -> str:
    out = ["# Benchmark results", "",
           "What each report in this folder is and how to make it again. A report is written "
           "from the JSON named beside it, and that JSON records when, on what machine and "
           "with which versions each of its entries was measured (the entry's `meta`). The "
           "app's Benchmarks page and [docs/reproductions.md](../docs/reproductions.md) and "
           "[docs/performance.md](../docs/performance.md) draw the same JSON.", "",
           "## Reports", "",
           "| report | what it is | written from | measure again |", "|---|---|---|---|"]
    for t in TOPICS:
        if t.key not in REPORTS:
            continue
        name = f"{t.key}.md"
        link = f"[{REPORTS[t.key]}]({name})" if (results / name).exists() else \
            f"{REPORTS[t.key]} (not run)"
        data = ", ".join(f"`{d}`" for d in t.data)
        out.append(f"| {link} | {t.what} | {data} | `{t.command}` |")
    out += ["", "## Writing them again without measuring", "",
            "- `python -m bench --only reports`: the geometry, senses, POS and speed reports and "
            "their plots from `layers.json` and `speed.json`, and this file.",
            "- `python -m bench.docs`: docs/reproductions.md and docs/performance.md.",
            "- `make bench` (`python -m bench`) measures everything again on this machine, "
            "writing each part as it finishes; `--only PART` runs one part, `--models id,id` "
            "re-measures some models and keeps the other models' entries with their own `meta`. "
            "`gpu.md` needs a CUDA GPU (`python -m bench.gpu`).", "",
            "## Other files", "",
            "- `geometry.png`, `senses.png`, `pos.png`: the per-layer plots of those reports "
            "(the Benchmarks page draws its own charts from `layers.json`).",
            "- `benchmarks.json`: the Benchmarks page's tables and charts, written with the "
            "docs pages by `python -m bench.docs` (the app ships without bench/).",
            "- `gpu_probes.json`: raw timings of the GPU probes in `lab/gpu_probes/`, quoted in "
            "gpu.md's notes.",
            "- `tmp/`: per-model caches of `make bench` (not in git); `--fresh` ignores them.",
            "", "Published values the reports compare with are in `bench/published.py`.", ""]
    return "\n".join(out)


if __name__ == "__main__":
    (RESULTS / "README.md").write_text(readme())
    print(f"wrote {RESULTS / 'README.md'}")
