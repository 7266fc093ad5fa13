"""--engine ray on a local Ray cluster (2 CPUs): the actors write the local engine's rows, and a
killed Ray run resumes without duplicates or losses."""
import numpy as np
import pytest

from engine.api import Engine
from engine.corpus import index as corpus_index
from engine.corpus import ray_embed
from engine.corpus.embed import embed_rows
from tests.engine.corpus.test_index import (_corpus, _rows, fill_a_small_disk,  # noqa: F401
                                     killed_then_resumed, tiny)

# slow by nature (make test-all): a local Ray cluster starts in ~25 s and each test takes
# 30-45 s on a busy 2-core machine, the killed run resumed 150-180 s
pytestmark = [pytest.mark.slow, pytest.mark.slow_by_nature]


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
                        schema=corpus_index.schema(dim, "float32"))
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
    """Killed with its Ray processes and writing actors, once a few batches are in."""
    run = killed_then_resumed(tiny, tmp_path, ["--commit-sentences", "50", "--engine", "ray",
                                               "--workers", "2"], commits=6, group=True)
    assert 0 < run["sentences_indexed_before"] < 1500


def test_a_full_disk_under_the_actors_stops_with_one_line(tiny, tmp_path, local_ray):  # noqa: F811
    """The actors write, so their disk error crosses Ray back to the driver: still one line,
    and what was committed still reads."""
    fill_a_small_disk(tiny, tmp_path, engine_kind="ray", ray_workers=2)


def test_an_actors_one_line_error_reaches_the_user_as_one_line(tiny, tmp_path,  # noqa: F811
                                                              local_ray):
    """Raised in an actor, "this model's tokenizer drops the word" came back as a RayTaskError
    whose cause is Ray's own wrapper: the CLI printed 'internal error' and fifty lines."""
    from engine.errors import EngineError

    src = tmp_path / "c.txt"
    src.write_text("\n".join(_corpus(5, seed=3) + ["the bank \ufffd river ."]))
    with pytest.raises(EngineError, match="^corpus sentence id 5 \\('the bank \ufffd river \\.'\\): "
                                          "this model's tokenizer drops the word"):
        corpus_index.build(tiny, str(src), tmp_path / "ix", layers="0", engine_kind="ray",
                           ray_workers=2, progress=False)
