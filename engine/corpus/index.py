"""`ctxlens index`: every word occurrence of a corpus, at chosen layers, in a LanceDB database.

Layout of an index folder:
  manifest.json          model, pooling, corpus hash, layers, counts, versions (MANIFEST_SCHEMA)
  db/sentences.lance     sentence_id, text (written whole before any vector)
  db/layer_<L>.lance     one table per chosen layer L: sentence_id, position, layer, word, key
                         (lower-cased word), vector (float16), one row per word, each with its
                         own ANN index

Why LanceDB: an embedded, on-disk, Arrow-based store with filters pushed into its ANN search
and atomic appends. Each commit (`table.add`) is all of one batch of sentences (the local
engine's blocks, in sentence order; Ray's actors write their own batches as they finish, in any
order), so the sentence ids in a table are the record of what is done: a killed run loses at
most the batches being written, never duplicates one; a kill between the layer tables' commits
of a batch is undone by removing the sentences that not every layer table holds. (FAISS +
Parquet would need our own bookkeeping for both; results/corpus.md compares them.)

Why a table per layer (format 2): a query always asks for one layer, and an ANN index over one
layer's vectors is a seventh of the size: format 1 kept every layer in one table under one IVF
index, and on 2 cores training and filling that index (1,011 partitions over 8.1M vectors) took
18.5 of the 23.6 minutes of a Brown build, and a query's partitions held every layer's rows.
"""
from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import numpy as np

from engine.corpus import sources
from engine.corpus.embed import chosen_layers, embed_rows
from engine.corpus.manifest import MANIFEST_SCHEMA, Manifest, package_versions
from engine.corpus.tables import add_rows, connect_db, layer_table, schema
from engine.errors import EngineError

SENT = "sentences"
COMMIT_SENTENCES = 2048          # sentences per atomic commit: the most a kill can cost
ANN_MIN_ROWS = 50_000            # below this, exact search is fast enough and always right
# ANN search: k x REFINE candidates re-ranked exactly. Each is a random read of a full vector:
# with the page cache dropped, 120 Brown queries took p95 166 ms at 10 and 84 ms at 4, with the
# same recall@10 (0.991 by distance: the 8-bit codes already rank well)
REFINE = 4


