"""`python -m bench` (make bench): every reproduction and measurement, written to results/.

    python -m bench [--quick]
                    [--only layers|cloze|speed|grid|bank|embed|app|bad-input|soak|corpus|
                            attribution|attribution-memory|reports]
                    [--models id,id] [--fresh]
                    [--mix-layer-norm]

Per-model results are cached in results/tmp/ (ignored by git) keyed by the workload, so an
interrupted run resumes; --fresh recomputes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
CACHE = RESULTS / "tmp"

# What a cached per-model result was computed with beyond the workload: raise PROTOCOL when
# the analyses change (2: running-text input, Ethayarajh's raw-vector intra-sentence
# similarity, bootstrap intervals), so an older cache is recomputed rather than misread.
PROTOCOL = 2

# full run vs --quick (a few minutes, for trying the pipeline). The full run reads every lemma
# the sense benchmark has (319; half of them held out): sense vectors cost seconds a model, and
# the 120-lemma sample used until 2026-11-26 left intervals of about +-0.08 on a layer contrast.
SIZES = {"full": {"heldout": 400, "pos_train": 300, "lemmas": None},
         "quick": {"heldout": 60, "pos_train": 60, "lemmas": 30}}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def available_models(only: list[str] | None = None) -> list[tuple[str, str]]:
    """(model id, family) of every registry model usable offline here."""
    from engine.registry import availability, load_registry

    out = []
    for mid, entry in load_registry().items():
        if only and mid not in only:
            continue
        if availability(entry) in ("bundled", "installed"):
            out.append((mid, entry.family))
    return out


def build_workload(size: str):
    from bench.corpus import load_brown, spread
    from bench.layers import Workload, sample_lemmas
    from bench.analysis.wordnet import benchmark_examples

    from engine.errors import EngineError

    n = SIZES[size]
    brown = load_brown()
    try:
        examples = benchmark_examples()
    except EngineError as err:  # WordNet missing: the sense benchmark is skipped, not the rest
        log(f"word senses skipped: {err}")
        examples = []
    work = Workload(tuple(spread(brown.heldout, n["heldout"])),
                    tuple(spread(brown.train, n["pos_train"])),
                    sample_lemmas(examples, n["lemmas"]))
    return work, brown.source


def model_stamp(model_id: str) -> str:
    """Newest modification time of the model's files: a retrained model invalidates its cache."""
    from engine.registry import load_registry, local_path

    path = local_path(load_registry()[model_id])
    if path is None or not path.exists():
        return ""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return str(max((p.stat().st_mtime for p in files), default=0.0))


def run_layers(models: list[tuple[str, str]], size: str, fresh: bool,
               mix_layer_norm: bool = False, partial: bool = False) -> None:
    """partial: only some models were asked for (--models); the others keep their stored
    results in results/layers.json."""
    from bench.layers import run_model
    from bench.meta import meta
    from engine.api import Engine, EngineError

    work, source = build_workload(size)
    signature = {"size": size, **SIZES[size], "source": source, "protocol": PROTOCOL,
                 "mix_layer_norm": mix_layer_norm}
    CACHE.mkdir(parents=True, exist_ok=True)
    results, failures = [], []
    for mid, family in models:
        cached = CACHE / f"layers_{mid}.json"
        signature = {**signature, "model_stamp": model_stamp(mid)}
        if cached.exists() and not fresh:
            r = json.loads(cached.read_text())
            if r.get("signature") == signature:
                log(f"{mid}: cached ({cached.relative_to(ROOT)})")
                results.append(r)
                continue
        log(f"{mid}: encoding {len(work.heldout) + len(work.pos_train) + len(work.senses)} "
            "sentences")
        engine = Engine(cache_size=0)
        try:
            engine.adapter(mid, progress=False)
            names = engine.encode(mid, ["The bank."])[0].layer_names
            r = run_model(mid, family, names,
                          lambda texts: engine.encode_words(mid, texts, batch_size=32),
                          work, log=log, mix_layer_norm=mix_layer_norm)
        except EngineError as err:
            log(f"{mid}: skipped: {err}")
            failures.append((mid, str(err)))
            continue
        finally:
            del engine
        r["signature"] = signature
        r["meta"] = meta("python -m bench " + " ".join(sys.argv[1:]))
        cached.write_text(json.dumps(r))
        results.append(r)
    if not results:
        log("no model could be analysed")
        return
    for r in results:  # what the reports need to be rebuilt from layers.json alone
        r["source"], r["n_sense_examples"] = source, len(work.senses)
    if partial:
        from bench.store import merge

        results = merge(RESULTS / "layers.json", results, lambda r: r["model"])
    (RESULTS / "layers.json").write_text(json.dumps(results, indent=1))
    write_layer_reports(results)
    (CACHE / "failures.json").write_text(json.dumps(failures))


