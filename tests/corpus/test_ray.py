"""--engine ray on a local Ray cluster (2 CPUs): the actors write the local engine's rows, and a
killed Ray run resumes without duplicates or losses."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.api import Engine
from engine.corpus import index as corpus_index
from engine.corpus import ray_embed
from engine.corpus.embed import embed_rows
from engine.text import split_words
from tests.corpus.test_index import (ROOT, _corpus, _rows, fill_a_small_disk,  # noqa: F401
                                     tiny)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray_embed.start(None, 2)           # ray.init(num_cpus=2): a local cluster as the fixture
    yield
    ray.shutdown()


def test_ray_actors_write_the_local_engines_rows(tiny, tmp_path, local_ray,  # noqa: F811
                                                 monkeypatch):
    """Vectors stored as float32 so the engines compare before float16 rounding; small actor
    calls so both actors write to the same tables at once."""
    monkeypatch.setattr(ray_embed, "ACTOR_SENTENCES", 10)
    sentences = _corpus(120, seed=7)
    layers = [0, 1, 2]
    dim = Engine(cache_size=0).adapter(tiny, progress=False).info.dim
    db = corpus_index.connect_db(tmp_path / "db")
    for layer in layers:
        db.create_table(corpus_index.layer_table(layer),
                        schema=corpus_index._schema(dim, "float32"))
    wrote = list(ray_embed.write(tiny, range(len(sentences)), sentences, layers, "mean", 8,
                                 "cpu", "float32", None, 2, commit_sentences=50,
                                 db=tmp_path / "db", dim=dim, vector_dtype="float32"))
    assert sum(wrote) == len(sentences) and len(wrote) == 12
    local = embed_rows(Engine(cache_size=0), tiny, list(range(len(sentences))), sentences,
                       layers, "mean", 8, vector_dtype=np.float32)
    for layer in layers:
        t = db.open_table(corpus_index.layer_table(layer)).to_arrow().sort_by(
            [("sentence_id", "ascending"), ("position", "ascending")])
        mine = local["layer"] == layer
        assert np.array_equal(t["sentence_id"].to_numpy(), local["sentence_id"][mine])
        assert np.array_equal(t["position"].to_numpy(), local["position"][mine])
        assert t["word"].to_pylist() == list(local["word"][mine])
        vec = np.asarray(t["vector"].combine_chunks().values.to_numpy(), np.float32)
        assert np.abs(vec.reshape(t.num_rows, dim) - local["vector"][mine]).max() <= 1e-5


def test_a_ray_index_equals_a_local_one(tiny, tmp_path, local_ray):  # noqa: F811
    sentences = _corpus(120, seed=7)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ray", layers="0,1,2", engine_kind="ray",
                       batch_size=8, commit_sentences=50, progress=False)
    corpus_index.build(tiny, str(src), tmp_path / "local", layers="0,1,2", progress=False)
    k1, v1, _ = _rows(tmp_path / "ray")
    k2, v2, _ = _rows(tmp_path / "local")
    assert k1 == k2
    assert np.abs(v1 - v2).max() <= 1e-3 * max(1.0, np.abs(v2).max())   # one float16 step


def test_a_killed_ray_run_resumes_without_duplicates_or_losses(tiny, tmp_path):  # noqa: F811
    """The whole process group is killed (driver, Ray's own processes and the writing
    actors, as Ctrl-C in a terminal would reach them) once a few batches are in."""
    sentences = _corpus(1500, seed=3)
    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    env = {**os.environ, "CTXLENS_MODEL_DIRS": str(Path(tiny).parent),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "engine.cli", "index", "--model", tiny, "--corpus", str(src),
           "--output", str(tmp_path / "ix"), "--layers", "0,1", "--commit-sentences", "50",
           "--engine", "ray", "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    versions = tmp_path / "ix" / "db" / "layer_1.lance" / "_versions"
    deadline = time.time() + 180
    while time.time() < deadline and (not versions.exists() or
                                      len(list(versions.iterdir())) < 6):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    manifest = json.loads((tmp_path / "ix" / "manifest.json").read_text())
    assert not manifest["complete"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    keys, vec, _ = _rows(tmp_path / "ix")
    n_words = sum(len(split_words(s).words) for s in sentences)
    assert len(keys) == len(set(keys)) == 2 * n_words
    runs = json.loads((tmp_path / "ix" / "manifest.json").read_text())["build"]["runs"]
    assert len(runs) == 2 and 0 < runs[1]["sentences_indexed_before"] < len(sentences)
    corpus_index.build(tiny, str(src), tmp_path / "whole", layers="0,1", progress=False)
    keys2, vec2, _ = _rows(tmp_path / "whole")
    assert keys == keys2 and np.allclose(vec, vec2, atol=2e-3, rtol=1e-3)


def test_a_full_disk_under_the_actors_stops_with_one_line(tiny, tmp_path, local_ray):  # noqa: F811
    """The actors write, so their disk error crosses Ray back to the driver: still one line,
    and what was committed still reads."""
    fill_a_small_disk(tiny, tmp_path, engine_kind="ray", ray_workers=2)