def probes_for(partitions: int) -> int:
    """Partitions an ANN query reads: one in 36, at least 4. The first touch of a partition
    reads it from disk, so probes set the cold tail. Brown's layer tables (144 partitions then),
    200 queries, the page cache dropped first: 16 probes p50/p95 40.6/144.3 ms, recall@10 by
    distance 0.993; 9: 37.0/89.8 ms, 0.988; 6: 34.4/69.7 ms, 0.983 [0.971, 0.992] (target
    0.95). Chosen on 200 other queries (seed 1, not the bench's; 2026-11-26): 6 probes p95
    83.2 ms, recall 0.986; 4: 62.7 ms, 0.980; 3: 55.7 ms, 0.975 (no probe count reaches 50 ms
    cold; 4 keeps recall near 6's)."""
    return max(4, -(-partitions // 36))


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _connect(folder: Path):
    return connect_db(folder / "db")


def _tables(db) -> set[str]:
    try:
        names = db.list_tables()
        return set(getattr(names, "tables", names))
    except AttributeError:                           # older lancedb
        return set(db.table_names())


def indexed_sentences(table) -> np.ndarray:
    """The sentence ids a layer table holds rows for (sorted, unique)."""
    if table.count_rows() == 0:
        return np.zeros(0, np.int64)
    ids = table.search().select(["sentence_id"]).limit(None).to_arrow()["sentence_id"]
    return np.unique(ids.to_numpy())


def _drop_partial_files(folder: Path) -> None:
    """A killed `add` leaves its half-written data file (never committed) behind."""
    for f in (folder / "db").glob("layer_*.lance/data/.tmp*"):
        f.unlink(missing_ok=True)


def align_tables(tables: dict) -> np.ndarray:
    """The sentences every layer table holds. A run killed between the layer tables' commits
    of one batch left some tables holding sentences others lack: those rows go (and come back
    with the sentence). Returns the sentence ids that are done."""
    held = {layer: indexed_sentences(t) for layer, t in tables.items()}
    done = (functools.reduce(lambda a, b: np.intersect1d(a, b, assume_unique=True),
                             held.values()) if held else np.zeros(0, np.int64))
    for layer, t in tables.items():
        extra = np.setdiff1d(held[layer], done, assume_unique=True)
        if len(extra):
            t.delete(f"sentence_id IN ({', '.join(str(int(i)) for i in extra)})")
    return done


def _engine_error(err: BaseException) -> EngineError | None:
    """The EngineError an actor raised, if that is what `err` wraps (Ray hands it back as a
    RayTaskError holding it as its cause)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, EngineError):
            return err
        seen.add(id(err))
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__
    return None


def _disk_full(err: BaseException) -> bool:
    return (getattr(err, "errno", None) == errno.ENOSPC or "No space left" in str(err)
            or "os error 28" in str(err))


LOCK = ".build.lock"


@contextmanager
def _build_lock(folder: Path):
    """One build at a time in a folder: a second (another browser session, a terminal) would
    count the first's half-committed batch as a killed run's and delete it (align_tables), and
    drop its data files in flight. flock: the kernel frees it when the holder dies, so a killed
    run leaves nothing to clean up."""
    import fcntl

    with open(folder / LOCK, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EngineError(f"a ctxlens build is writing {folder} now: wait for it to end "
                              "(or stop it) and try again") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _clear(folder: Path) -> None:
    """Everything in the folder but the lock held while clearing it."""
    for child in folder.iterdir():
        if child.name != LOCK:
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def older_format(folder: Path) -> str | None:
    """The format of a ctxlens index in `folder` that this version no longer reads, else None."""
    try:
        schema = json.loads((folder / "manifest.json").read_text()).get("schema")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(schema, str) and schema.startswith("ctxlens-index/") and \
            schema != MANIFEST_SCHEMA:
        return schema
    return None


def _check_same(old: Manifest, new: Manifest, folder: Path) -> None:
    for name in ("model", "pooling", "corpus_hash", "layers"):
        if getattr(old, name) != getattr(new, name):
            raise EngineError(f"{folder} holds an index with another {name} "
                              f"({getattr(old, name)!r}, not {getattr(new, name)!r}): choose "
                              "another --output or delete it")


def _write_local(eng, model_id: str, todo: list[int], sentences, layers, pool: str,
                 batch_size: int, commit_sentences: int, tables: dict, dim: int,
                 advance) -> None:
    """The local engine: blocks of `commit_sentences` in sentence order. One writer thread:
    block n is written while block n+1 is embedded (LanceDB writes outside the interpreter
    lock), one write at a time and in order; progress moves when a write is done."""
    def commit(rows: dict) -> float:
        add_rows(tables, rows, layers, dim)
        return time.perf_counter()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-writer") as writer:
        pending = None
        for lo in range(0, len(todo), commit_sentences):
            ids = todo[lo:lo + commit_sentences]
            rows = embed_rows(eng, model_id, ids, [sentences[i] for i in ids], layers, pool,
                              batch_size)
            if pending is not None:
                advance(pending[1], pending[0].result())   # a write's error is raised here
            pending = (writer.submit(commit, rows), len(ids))
        if pending is not None:
            advance(pending[1], pending[0].result())


def build(model_id: str, src: str, out: str | Path, layers: str = "all", pool: str = "mean",
          engine_kind: str = "local", batch_size: int = 32, device: str = "auto",
          dtype: str = "float32", ray_address: str | None = None, ray_workers: int = 2,
          commit_sentences: int = COMMIT_SENTENCES, progress: bool = True,
          engine=None, on_progress=None, replace_older: bool = False,
          on_corpus=None) -> Manifest:
    """Embed every word of the corpus at the chosen layers into the index at `out`, resuming
    where a previous run stopped; returns the final manifest. on_progress(done, total): as the
    embedding starts and after each commit (sentences); on_corpus(corpus): once the corpus is
    read, before the model loads (the CLI's notes on its text). `replace_older`: an index of an
    older format in `out` is built again (folders the app owns), not refused in one line."""
    from engine.api import Engine

    folder = _checked_output(out, engine_kind, batch_size, commit_sentences, ray_workers)
    corpus = sources.load(src, progress=progress)
    if on_corpus is not None:
        on_corpus(corpus)
    eng = engine or Engine(device=device, dtype=dtype, cache_size=0)
    manifest = _planned_manifest(eng, model_id, corpus, layers, pool, progress)
    chosen, n_sentences = manifest.layers, len(corpus.sentences)
    folder.mkdir(parents=True, exist_ok=True)
    with _build_lock(folder):
        built = _resume(folder, manifest, replace_older, progress)
        if built is not None:
            return built
        db = _connect(folder)
        tables, done = _open_tables(db, folder, corpus.sentences, chosen, manifest.dim)
        todo = np.setdiff1d(np.arange(n_sentences), done).tolist()
        run = _new_run(manifest, engine_kind, todo[0] if todo else n_sentences, len(done))
        manifest.write(folder)
        t0 = time.perf_counter()
        from tqdm import tqdm

        before = len(done)
        written = [before]      # counted here: a disabled tqdm (the app's builds) counts none
        with tqdm(total=n_sentences, initial=before, unit="sent",
                  desc=f"index {model_id}", disable=not progress, mininterval=1.0) as bar:
            def advance(n_sent: int, at: float | None = None) -> None:
                """`n_sent` more sentences written (at perf_counter `at`, if not now); progress
                moves in the calling thread, the one the app's progress bar belongs to."""
                bar.update(n_sent)
                written[0] += n_sent
                seconds = round((at or time.perf_counter()) - t0, 2)
                # from the first block's worth of sentences on, the build runs at its steady rate,
                # without the start-up (for Ray: the cluster and one model per actor); the trace
                # of every commit lets a benchmark fit that rate instead of reading two points
                run.setdefault("progress", []).append([seconds, written[0] - before])
                if written[0] - before >= min(commit_sentences, len(todo)):
                    run.setdefault("first_block", {"seconds": seconds,
                                                   "sentences": written[0] - before})
                if on_progress is not None:           # the app's progress bar
                    on_progress(written[0], n_sentences)

            if on_progress is not None:       # where this run starts: a bar can time from here
                on_progress(before, n_sentences)
            try:
                if engine_kind == "local":
                    _write_local(eng, model_id, todo, corpus.sentences, chosen, pool, batch_size,
                                 commit_sentences, tables, manifest.dim, advance)
                else:
                    from engine.corpus import ray_embed

                    for n_sent in ray_embed.write(model_id, todo, corpus.sentences, chosen, pool,
                                                  batch_size, device, dtype, ray_address,
                                                  ray_workers, commit_sentences, folder / "db",
                                                  manifest.dim):
                        advance(n_sent)
            except Exception as err:  # noqa: BLE001 - lance (or an actor, wrapped by Ray)
                said = _write_error(err, folder, written[0], n_sentences)
                if said is not None:
                    raise said from None
                raise
            if engine_kind == "ray":
                # the actors wrote to the tables: open them again at their latest version
                tables = {layer: db.open_table(layer_table(layer)) for layer in chosen}
        run["seconds"] = round(time.perf_counter() - t0, 1)
        run["sentences"] = len(todo)
        finish(folder, manifest, tables, progress)
        return manifest


def _checked_output(out: str | Path, engine_kind: str, batch_size: int, commit_sentences: int,
                    ray_workers: int) -> Path:
    """The index folder, once the build's options are known to be usable."""
    if engine_kind not in ("local", "ray"):
        raise EngineError(f"--engine is local or ray (got {engine_kind!r})")
    if batch_size < 1 or commit_sentences < 1:
        raise EngineError("--batch-size must be at least 1")
    if ray_workers < 1:
        raise EngineError(f"--workers must be at least 1 (got {ray_workers})")
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise EngineError(f"--output {folder} is a file; give a folder for the index")
    return folder


def _planned_manifest(eng, model_id: str, corpus, layers: str, pool: str,
                      progress: bool) -> Manifest:
    """What the index will hold: the model's chosen layers, named as the engine names them
    (from one sentence through the model), and the corpus they are read from."""
    info = eng.adapter(model_id, progress=progress).info
    chosen = chosen_layers(layers, info.n_layers + 1)
    probe = eng.encode(model_id, [corpus.sentences[0]])[0]
    names = list(probe.layer_names)
    return Manifest(MANIFEST_SCHEMA, model_id, info.family, pool, corpus.name,
                    corpus.digest, len(corpus.sentences), chosen,
                    [names[i] for i in chosen], info.dim, skipped_lines=len(corpus.skipped),
                    versions=package_versions())


def _resume(folder: Path, manifest: Manifest, replace_older: bool,
            progress: bool) -> Manifest | None:
    """The complete index already in `folder` (nothing to build), else None with `manifest`
    written there: an older format's index cleared first (replace_older), a stopped build of
    the same index continued (its runs kept), another index refused."""
    old_schema = older_format(folder)
    if old_schema and replace_older:
        if progress:
            print(f"ctxlens: {folder} holds a {old_schema} index, which this ctxlens does "
                  f"not read; building it again ({MANIFEST_SCHEMA})", flush=True)
        _clear(folder)
    if (folder / "manifest.json").exists():
        old = Manifest.read(folder)
        _check_same(old, manifest, folder)
        if old.complete:
            return old
        manifest.build = old.build
    manifest.write(folder)
    return None


def _open_tables(db, folder: Path, sentences, layers, dim: int) -> tuple[dict, np.ndarray]:
    """The sentence table, written where missing or short, and a table per layer; a stopped
    build's half-written files dropped and its tables cut back to the sentences every layer
    holds. -> ({layer: table}, the sentence ids already indexed)."""
    if SENT not in _tables(db) or db.open_table(SENT).count_rows() != len(sentences):
        import pyarrow as pa

        db.create_table(SENT, pa.table({"sentence_id": np.arange(len(sentences)),
                                        "text": list(sentences)}), mode="overwrite")
    _drop_partial_files(folder)
    have = _tables(db)
    tables = {layer: (db.open_table(layer_table(layer)) if layer_table(layer) in have
                      else db.create_table(layer_table(layer), schema=schema(dim)))
              for layer in layers}
    return tables, align_tables(tables)


def _new_run(manifest: Manifest, engine_kind: str, first: int, n_done: int) -> dict:
    """This run's record in the manifest's build runs (a resumed build lists each run), from
    sentence `first`, with `n_done` sentences indexed before it."""
    runs = manifest.build.setdefault("runs", [])
    runs.append({"engine": engine_kind, "started_at_sentence": first,
                 "sentences_indexed_before": n_done,
                 "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
    return runs[-1]


def _write_error(err: BaseException, folder: Path, written: int,
                 total: int) -> EngineError | None:
    """A write's failure in one line where a user can act on it (None: not one of those)."""
    said = _engine_error(err)
    if said is not None:  # an actor's one-line error, inside Ray's wrappers
        return EngineError(str(said))
    if _disk_full(err):   # reports a full disk its way
        return EngineError(
            f"the disk under {folder} is full: {written:,} of {total:,} sentences are "
            "indexed and kept; free some space and run the same command again to continue")
    return None


# layer tables indexed at once: one IVF build keeps about 1.5 of 2 cores busy (LanceDB's
# k-means, assignment and RaBitQ coding are not all parallel), two at once about 1.85; on two
# Brown layer tables (2026-11-27) 31 s one after the other, 26 s side by side. Each build holds
# about 2 GB for a Brown layer, so not one per layer
INDEX_BUILDS_AT_ONCE = 2


def finish(folder: Path, manifest: Manifest, tables: dict, progress: bool = True) -> None:
    """Per layer table: compact the fragments, build the ANN and scalar indexes; count; mark
    the index complete."""
    t0 = time.perf_counter()
    manifest.rows_per_layer, manifest.ann_index = {}, {}
    jobs = [(layer, table, n, len(tables), progress)
            for n, (layer, table) in enumerate(sorted(tables.items()))]
    with warnings.catch_warnings():
        # old versions go: the index is written by this one process, no reader is open yet
        # (the filter is process-wide, so it covers the worker threads too)
        warnings.simplefilter("ignore")
        with ThreadPoolExecutor(max_workers=min(INDEX_BUILDS_AT_ONCE, len(jobs) or 1),
                                thread_name_prefix="index-build") as pool:
            for layer, rows, ann in pool.map(lambda job: _index_layer(*job), jobs):
                manifest.rows_per_layer[str(layer)] = rows
                manifest.ann_index = ann or manifest.ann_index
    if not manifest.ann_index:
        manifest.ann_index = {"type": "none (exact search)", "distance": "cosine"}
    manifest.rows = sum(manifest.rows_per_layer.values())
    manifest.build["index_seconds"] = round(time.perf_counter() - t0, 1)
    manifest.bytes_on_disk = folder_bytes(folder / "db")
    manifest.complete = True
    manifest.write(folder)


def _index_layer(layer: int, table, n: int, total: int, progress: bool
                 ) -> tuple[int, int, dict | None]:
    """One layer table: compacted, counted, its ANN index (when it is large enough) and its
    scalar index built. Returns (layer, rows, the ANN index's manifest entry or None)."""
    from lancedb.index import BTree, IvfRq

    table.optimize(cleanup_older_than=timedelta(0))
    rows = table.count_rows()
    ann = None
    if rows >= ANN_MIN_ROWS:
        # IVF with RaBitQ codes (1 bit a dimension: 48 bytes for 384 dims, against 384 for
        # 8-bit scalar quantisation), re-ranked exactly (REFINE). A cold query reads its
        # probed partitions from disk, so smaller codes cut the tail: one Brown layer table
        # (2026-11-26, 200 seed-1 queries, page cache dropped, two builds each) IVF_SQ p95
        # 19-26 ms, recall@10 0.991-0.994, built in 31-36 s; IVF_RQ 10-11 ms, 0.982-0.987,
        # 29-31 s (whole Brown index: p95 31.8 against 16.1 ms; results/corpus.md).
        # IVF-PQ trains its codebooks for minutes a layer on 2 cores. Partitions: ~18k
        # vectors each (64 for a Brown layer). Filling an IVF index assigns every vector
        # to its partition, and LanceDB's assignment costs about 0.1 s a partition per
        # million vectors here (one Brown layer, 2026-11-27: 15 s at 64 partitions, 8.5 s at
        # 16 with k-means cut to 2 iterations; k-means was 2 s). Chosen on the whole Brown index
        # with 200 seed-1 queries (not the bench's), page cache dropped, one build each
        # (2026-11-27): 144 partitions about 235 s for 7 layers (33.5 s one layer), p95
        # 19.0 ms, recall@10 0.980; 64: 103 s, 15.9 ms, 0.985; 32: 71 s (k-means cut to 64
        # samples and 10 iterations), 21.0 ms, 0.983. The 4 probes then read 1/16 of a
        # table; RaBitQ codes keep that cheap cold. k-means keeps LanceDB's defaults (256
        # samples a partition, 50 iterations): 64 samples and 10 iterations saved 12 s
        # (14.8 ms, 0.979).
        partitions = int(max(16, min(1024, rows // 18000)))
        if progress:
            print(f"ctxlens: building the ANN index of layer {layer} ({n + 1} of "
                  f"{total}; IVF_RQ, {partitions} partitions, {rows:,} vectors) ...",
                  flush=True)
        table.create_index("vector", config=IvfRq(distance_type="cosine",
                                                  num_partitions=partitions), replace=True)
        ann = {"type": "IVF_RQ", "distance": "cosine", "num_partitions": partitions,
               "nprobes": probes_for(partitions), "refine_factor": REFINE,
               "tables": "one per layer"}
    table.create_index("key", config=BTree(), replace=True)
    return layer, rows, ann


def remove(folder: Path) -> None:
    """Delete an index folder: only one that holds a manifest (of any ctxlens format; never an
    arbitrary folder), and never while a build writes it."""
    folder = Path(folder)
    if not (folder / "manifest.json").is_file():
        raise EngineError(f"{folder} is not a ctxlens index (no manifest.json)")
    with _build_lock(folder):
        # out of the way first, under the lock: a build started while the files go then finds
        # no folder (and makes a new one) instead of a half-deleted one with a free lock file
        gone = folder.with_name(f".{folder.name}.deleting-{os.getpid()}")
        folder.rename(gone)
    shutil.rmtree(gone)
