"""Direct logit attribution (engine/components/dla.py) on the tiny checkpoint of every decoder in
tests/zoo.py: the parts add up to the model's own logit, that logit is the one a plain
forward pass gives, one head's part is the hand-computed one, and what cannot be split is
refused with its reason."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from engine.api import Engine
from engine.errors import EngineError, UnsupportedPrediction
from tests.zoo import DECODERS, arch_config, arch_tokenizer

TEXT = "She sat on the river bank and watched the"
TARGET, CONTRAST = "water", "sky"


def _random_small_params(folder):
    """Biases and norm gains drawn at random (save_arch leaves them 0 and 1): the frozen norm's
    γ and β, the output projections' and the LM head's biases then all move the logit."""
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(folder)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    model.save_pretrained(folder)


def _post_norm_opt(folder):
    """An OPT whose blocks normalise after each residual addition (as opt-350m)."""
    import transformers as tf

    tok = arch_tokenizer("opt")
    cfg = arch_config("opt", len(tok), tok)
    cfg.do_layer_norm_before = False
    tf.OPTForCausalLM(cfg).eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def served(zoo, tmp_path_factory):
    root = tmp_path_factory.mktemp("dla-zoo")
    folders = {}
    for name in DECODERS:
        folders[name] = zoo.copy(f"arch:{name}", root / name)
        _random_small_params(folders[name])
    folders["bert"] = zoo.copy("arch:bert", root / "bert")
    folders["opt-post-norm"] = _post_norm_opt(root / "opt-post-norm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXLENS_MODEL_DIRS", str(root))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("CTXLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield Engine(device="cpu"), {k: str(v) for k, v in folders.items()}


def _plain(folder: str, words: list[str]):
    """transformers' own next-token logits of `words` (their first pieces) after TEXT."""
    import transformers as tf

    tok = tf.AutoTokenizer.from_pretrained(folder)
    model = tf.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tok(TEXT)["input_ids"]
    firsts = [tok(TEXT + " " + w)["input_ids"][len(ids)] for w in words]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    return [float(logits[i]) for i in firsts], model, tok, ids, firsts


@pytest.mark.parametrize("name", list(DECODERS))
def test_parts_add_up_to_the_models_own_logit(served, name):
    engine, folders = served
    one = engine.components(folders[name], TEXT, TARGET)
    other = engine.components(folders[name], TEXT, CONTRAST)
    both = engine.components(folders[name], TEXT, TARGET, CONTRAST)
    for c in (one, other, both):
        assert c.heads.shape == (2, 4) and c.mlp.shape == (2,)
        assert abs(c.total - c.logit) <= 1e-3
    # every part is linear in the unembedding row: target − contrast part by part
    assert both.logit == pytest.approx(one.logit - other.logit, abs=1e-4)
    np.testing.assert_allclose(both.heads, one.heads - other.heads, atol=1e-4)
    np.testing.assert_allclose(both.mlp, one.mlp - other.mlp, atol=1e-4)
    assert both.embed == pytest.approx(one.embed - other.embed, abs=1e-4)
    assert both.rest == pytest.approx(one.rest - other.rest, abs=1e-4)
    # the logit is the one a plain forward gives (Gemma-2's after its soft-cap)
    plain, model, *_ = _plain(folders[name], [TARGET, CONTRAST])
    cap = getattr(model.config, "final_logit_softcapping", None)
    for c, want in ((one, plain[0]), (other, plain[1])):
        got = cap * math.tanh(c.logit / cap) if cap else c.logit
        assert got == pytest.approx(want, abs=1e-4)
    assert ("soft-cap" in one.logit_means) == bool(cap)
    assert one.tokens[-1].strip() == "the" and " water" in one.logit_means
    assert np.abs(one.heads).max() > 1e-3          # the heads carry some of it


def test_biases_and_the_norms_beta_land_in_rest(served):
    engine, folders = served
    c = engine.components(folders["gpt2"], TEXT, TARGET)
    assert abs(c.rest) > 1e-3     # GPT-2's c_proj biases and ln_f's β, drawn non-zero here


