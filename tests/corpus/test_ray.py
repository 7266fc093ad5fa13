"""--engine ray on a local Ray cluster (2 CPUs): the same rows as the local engine."""
import numpy as np
import pytest

from engine.api import Engine
from engine.corpus import index as corpus_index
from engine.corpus import ray_embed
from engine.corpus.embed import embed_rows
from tests.corpus.test_index import _corpus, _rows, tiny  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray_embed.start(None, 2)           # ray.init(num_cpus=2): a local cluster as the fixture
    yield
    ray.shutdown()


def test_ray_rows_equal_the_local_engines(tiny, tmp_path, local_ray):  # noqa: F811
    sentences = _corpus(120, seed=7)
    layers = [0, 1, 2]
    got = list(ray_embed.blocks(tiny, range(len(sentences)), sentences, layers, "mean", 8,
                                "cpu", "float32", None, 2, commit_sentences=50,
                                vector_dtype="float32"))
    assert sum(n for _, n in got) == len(sentences)
    assert all(np.all(np.diff(r["sentence_id"]) >= 0) for r, _ in got)   # in sentence order
    ray_rows = {k: np.concatenate([r[k] for r, _ in got]) for k in got[0][0]}
    local = embed_rows(Engine(cache_size=0), tiny, list(range(len(sentences))), sentences,
                       layers, "mean", 8, vector_dtype=np.float32)
    assert np.array_equal(ray_rows["sentence_id"], local["sentence_id"])
    assert np.array_equal(ray_rows["position"], local["position"])
    assert list(ray_rows["word"]) == list(local["word"])
    assert np.abs(ray_rows["vector"] - local["vector"]).max() <= 1e-5

    src = tmp_path / "c.txt"
    src.write_text("\n".join(sentences))
    corpus_index.build(tiny, str(src), tmp_path / "ray", layers="0,1,2", engine_kind="ray",
                       batch_size=8, commit_sentences=50, progress=False)
    corpus_index.build(tiny, str(src), tmp_path / "local", layers="0,1,2", progress=False)
    k1, v1, _ = _rows(tmp_path / "ray")
    k2, v2, _ = _rows(tmp_path / "local")
    assert k1 == k2
    assert np.abs(v1 - v2).max() <= 1e-3 * max(1.0, np.abs(v2).max())   # one float16 step
