"""results/corpus.md as bench.corpus_index.report writes it: targets judged from the numbers,
and a build that was tried and reverted shown beside the kept one, not in its place."""
from bench.corpus_index import report


def _result(vs_embed: float, p95: float, tried=None) -> dict:
    build = {"model": "minilm-l6", "sentences": 1000, "occurrences": 20000, "layers": 7,
             "rows": 140000, "seconds": 600.0, "finish_s": 300.0, "bytes": 2**30,
             "bytes_per_row": 1177.0, "embed_per_s": 150.0, "embed_write_s": 300.0,
             "embed_write_vs_embed": 0.95, "embed_sample": 300, "build_per_s": 1.7,
             "vs_embed": vs_embed, "ann_index": "type IVF_SQ"}
    if tried:
        build["tried"] = tried
    return {"machine": "x86_64, 2 CPU cores", "build": build,
            "queries": {"queries": 200, "p50_ms": 20.0, "p50_ci": [18.0, 22.0],
                        "p95_ms": p95, "p95_ci": [p95 - 5, p95 + 5], "recall_at_10": 0.98,
                        "recall_definition": "distance", "recall_ci": [0.97, 0.99]}}


def _row(text: str, starts: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("| " + starts))


def test_targets_are_judged_from_the_numbers():
    good = report(_result(vs_embed=0.95, p95=40.0))
    bad = report(_result(vs_embed=0.40, p95=70.0))
    assert _row(good, "the whole build").endswith("meets target |")
    assert _row(bad, "the whole build").endswith("MISSES target |")
    assert _row(good, "neighbour query").endswith("meets target |")
    assert _row(bad, "neighbour query").endswith("MISSES target |")
    assert "## Misses, and why" in bad and "## Misses, and why" not in good


def test_a_tried_build_is_its_own_row_and_the_kept_build_stays_judged():
    tried = [{"when": "2026-11-26 13:29 UTC", "what": "k-means on 64 samples a partition",
              "vs_embed": 0.40, "seconds": 792.0, "finish_s": 378.0}]
    text = report(_result(vs_embed=0.37, p95=70.0, tried=tried))
    row = _row(text, "the same, a build tried on 2026-11-26 13:29 UTC")
    assert "0.40× (13.2 min, indexes 6.3 min)" in row and "(reported)" in row
    assert "0.37×" in _row(text, "the whole build")
    assert "tried on" not in report(_result(vs_embed=0.37, p95=70.0))