def write_layer_reports(results: list[dict]) -> None:
    """results/{geometry,pos,senses}.{md,png} from per-model results (layers.json)."""
    from bench import plots, report

    source = results[0]["source"]
    plots.geometry_plot(results, RESULTS / "geometry.png")
    (RESULTS / "geometry.md").write_text(report.geometry_report(results, source,
                                                                "geometry.png"))
    plots.per_layer_plot(results, lambda r: [("", r["pos"]["accuracy"],
                                              r["pos"].get("ci", {}).get("accuracy"))],
                         "POS linear probe accuracy per layer (Brown, held-out documents)",
                         "accuracy", RESULTS / "pos.png",
                         {"majority class": results[0]["pos"]["majority_baseline"]})
    (RESULTS / "pos.md").write_text(report.pos_report(results, source, "pos.png"))
    if all("senses" in r for r in results):
        _write_senses(results, results[0]["n_sense_examples"])


def _write_senses(results: list[dict], n_examples: int) -> None:
    from bench import plots, report

    def series(r: dict) -> list:
        s = r["senses"]
        return [(f" {k}", s[k], s.get("ci", {}).get(k)) for k in ("centroid", "pairs")]

    plots.per_layer_plot(results, series,
                         "Word senses per layer (WordNet examples, held-out lemmas)",
                         "accuracy", RESULTS / "senses.png",
                         {"pairs chance": 0.5, "centroid chance": results[0]["senses"]["chance"]})
    (RESULTS / "senses.md").write_text(report.senses_report(results, n_examples, "senses.png"))


def rebuild_reports() -> None:
    from bench.speed_report import speed_report

    layers, speed = RESULTS / "layers.json", RESULTS / "speed.json"
    if layers.exists():
        write_layer_reports(json.loads(layers.read_text()))
    if speed.exists():
        (RESULTS / "speed.md").write_text(speed_report(json.loads(speed.read_text())))
    if (RESULTS / "attribution.json").exists():
        from bench.attribution import report

        (RESULTS / "attribution.md").write_text(report())


def run_attribution(models: list[str] | None, quick: bool) -> None:
    """results/attribution.json: in a run over every model the speeds and IG's memory on a
    long sentence first, then the faithfulness across held-out sentences model by model
    (only `models` when given), each written as it finishes, so an interrupted run keeps
    what it measured."""
    from bench import attribution, attribution_speed
    from bench.meta import meta

    now = meta("python -m bench " + " ".join(sys.argv[1:]))
    if models is None:
        speed = attribution_speed.run_speed(quick=quick, log=log)
        attribution.write(RESULTS, speed={**speed, "meta": now})
        run_attribution_memory(quick, now)
    for mid, *_ in attribution.MODELS:
        if models and mid not in models:
            continue
        faith = attribution.run_faithfulness([mid], quick=quick, log=log)
        attribution.write(RESULTS, faithfulness=[{**r, "meta": now} for r in faith])
        (RESULTS / "attribution.md").write_text(attribution.report())