def _own_hook(module, seen, key, pre=True):
    if pre:
        return module.register_forward_pre_hook(
            lambda m, args: seen.__setitem__(key, args[0][0, -1].double()))
    return module.register_forward_hook(
        lambda m, args, out: seen.__setitem__(key, out[0, -1].double()))


@pytest.mark.parametrize("name,layer,head", [("gpt2", 1, 2), ("llama", 0, 3)])
def test_one_heads_part_is_the_hand_computed_one(served, name, layer, head):
    engine, folders = served
    c = engine.components(folders[name], TEXT, TARGET, CONTRAST)
    import transformers as tf

    model = tf.AutoModelForCausalLM.from_pretrained(folders[name]).eval()
    tok = tf.AutoTokenizer.from_pretrained(folders[name])
    ids = tok(TEXT)["input_ids"]
    t, k = (tok(TEXT + " " + w)["input_ids"][len(ids)] for w in (TARGET, CONTRAST))
    if name == "gpt2":
        proj, norm = model.transformer.h[layer].attn.c_proj, model.transformer.ln_f
    else:
        proj, norm = model.model.layers[layer].self_attn.o_proj, model.model.norm
    seen = {}
    hooks = [_own_hook(proj, seen, "z"), _own_hook(norm, seen, "x")]
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    hd = 32 // 4
    z = seen["z"][head * hd:(head + 1) * hd]
    W = proj.weight.detach().double()
    if name == "gpt2":            # Conv1D: weight [in, out], rows head*hd..(head+1)*hd
        v = z @ W[head * hd:(head + 1) * hd, :]
        x = seen["x"]
        sigma = torch.sqrt(x.var(unbiased=False) + norm.eps)
        normed = (v - v.mean()) / sigma * norm.weight.detach().double()
    else:                         # nn.Linear: weight [out, in], columns of the head
        v = W[:, head * hd:(head + 1) * hd] @ z
        x = seen["x"]
        rms = torch.sqrt(x.pow(2).mean() + norm.variance_epsilon)
        normed = v / rms * norm.weight.detach().double()
    U = model.get_output_embeddings().weight.detach().double()
    want = float(normed @ (U[t] - U[k]))
    assert c.heads[layer, head] == pytest.approx(want, abs=1e-4)
    assert abs(want) > 1e-4       # a head that says something, not 0 = 0


def test_bert_is_refused_with_why(served):
    engine, folders = served
    with pytest.raises(UnsupportedPrediction, match="post-norm encoder.*MLM head"):
        engine.components(folders["bert"], TEXT, TARGET)


def test_a_post_norm_decoder_is_refused_with_why(served):
    engine, folders = served
    assert "direct_logit" in engine.resolved(folders["opt-post-norm"]).cannot
    with pytest.raises(UnsupportedPrediction, match="post-norm decoder"):
        engine.components(folders["opt-post-norm"], TEXT, TARGET)


def test_post_norm_opt_would_not_add_up_either(served):
    """The check inside the function stands on its own: called on the post-norm OPT directly
    (past the capability), it refuses rather than return parts that miss the logit."""
    from engine.components.dla import components
    from engine.text import to_word_text

    engine, folders = served
    adapter = engine.adapter(folders["opt-post-norm"])
    with pytest.raises(UnsupportedPrediction, match="no final norm|do not add up"):
        components(adapter, to_word_text(TEXT), TARGET, None)


def test_a_contrast_equal_to_the_target_is_refused(served):
    engine, folders = served
    # the message of every view with a contrast (engine.attribution.objective.check_pair)
    with pytest.raises(EngineError, match="'water' is the target itself"):
        engine.components(folders["llama"], TEXT, TARGET, TARGET)


def test_a_target_the_vocabulary_cannot_spell_is_refused(served):
    engine, folders = served
    with pytest.raises(EngineError, match="cannot spell"):
        engine.components(folders["llama"], TEXT, "日本語")
