"""The layer tables of a corpus index: their schema, rows as Arrow tables, appends. Used by the
index build (engine.corpus.index) and by Ray's actors (engine.corpus.ray_embed), which write the
same tables; neither imports the other for this."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def layer_table(layer: int) -> str:
    """The table holding one layer's occurrences."""
    return f"layer_{int(layer)}"


def _quiet_lancedb() -> None:
    os.environ.setdefault("LANCEDB_LOG", "error")


def schema(dim: int, vector_dtype: str = "float16"):
    import pyarrow as pa

    return pa.schema([("sentence_id", pa.int64()), ("position", pa.int32()),
                      ("layer", pa.int16()), ("word", pa.string()), ("key", pa.string()),
                      ("vector", pa.list_(pa.from_numpy_dtype(np.dtype(vector_dtype)), dim))])


def to_arrow(rows: dict, dim: int, vector_dtype: str = "float16"):
    """embed_rows' columns as a table of the index's schema (vectors float16 unless asked;
    a test stores float32 to compare engines before that rounding)."""
    import pyarrow as pa

    vec = np.ascontiguousarray(rows["vector"], dtype=vector_dtype).reshape(-1)
    return pa.table({
        "sentence_id": pa.array(rows["sentence_id"], pa.int64()),
        "position": pa.array(rows["position"], pa.int32()),
        "layer": pa.array(rows["layer"], pa.int16()),
        "word": pa.array(np.asarray(rows["word"], dtype=object), pa.string()),
        "key": pa.array(np.asarray(rows["key"], dtype=object), pa.string()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec), dim)},
        schema=schema(dim, vector_dtype))


def connect_db(db: Path):
    """The LanceDB database at `db` (an index folder's db/; Ray's actors open it too)."""
    _quiet_lancedb()
    import lancedb

    return lancedb.connect(str(db))


def split_by_layer(rows: dict, layers) -> dict[int, dict]:
    """embed_rows' columns, one set per layer."""
    out = {}
    for layer in layers:
        pick = np.nonzero(rows["layer"] == layer)[0]
        out[layer] = {k: (v[pick] if isinstance(v, np.ndarray) else [v[i] for i in pick])
                      for k, v in rows.items()}
    return out


def add_rows(tables: dict, rows: dict, layers, dim: int,
             vector_dtype: str = "float16") -> None:
    """embed_rows' columns into their layer tables: one atomic commit per layer table."""
    if not len(rows["sentence_id"]):
        return
    for layer, part in split_by_layer(rows, layers).items():
        tables[layer].add(to_arrow(part, dim, vector_dtype))
