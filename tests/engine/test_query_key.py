"""The neuron view's numbers (Engine.query_key): softmax of q·k × scale must be the model's own
attention map from the eager path, for BERT, GPT-2 and a Llama-style model with RoPE and
grouped-query attention."""
import numpy as np
import pytest

from engine.api import Engine
from engine.errors import UnsupportedPrediction

TEXT = "The bank by the river is closed today ."


@pytest.fixture(scope="module")
def models(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("qk")
    mp = pytest.MonkeyPatch()
    mp.setenv("CTXLENS_MODEL_DIRS", str(root))    # local model paths only from configured dirs
    yield {"bert": str(zoo.copy("bert", root / "bert", sentences=[TEXT])),
            "gpt2": str(zoo.copy("causal:gpt2", root / "gpt2", corpus=[TEXT])),
            "llama": str(zoo.copy("causal:llama", root / "llama", corpus=[TEXT]))}
    mp.undo()


@pytest.mark.parametrize("kind", ["bert", "gpt2", "llama"])
def test_softmax_of_scaled_query_key_scores_is_the_models_attention(models, kind):
    eng = Engine(cache_size=8)
    enc = eng.encode(models[kind], [TEXT], attentions=True)[0]
    for layer in range(1, enc.attentions.shape[0] + 1):
        qk = eng.query_key(models[kind], TEXT, layer)
        assert qk.tokens == enc.tokens
        assert qk.causal == (kind != "bert")
        for head in range(enc.attentions.shape[1]):
            for token in range(len(enc.tokens)):
                assert np.allclose(qk.attention(head, token),
                                   enc.attentions[layer - 1, head, token], atol=1e-5)
    # q ⊙ k rows add up to the raw score
    qk = eng.query_key(models[kind], TEXT, 1)
    assert np.allclose(qk.products(0, 2).sum(1) * qk.scale,
                       np.where(np.isfinite(qk.scores(0, 2)), qk.scores(0, 2),
                                qk.products(0, 2).sum(1) * qk.scale), atol=1e-6)


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_the_whole_maps_are_the_rows_the_view_draws(models, kind):
    """attention_maps (the check against the model's own weights) and attention (a row the
    view draws) are one masked scaled softmax over allowed_mask."""
    qk = Engine(cache_size=0).query_key(models[kind], TEXT, 1)
    rows = np.array([[qk.attention(h, t) for t in range(len(qk.tokens))]
                     for h in range(qk.queries.shape[0])])
    np.testing.assert_allclose(qk.attention_maps(), rows, atol=1e-6)
    if kind == "gpt2":                                 # no weight on a later token
        query, later = np.triu_indices(len(qk.tokens), 1)
        assert not qk.attention_maps()[:, query, later].any()


def test_allowed_mask_is_the_models_mask_else_the_reading_order():
    from engine.result import QueryKey

    q = np.ones((1, 3, 2), np.float32)

    def mask(**kw):
        return QueryKey("m", ("a", "b", "c"), 1, q, q, 1.0, **kw).allowed_mask()
    assert mask(causal=False).all()
    assert (mask(causal=True) == np.tril(np.ones((3, 3), bool))).all()
    window = np.eye(3, dtype=bool)
    assert (mask(causal=True, allowed=window) == window).all()


def test_transformers_registries_are_written_once(models, monkeypatch):
    """The capture attention goes into transformers' process-wide registries on the first
    neuron view, not on every one."""
    from transformers import AttentionInterface

    from engine.families.hf import qk as capture

    written = []
    register = AttentionInterface.register
    monkeypatch.setattr(capture, "_registered", False)
    monkeypatch.setattr(AttentionInterface, "register",
                        classmethod(lambda cls, *a: written.append(a) or register(*a)))
    eng = Engine(cache_size=0)
    for layer in (1, 2, 1):
        eng.query_key(models["gpt2"], TEXT, layer)
    assert len(written) == 1


def test_a_layer_outside_the_model_is_refused(models):
    eng = Engine(cache_size=0)
    enc = eng.encode(models["bert"], [TEXT])[0]
    with pytest.raises(Exception, match="not an attention layer"):
        eng.query_key(models["bert"], TEXT, enc.n_layers)   # n_layers counts the embeddings
