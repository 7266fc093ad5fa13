"""Projections: few-point messages, layer alignment, PCA fitted jointly over layers."""
import numpy as np
import pytest

from engine.analysis.projection import (ProjectionError, align_layers, project, tsne_perplexity,
                                        umap_neighbors)


def _two_clusters(layers=3, n=8, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2, dim)) * 5
    labels = np.arange(n) % 2
    return rng.normal(size=(layers, n, dim)) + centres[labels][None], labels


def test_one_sentence_is_refused_with_the_add_three_message():
    with pytest.raises(ProjectionError, match="one sentence is not enough.*at least 3"):
        project(np.zeros((2, 1, 4), np.float32))


def test_unknown_method_is_refused():
    with pytest.raises(ProjectionError, match="unknown projection"):
        project(np.zeros((2, 5, 4), np.float32), method="mds")


def test_tsne_perplexity_and_umap_neighbours_stay_below_point_count():
    for n in (3, 4, 7, 20, 200):
        assert tsne_perplexity(n) < n
        assert 2 <= umap_neighbors(n) < n


@pytest.mark.parametrize("method", ["pca", "tsne",
                                    pytest.param("umap", marks=pytest.mark.slow)])  # numba JIT
def test_projection_separates_two_well_separated_clusters(method):
    x, labels = _two_clusters(n=12)
    proj = project(x.astype(np.float32), method=method)
    assert proj.coords.shape == (3, 12, 2)
    c = proj.coords[1]
    within = np.mean([np.linalg.norm(c[i] - c[j]) for i in range(12) for j in range(12)
                      if labels[i] == labels[j] and i != j])
    between = np.mean([np.linalg.norm(c[i] - c[j]) for i in range(12) for j in range(12)
                       if labels[i] != labels[j]])
    assert between > 2 * within


def test_alignment_undoes_a_rotation_and_reflection_between_layers():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(10, 2))
    theta = 1.1
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    flipped = (base @ rot) * np.array([1, -1]) * 3.0
    aligned = align_layers(np.stack([base, flipped]))
    assert np.allclose(aligned[0], aligned[1], atol=1e-8)


def test_pca_uses_one_basis_so_an_unchanged_layer_keeps_its_coordinates():
    x, _ = _two_clusters(layers=2)
    x[1] = x[0]
    proj = project(x.astype(np.float32), method="pca")
    assert np.allclose(proj.coords[0], proj.coords[1], atol=1e-5)
    assert 0 < sum(proj.explained) <= 1.0 + 1e-9


@pytest.mark.parametrize("method", ["pca", "tsne"])
def test_a_context_free_layer_collapses_to_one_point_with_a_note(method):
    x, _ = _two_clusters(layers=3, n=6)
    x[0] = x[0, :1]          # ELMo layer 0 for one word: the same vector in every sentence
    proj = project(x.astype(np.float32), method=method)
    assert np.allclose(proj.coords[0], 0.0)
    assert np.isfinite(proj.coords).all()
    assert "layer 0: every context gives the same vector" in proj.note


@pytest.mark.parametrize("method", ["pca", "tsne", pytest.param("umap", marks=pytest.mark.slow)])
def test_three_points_is_enough_for_every_method(method):
    x = np.random.default_rng(3).normal(size=(2, 3, 16)).astype(np.float32)
    proj = project(x, method=method)
    assert proj.coords.shape == (2, 3, 2) and np.isfinite(proj.coords).all()
    if method != "pca":
        assert "for 3 points" in proj.note


def test_repeated_projection_is_served_from_the_engines_cache_and_read_only():
    from engine.api import Engine

    engine = Engine(device="cpu")
    rng = np.random.default_rng(1)
    v = rng.normal(size=(3, 6, 8)).astype(np.float32)
    first = engine.project(v, method="tsne", seed=0)
    assert engine.project(v.copy(), method="tsne", seed=0) is first
    assert engine.project(v, method="tsne", seed=1) is not first
    changed = v.copy()
    changed[2, 0, 0] += 1.0
    assert engine.project(changed, method="tsne", seed=0) is not first
    with pytest.raises(ValueError):
        first.coords[0, 0, 0] = 5.0


_CACHE_STATS = """
import json
from engine.analysis import projection
projection.warm_umap()
import umap.umap_ as u
stats = u.smooth_knn_dist.stats
print(json.dumps({"hits": sum(stats.cache_hits.values()), "misses": sum(stats.cache_misses.values())}))
"""


@pytest.mark.slow_by_nature    # UMAP's kernels compiled from nothing by numba: ~60 s of a core
def test_a_second_process_loads_umaps_kernels_from_numbas_disk_cache(tmp_path):
    # umap-learn compiles smooth_knn_dist without cache=True: before the fix every process
    # compiled it (a cache miss) and none could load it
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [json.loads(subprocess.run([sys.executable, "-c", _CACHE_STATS], env=env, check=True,
                                      capture_output=True, text=True).stdout.splitlines()[-1])
            for _ in range(2)]
    assert runs[0]["misses"] >= 1 and runs[0]["hits"] == 0
    assert runs[1]["hits"] >= 1 and runs[1]["misses"] == 0


def test_the_tsne_note_rounds_its_perplexity():
    x = np.random.default_rng(4).normal(size=(1, 8, 16)).astype(np.float32)
    note = project(x, method="tsne").note
    assert "t-SNE perplexity=2.33 for 8 points (lowered from 30)" in note


@pytest.mark.parametrize("method", ["pca", "tsne"])
def test_three_axes_when_asked_and_pca_keeps_the_first_two(method):
    x, labels = _two_clusters(n=12)
    three = project(x.astype(np.float32), method=method, dims=3)
    assert three.coords.shape == (3, 12, 3)
    if method == "pca":
        two = project(x.astype(np.float32), method="pca")
        assert np.allclose(three.coords[..., :2], two.coords, atol=1e-5)
        assert len(three.explained) == 3 and three.explained[2] <= three.explained[1]
    with pytest.raises(ProjectionError, match="2 or 3 axes"):
        project(x.astype(np.float32), method=method, dims=4)
