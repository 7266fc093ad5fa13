"""`ctxlens index --engine ray`: the same embedding function (engine.corpus.embed.embed_rows)
run by Ray Data: `from_items` -> `map_batches` with a pool of actors, one model per actor (a
GPU each when the cluster has GPUs), results streamed back in input order to the one process
that writes the database. Ray does the scheduling; nothing here queues or pools work itself.

A local cluster starts on demand (`ray.init(num_cpus=workers)`); `--ray-address` joins a
running one (`ray start --head` on the head node, `ray start --address=HEAD:6379` on the
others; see README.md).
"""
from __future__ import annotations

import itertools
import logging
import os
from typing import Iterator, Sequence

import numpy as np

# Sentences per actor call. Each call costs a Ray task and an Arrow block both ways: on 2 cores
# (4,000 Brown sentences, commit blocks of 500) 64 a call ran at 138 sentences/s, 200 at 160,
# 500 at 139 (the pool then waits for the slowest call of a block)
ACTOR_SENTENCES = 200

# what an actor needs from the driver's environment (model folders, offline switches)
PASSED_ENV = ("CTXLENS_MODEL_DIRS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")


class Embedder:
    """One per Ray actor: loads the model once, then embeds batches of sentences. Its rows go
    back as numpy columns. Tried (2026-11-27, 6,000 Brown sentences, alternating runs): each
    call returning the database's Arrow table instead (made in the actor; the driver gathering
    and splitting it with Arrow's take, which is as fast as numpy's here) ran at 0.59 and 0.59x
    of the local engine per core against 0.77 and 0.75x, so the numpy columns stay."""

    def __init__(self, model_id: str, layers: Sequence[int], pool: str, batch_size: int,
                 device: str, dtype: str, vector_dtype: str):
        from engine.api import Engine

        self.model_id, self.layers, self.pool = model_id, list(layers), pool
        self.batch_size, self.vector_dtype = batch_size, np.dtype(vector_dtype)
        self.engine = Engine(device=device, dtype=dtype, cache_size=0)
        self.engine.adapter(model_id, progress=False)

    def __call__(self, batch: dict) -> dict:
        from engine.corpus.embed import embed_rows

        rows = embed_rows(self.engine, self.model_id, batch["sentence_id"].tolist(),
                          [str(t) for t in batch["text"]], self.layers, self.pool,
                          self.batch_size, self.vector_dtype)
        rows["word"] = np.asarray(rows["word"], dtype=object)
        rows["key"] = np.asarray(rows["key"], dtype=object)
        return rows


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
    runs) against 0.78x sorted, although it would spare the driver its re-ordering copies."""
    todo = list(todo)
    return [sorted(todo[lo:lo + commit_sentences], key=lambda i: len(sentences[i]))
            for lo in range(0, len(todo), commit_sentences)]


def blocks(model_id: str, todo: Sequence[int], sentences: Sequence[str], layers: Sequence[int],
           pool: str, batch_size: int, device: str, dtype: str, address: str | None,
           workers: int, commit_sentences: int,
           vector_dtype: str = "float16") -> Iterator[tuple[dict, int]]:
    """(rows, number of sentences) per commit block, blocks in sentence order and rows within
    a block in sentence order: the same rows the local engine makes."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    started = start(address, workers)
    try:
        ctx = DataContext.get_current()
        ctx.execution_options.preserve_order = True     # blocks arrive in commit order
        ctx.enable_progress_bars = False                # the index command shows its own
        gpus = ray.cluster_resources().get("GPU", 0)
        per_actor_gpu = 1 if gpus >= 1 and device in ("auto", "cuda") else 0
        order = work_order(todo, sentences, commit_sentences)
        ds = ray.data.from_items([{"sentence_id": int(i), "text": sentences[i]}
                                  for block in order for i in block])
        ds = ds.map_batches(
            Embedder, batch_size=max(batch_size, ACTOR_SENTENCES), batch_format="numpy",
            compute=ActorPoolStrategy(size=max(1, workers)),
            num_cpus=0 if per_actor_gpu else 1, num_gpus=per_actor_gpu,
            fn_constructor_kwargs=dict(model_id=model_id, layers=list(layers), pool=pool,
                                       batch_size=batch_size,
                                       device="cuda" if per_actor_gpu else
                                       ("cpu" if device == "auto" else device),
                                       dtype=dtype, vector_dtype=vector_dtype))
        yield from _gather(ds.iter_batches(batch_size=None, batch_format="numpy"),
                           [max(b) for b in order], [len(b) for b in order])
    finally:
        if started:
            ray.shutdown()


def _gather(batches, last_ids: list[int], sizes: list[int]) -> Iterator[tuple[dict, int]]:
    """Output batches (in work order) -> one (rows, sentences) per commit block once all of
    it is in, rows sorted back into sentence order. A block is in when as many sentences as
    it holds have arrived (batches come in work order, so when a sentence without words made
    no rows, the next block's first one stands in for it), or the stream ends. A sentence's
    rows never span two batches (a batch is whole input sentences), so a stable sort by id
    gives exactly the local engine's order (sentence, then layer, then position)."""
    pending: list[dict] = []
    k, seen = 0, 0

    def take(rows: dict) -> tuple[dict, dict]:
        # one gather per column into block order: selecting, then sorting, copied every
        # block's vectors twice, the driver's largest own cost in a profile (py-spy)
        ids = rows["sentence_id"]
        mine = ids <= last_ids[k]
        pick = np.flatnonzero(mine)
        pick = pick[np.argsort(ids[pick], kind="stable")]
        rest = np.flatnonzero(~mine)
        return ({key: v[pick] for key, v in rows.items()},
                {key: v[rest] for key, v in rows.items()})

    for batch in itertools.chain(batches, [None]):            # None: the stream has ended
        if batch is not None:
            pending.append(batch)
            seen += len(np.unique(batch["sentence_id"]))
        while k < len(sizes) and pending and (batch is None or seen >= sizes[k]):
            block, rest = take(_concat(pending))
            pending = [rest]
            seen = len(np.unique(rest["sentence_id"]))
            yield block, sizes[k]
            k += 1


def _concat(parts: list[dict]) -> dict:
    parts = [p for p in parts if len(p["sentence_id"])] or parts[:1]
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
