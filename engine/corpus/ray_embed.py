"""`ctxlens index --engine ray`: the same embedding function (engine.corpus.embed.embed_rows)
run by Ray Data: `from_items` -> `map_batches` with a pool of actors, one model per actor (a
GPU each when the cluster has GPUs), results streamed back in input order to the one process
that writes the database. Ray does the scheduling; nothing here queues or pools work itself.

A local cluster starts on demand (`ray.init(num_cpus=workers)`); `--ray-address` joins a
running one (`ray start --head` on the head node, `ray start --address=HEAD:6379` on the
others; see README.md).
"""
from __future__ import annotations

import logging
import os
from typing import Iterator, Sequence

import numpy as np

# what an actor needs from the driver's environment (model folders, offline switches)
PASSED_ENV = ("CTXLENS_MODEL_DIRS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME")


class Embedder:
    """One per Ray actor: loads the model once, then embeds batches of sentences."""

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


def blocks(model_id: str, todo: Sequence[int], sentences: Sequence[str], layers: Sequence[int],
           pool: str, batch_size: int, device: str, dtype: str, address: str | None,
           workers: int, commit_sentences: int,
           vector_dtype: str = "float16") -> Iterator[tuple[dict, int]]:
    """(rows, number of sentences) blocks of about commit_sentences whole sentences, in
    sentence order: the same rows the local engine makes."""
    import ray
    from ray.data import ActorPoolStrategy, DataContext

    started = start(address, workers)
    try:
        ctx = DataContext.get_current()
        ctx.execution_options.preserve_order = True     # blocks commit in sentence order
        ctx.enable_progress_bars = False                # the index command shows its own
        gpus = ray.cluster_resources().get("GPU", 0)
        per_actor_gpu = 1 if gpus >= 1 and device in ("auto", "cuda") else 0
        ds = ray.data.from_items([{"sentence_id": int(i), "text": sentences[i]} for i in todo])
        ds = ds.map_batches(
            Embedder, batch_size=max(batch_size, 64), batch_format="numpy",
            compute=ActorPoolStrategy(size=max(1, workers)),
            num_cpus=0 if per_actor_gpu else 1, num_gpus=per_actor_gpu,
            fn_constructor_kwargs=dict(model_id=model_id, layers=list(layers), pool=pool,
                                       batch_size=batch_size,
                                       device="cuda" if per_actor_gpu else
                                       ("cpu" if device == "auto" else device),
                                       dtype=dtype, vector_dtype=vector_dtype))
        pending: list[dict] = []
        n_pending = 0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            pending.append(batch)
            n_pending = len(np.unique(np.concatenate([b["sentence_id"] for b in pending])))
            if n_pending > commit_sentences:
                rows, rest = _split_at_last_sentence(pending)
                yield rows, len(np.unique(rows["sentence_id"]))
                pending = [rest]
        if pending:
            rows = _concat(pending)
            if len(rows["sentence_id"]):
                yield rows, len(np.unique(rows["sentence_id"]))
    finally:
        if started:
            ray.shutdown()


def _concat(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _split_at_last_sentence(parts: list[dict]) -> tuple[dict, dict]:
    """Rows of every sentence but the last one seen (it may continue in the next batch), and
    the rest: a commit never holds part of a sentence."""
    rows = _concat(parts)
    last = rows["sentence_id"].max()
    keep = rows["sentence_id"] < last
    return ({k: v[keep] for k, v in rows.items()}, {k: v[~keep] for k, v in rows.items()})