def run_attribution_memory(quick: bool, now: dict | None = None) -> None:
    """results/attribution.json's memory part: IG's peak on a 127-word sentence against a
    plain forward's (bench/attribution_speed.py run_memory), and attribution.md."""
    from bench import attribution, attribution_speed
    from bench.meta import meta

    memory = attribution_speed.run_memory(quick=quick, log=log)
    attribution.write(RESULTS, memory={**memory, "quick": quick, "meta": now or meta(
        "python -m bench " + " ".join(sys.argv[1:]))})
    (RESULTS / "attribution.md").write_text(attribution.report())


def write_readme() -> None:
    """results/README.md: what each report is and how to regenerate it. When, where and with
    what each part was measured is in its JSON's `meta` (bench/meta.py), not in prose."""
    from bench.summary import readme

    (RESULTS / "README.md").write_text(readme(RESULTS))


def stamp(name: str, parts: bool = False) -> None:
    """Give what this run wrote to results/NAME its `meta` (entries kept from earlier runs
    keep theirs)."""
    from bench.meta import stamp as _stamp

    _stamp(RESULTS / name, "python -m bench " + " ".join(sys.argv[1:]), parts=parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs (minutes)")
    ap.add_argument("--only", choices=("layers", "cloze", "speed", "grid", "bank", "embed",
                                       "app", "bad-input", "soak", "corpus", "attribution",
                                       "attribution-memory", "reports"),
                    help="run one part (grid, bank, embed, app: only the layers-side-by-side, "
                    "the bank-preset, the embedding or the app-start timings, merged into "
                    "results/speed.json; attribution-memory: only IG's peak memory on a long "
                    "sentence, into results/attribution.json; reports: rebuild the markdown and plots from "
                    "results/layers.json and speed.json)")
    ap.add_argument("--models", help="comma-separated model ids (default: all available)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached per-model results")
    ap.add_argument("--mix-layer-norm", action="store_true",
                    help="the sense benchmark's scalar mixes read layer-normed layers (ELMo's "
                    "do_layer_norm); recorded as mix_layer_norm in each result")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    size = "quick" if args.quick else "full"
    start = time.perf_counter()
    RESULTS.mkdir(exist_ok=True)
    models = available_models(args.models.split(",") if args.models else None)
    log(f"models: {', '.join(m for m, _ in models) or 'none'}")
    if args.only in (None, "layers"):
        run_layers(models, size, args.fresh, args.mix_layer_norm, partial=bool(args.models))
    if args.only == "reports":  # rewrite, measure nothing
        rebuild_reports()
        write_readme()
        return 0
    if args.only in (None, "cloze"):
        from bench import cloze

        cloze.write(cloze.run([m for m, _ in models], log=log), RESULTS,
                    partial=bool(args.models))
        stamp("cloze.json")
    if args.only in (None, "speed"):
        from bench.speed import run_speed

        run_speed(RESULTS, quick=args.quick, log=log)
        stamp("speed.json", parts=True)
    if args.only in ("grid", "bank", "embed", "app"):
        from bench.speed import run_part_only

        run_part_only(RESULTS, args.only, log=log)
        stamp("speed.json", parts=True)
    if args.only in (None, "attribution"):
        run_attribution(args.models.split(",") if args.models else None, args.quick)
    if args.only == "attribution-memory":
        run_attribution_memory(args.quick)
    if args.only in (None, "bad-input"):
        from bench import bad_input

        log("bad input in the browser (the whole app, bundled models)")
        bad_input.main()
        stamp("bad_input.json")
    if args.only in (None, "soak"):
        from bench import soak

        log("soak: concurrent browser sessions")
        soak.main(["--minutes", "1" if args.quick else "5"])
        stamp("soak.json")
    if args.only in (None, "corpus"):
        from bench import corpus_index

        log("corpus mode: Brown at every layer (about 35 minutes on 2 cores)")
        corpus_index.main(["--sentences", "3000"] if args.quick else [])
        stamp("corpus.json")
    write_readme()
    log(f"done in {time.perf_counter() - start:.0f} s; see results/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
