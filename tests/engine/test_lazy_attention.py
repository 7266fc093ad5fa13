"""Attention maps are computed only when asked: by default the models run SDPA attention and
return hidden states only; asked for maps, the same model switches to eager for that call and
back. Vectors agree with the eager path to 1e-5, maps with a model loaded eager to 1e-5."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.api import Engine

TEXTS = ["The bank raised its rates again.", "She sat on the river bank and read."]


@pytest.fixture(params=["bert", "gpt2", "llama"])
def model_path(zoo, request, model_dir: Path) -> str:
    if request.param == "bert":
        return str(zoo.copy("bert", model_dir / "bert", masked_lm=False))
    return str(zoo.copy(f"causal:{request.param}", model_dir / request.param))


def plain_eager(path: str):
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    archs = " ".join(AutoConfig.from_pretrained(path).architectures or [])
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(path), "CausalLM" in archs or "LMHead" in archs


def test_maps_only_when_asked_and_the_model_stays_on_sdpa(model_path):
    engine = Engine(device="cpu")
    plain = engine.encode(model_path, TEXTS)
    model = engine.adapter(model_path).model
    assert model.config._attn_implementation == "sdpa"
    assert all(e.attentions is None for e in plain)
    with_maps = engine.encode(model_path, TEXTS, attentions=True)
    assert model.config._attn_implementation == "sdpa"          # switched back after the call
    for a, b in zip(plain, with_maps):
        assert b.attentions is not None and b.attentions.shape[-1] == len(b.tokens)
        np.testing.assert_allclose(a.hidden_states, b.hidden_states, atol=1e-5)
    # a cached encoding with maps serves a later request without them
    assert engine.encode(model_path, TEXTS[:1])[0] is with_maps[0]


def test_maps_equal_a_model_loaded_with_eager_attention(model_path):
    enc = Engine(device="cpu").encode(model_path, TEXTS[:1], attentions=True)[0]
    model, tok, _ = plain_eager(model_path)
    ids = tok(enc.text, return_tensors="pt")
    with torch.no_grad():
        out = model(**ids, output_attentions=True, output_hidden_states=True)
    ref = torch.stack(out.attentions, dim=1)[0].numpy()
    n = ref.shape[-1]
    assert enc.attentions.shape == ref.shape
    np.testing.assert_allclose(enc.attentions, ref, atol=1e-5)
    np.testing.assert_allclose(enc.hidden_states[:, :n],
                               torch.stack(out.hidden_states, 1)[0].numpy(), atol=1e-5)


def test_concurrent_requests_with_and_without_maps_all_get_what_they_asked(model_path):
    engine = Engine(device="cpu", cache_size=0)
    engine.adapter(model_path)
    errors, results = [], {}

    def run(i: int) -> None:
        try:
            results[i] = engine.encode(model_path, [TEXTS[i % 2]], attentions=bool(i % 2))[0]
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all((results[i].attentions is not None) == bool(i % 2) for i in range(8))
