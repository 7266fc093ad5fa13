"""The MLM head trained on a headless encoder (lab/training/mlm_head.py): what trains, what is
exported, and that the engine then serves exactly that model on top of the base's files."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from engine.api import Engine
from engine.families import WITH_MLM_HEAD, bert
from engine.errors import ModelUnavailable, UnsupportedPrediction
from engine.families.base import LoadOptions
from engine.registry import ModelEntry
from engine.text import to_word_text
from lab.training import mlm_head

CPU = LoadOptions(device="cpu")


@pytest.fixture
def base(zoo):
    return zoo.path("bert", masked_lm=False)


@pytest.mark.parametrize("train,blocks", [("head", set()), ("top2", {0, 1}), ("all", {0, 1})])
def test_only_the_head_and_the_chosen_blocks_train(base, train, blocks):
    model = mlm_head.build_model(base, mlm_head.TRAINABLE[train])
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert {n for n in trainable if n.startswith("cls.")} == \
        {n for n, _ in model.named_parameters() if n.startswith("cls.")
         and "decoder.weight" not in n}
    assert {int(n.split(".")[3]) for n in trainable if n.startswith("bert.encoder.layer.")} == blocks
    assert not any("embeddings" in n for n in trainable)
    # the decoder is the (frozen) word-embedding matrix itself
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def _trained(base, seed=1, untied=False):
    model = mlm_head.build_model(base, 2, untied=untied)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))        # stands in for training
    return model.eval()


def test_the_engine_serves_the_exported_overlay_on_the_base_files(base, tmp_path):
    model = _trained(base)
    files = mlm_head.export(model, tmp_path / "overlay")
    assert files and all(f.stat().st_size < 16 * 2**20 for f in files)
    stored = {k for f in files for k in load_file(str(f))}
    assert stored == {n for n, p in model.named_parameters() if p.requires_grad}
    served = bert.load("tiny-mlm", base, CPU, progress=False, overlay=tmp_path / "overlay")
    assert served.has_mlm
    text = to_word_text("the bank of the [MASK] .")
    pred = served.predict_masked(text, top_k=5)
    ids = served.tokenizer("the bank of the [MASK] .", return_tensors="pt")
    pos = int((ids["input_ids"][0] == served.tokenizer.mask_token_id).nonzero()[0, 0])
    with torch.no_grad():
        probs = model(**ids).logits[0, pos].softmax(-1)     # the trained model, float32
    top = torch.topk(probs, 5)
    assert [c.token for c in pred.candidates] == served.tokenizer.convert_ids_to_tokens(top.indices)
    assert [c.prob for c in pred.candidates] == pytest.approx(top.values.tolist(), abs=2e-3)


def test_a_partial_or_foreign_overlay_fails_loudly(base, tmp_path):
    from safetensors.torch import save_file

    files = mlm_head.export(_trained(base), tmp_path / "overlay")
    tensors = {k: v for f in files for k, v in load_file(str(f)).items()}
    for f in files:
        f.unlink()
    save_file({k: v for k, v in tensors.items() if not k.startswith("cls.")},
              str(tmp_path / "overlay" / "mlm_overlay-01-of-01.safetensors"))
    with pytest.raises(ModelUnavailable, match=r"lack 'cls\.predictions"):
        bert.load("x", base, CPU, progress=False, overlay=tmp_path / "overlay")
    save_file({**tensors, "cls.predictions.bias": torch.zeros(3, dtype=torch.float16)},
              str(tmp_path / "overlay" / "mlm_overlay-01-of-01.safetensors"))
    with pytest.raises(ModelUnavailable, match="does not fit the base model"):
        bert.load("x", base, CPU, progress=False, overlay=tmp_path / "overlay")


def test_a_registry_overlay_loads_its_base_through_the_engine(base, tmp_path):
    mlm_head.export(_trained(base), tmp_path / "overlay")
    engine = Engine(device="cpu")
    common = dict(family="bert", name="t", licence="-", size="-", bundled=True)
    engine.registry["tiny-base"] = ModelEntry(id="tiny-base", path=str(base), **common)
    engine.registry["tiny-mlm"] = ModelEntry(id="tiny-mlm", path=str(tmp_path / "overlay"),
                                             base="tiny-base", capabilities=WITH_MLM_HEAD, **common)
    pred = engine.predict_masked("tiny-mlm", "the bank of the [MASK] .", top_k=3)
    direct = bert.load("d", base, CPU, progress=False, overlay=tmp_path / "overlay")
    assert pred.candidates == direct.predict_masked(to_word_text("the bank of the [MASK] ."),
                                                    top_k=3).candidates
    # the base itself is untouched: still no head
    assert "fill_blank" not in engine.resolved("tiny-base").capabilities
    with pytest.raises(UnsupportedPrediction, match="no masked-LM head"):
        engine.adapter("tiny-base").predict_masked(to_word_text("the bank of the [MASK] ."))
    engine.registry["bad"] = dataclasses.replace(engine.registry["tiny-mlm"], id="bad",
                                                 base="nowhere")
    with pytest.raises(ModelUnavailable, match="overlays 'nowhere'"):
        engine.adapter("bad")


def test_an_untied_decoder_starts_as_the_embeddings_trains_and_is_served(base, tmp_path):
    model = mlm_head.build_model(base, 2, untied=True)
    dec, emb = model.cls.predictions.decoder.weight, model.bert.embeddings.word_embeddings.weight
    assert dec is not emb and torch.equal(dec, emb)
    assert dec.requires_grad and not emb.requires_grad
    trained = _trained(base, untied=True)
    files = mlm_head.export(trained, tmp_path / "overlay")
    assert "cls.predictions.decoder.weight" in {k for f in files for k in load_file(str(f))}
    served = bert.load("tiny-untied", base, CPU, progress=False, overlay=tmp_path / "overlay")
    assert torch.equal(served.model.cls.predictions.decoder.weight,
                       trained.cls.predictions.decoder.weight.half().float())
    assert torch.equal(served.model.bert.embeddings.word_embeddings.weight, emb)


def test_a_tensor_over_the_file_cap_is_stored_in_row_slices_and_joined_on_load(base, tmp_path):
    trained = _trained(base, untied=True)
    dec = trained.cls.predictions.decoder.weight
    row_bytes = dec.shape[1] * 2                                     # fp16
    sliced = mlm_head.split_rows(mlm_head.trained_tensors(trained), 7 * row_bytes)
    parts = sorted(k for k in sliced if k.startswith("cls.predictions.decoder.weight@rows"))
    assert len(parts) == -(-dec.shape[0] // 7) and "cls.predictions.decoder.weight" not in sliced
    (tmp_path / "overlay").mkdir()
    from safetensors.torch import save_file

    half = len(sliced) // 2                     # slices of one tensor spread over two shards
    names = sorted(sliced)
    for k, chunk in enumerate((names[:half], names[half:]), 1):
        save_file({n: sliced[n] for n in chunk}, str(tmp_path / "overlay" /
                                                      f"mlm_overlay-{k:02d}-of-02.safetensors"))
    fresh = mlm_head.build_model(base, 2, untied=True)
    bert.apply_overlay(fresh, sorted((tmp_path / "overlay").glob(bert.OVERLAY_GLOB)))
    assert torch.equal(fresh.cls.predictions.decoder.weight, dec.half().float())


def test_the_mask_row_alone_trains_without_decay_and_is_served_as_one_row(base, tmp_path):
    from transformers import AutoTokenizer

    from lab.training.loop import RunConfig, make_optimizer

    mask = AutoTokenizer.from_pretrained(str(base)).mask_token_id
    model = mlm_head.build_model(base, 2, mask_row=mask)
    emb = model.bert.embeddings.word_embeddings.weight
    before = emb.detach().clone()
    cfg = RunConfig(run_dir=tmp_path / "run", max_words=1, budget_minutes=1, lr=1e-2,
                    weight_decay=0.5)
    opt = make_optimizer(model, cfg, mlm_head.lr_scale_for(0.1),
                         no_decay=lambda name: name in model.trained_rows)
    ids = torch.tensor([[2, mask, 5, mask, 7]])
    for _ in range(3):          # the tied decoder's gradient reaches every row; the hook keeps one
        opt.zero_grad()
        model(input_ids=ids).logits.logsumexp(-1).sum().backward()
        opt.step()
    changed = (emb.detach() != before).any(1).nonzero().flatten().tolist()
    assert changed == [mask]
    files = mlm_head.export(model.eval(), tmp_path / "overlay")
    stored = {k: t for f in files for k, t in load_file(str(f)).items()}
    assert [k for k in stored if "embeddings" in k] == \
        [f"bert.embeddings.word_embeddings.weight{bert.ROW_PATCH_MARK}{mask}"]
    served = bert.load("tiny-mask", base, CPU, progress=False, overlay=tmp_path / "overlay")
    got = served.model.bert.embeddings.word_embeddings.weight
    assert torch.equal(got[mask], emb[mask].detach().half().float())
    keep = torch.arange(len(got)) != mask
    assert torch.equal(got[keep], before[keep])
