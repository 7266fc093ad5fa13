"""`ctxlens index --engine ray`: the same embedding function (engine.corpus.embed.embed_rows)
run by Ray Data: `from_items` -> `map_batches` with a pool of actors, one model per actor (a
GPU each when the cluster has GPUs). Each actor writes its own rows into the index's layer
tables (Lance commits a table's next version by a rename that fails if another writer got
there first, then retries the append on top of it), and only the
sentence ids it wrote come back to the driver, which shows progress. Ray does the scheduling;
nothing here queues or pools work itself.

Why the actors write: with the rows streamed back to one writing process (until 2026-11-27),
that process spent about as much CPU as an actor converting, re-ordering and writing them, on
the same cores: 2 actors ran at 0.70-0.80x of the local engine per core (6,000 Brown sentences,
2 cores); writing in the actors, 0.94-0.96x in a prototype on the same sentences.

A local cluster starts on demand (`ray.init(num_cpus=workers)`); `--ray-address` joins a
running one (`ray start --head` on the head node, `ray start --address=HEAD:6379` on the
others; see docs/corpus.md). On a real cluster every node must reach the index folder (a shared
file system), since the actors write there.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from engine.errors import EngineError

# Sentences per actor call: one commit per layer table each. On 2 cores (6,000 Brown
# sentences, 2 actors writing, one run each, 2026-11-27) 200 a call ran at 280 sentences/s and
# 500 at 288 once running; 500 makes 2.5 times fewer fragments to compact
ACTOR_SENTENCES = 500

# what an actor needs from the driver's environment (model folders, offline switches)
PASSED_ENV = ("CTXLENS_MODEL_DIRS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")


class Embedder:
    """One per Ray actor: loads the model and opens the layer tables once, then embeds
    batches of sentences and appends their rows; returns the batch's sentence ids."""

    def __init__(self, model_id: str, layers: Sequence[int], pool: str, batch_size: int,
                 device: str, dtype: str, db: str, dim: int, vector_dtype: str):
        from engine.api import Engine
        from engine.corpus import tables

        self.model_id, self.layers, self.pool = model_id, list(layers), pool
        self.batch_size, self.dim, self.vector_dtype = batch_size, dim, vector_dtype
        self.engine = Engine(device=device, dtype=dtype, cache_size=0)
        self.engine.adapter(model_id, progress=False)
        conn = tables.connect_db(Path(db))
        self.tables = {layer: conn.open_table(tables.layer_table(layer)) for layer in layers}

    def __call__(self, batch: dict) -> dict:
        from engine.corpus.embed import embed_rows
        from engine.corpus.tables import add_rows

        ids = batch["sentence_id"]
        said = np.full(len(ids), "", dtype=object)
        try:
            rows = embed_rows(self.engine, self.model_id, ids.tolist(),
                              [str(t) for t in batch["text"]], self.layers, self.pool,
                              self.batch_size, np.dtype(self.vector_dtype))
        except EngineError as err:
            # handed back as data: raised, it reaches the driver as a RayTaskError whose
            # cause is Ray's own wrapper and the one-line message only inside its traceback
            said[:] = str(err)
            return {"sentence_id": ids, "error": said}
        add_rows(self.tables, rows, self.layers, self.dim, self.vector_dtype)
        return {"sentence_id": ids, "error": said}


def _reachable(address: str, seconds: float = 5.0) -> None:
    """ray.init(address="host:port") retries for minutes when nothing listens there: a port
    that does not answer is said at once. "auto" and other forms go to Ray as they are."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.removeprefix("[").removesuffix("]")          # "[::1]:6379"
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=seconds).close()
    except OSError as err:
        raise EngineError(f"no Ray cluster answers at {address} ({err.strerror or err}): start "
                          "one there with `ray start --head`, or leave out --ray-address to "
                          "run a local one") from None


def start(address: str | None, workers: int) -> bool:
    """Join or start Ray quietly; True when this call started it (and should stop it)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    common = dict(runtime_env={"env_vars": env}, log_to_driver=False,
                  logging_level=logging.WARNING)
    if address:
        _reachable(address)
        ray.init(address=address, **common)
    else:
        # address="local": a new cluster here, even if an older `ray start` left its address
        # in /tmp/ray (ray.init() would try to join that one)
        ray.init(address="local", num_cpus=workers, include_dashboard=False,
                 object_store_memory=256 * 2**20, **common)
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    return True


def work_order(todo: Sequence[int], sentences: Sequence[str],
               commit_sentences: int) -> list[list[int]]:
    """`todo` cut into commit blocks of consecutive sentence ids, each block ordered shortest
    text first: an actor's batch then holds sentences of about one length, as the local
    engine's sorted block does (a batch of 64 sentences in corpus order is mostly padding).
    Measured (2026-11-27, 6,000 Brown sentences, 2 actors): blocks left in corpus order, each
    actor call then sorted only within itself, ran at 0.49x of the local engine per core (two
    runs) against 0.78x sorted (both when the rows still went back to the driver)."""
    todo = list(todo)
    return [sorted(todo[lo:lo + commit_sentences], key=lambda i: len(sentences[i]))
            for lo in range(0, len(todo), commit_sentences)]


def write(model_id: str, todo: Sequence[int], sentences: Sequence[str], layers: Sequence[int],
          pool: str, batch_size: int, device: str, dtype: str, address: str | None,
          workers: int, commit_sentences: int, db: Path, dim: int,
          vector_dtype: str = "float16") -> Iterator[int]:
    """Embed the `todo` sentences into the layer tables under `db` (created beforehand);
    yields the number of sentences in each batch an actor has written."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    started = start(address, workers)
    try:
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False                # the index command shows its own
        ctx.execution_options.preserve_order = False    # each batch is written where it runs
        gpus = ray.cluster_resources().get("GPU", 0)
        per_actor_gpu = 1 if gpus >= 1 and device in ("auto", "cuda") else 0
        order = work_order(todo, sentences, commit_sentences)
        ds = ray.data.from_items([{"sentence_id": int(i), "text": sentences[i]}
                                  for block in order for i in block])
        ds = ds.map_batches(
            # an actor call is a commit: no more than commit_sentences, as in the local engine
            Embedder, batch_size=max(batch_size, min(ACTOR_SENTENCES, commit_sentences)),
            batch_format="numpy",
            compute=ActorPoolStrategy(size=max(1, workers)),
            num_cpus=0 if per_actor_gpu else 1, num_gpus=per_actor_gpu,
            fn_constructor_kwargs=dict(model_id=model_id, layers=list(layers), pool=pool,
                                       batch_size=batch_size,
                                       device="cuda" if per_actor_gpu else
                                       ("cpu" if device == "auto" else device),
                                       dtype=dtype, db=str(Path(db).resolve()), dim=dim,
                                       vector_dtype=vector_dtype))
        for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
            failed = [str(e) for e in out["error"] if e]
            if failed:
                raise EngineError(failed[0])
            yield len(out["sentence_id"])
    finally:
        if started:
            ray.shutdown()
