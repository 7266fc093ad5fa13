"""GPT family adapter on tiny random GPT-2 and Llama checkpoints built here, and the GGUF cache."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from engine import fetch, folders
from engine.api import Engine
from engine.errors import EngineError, UnsupportedPrediction
from engine.families import gpt
from engine.families.base import Adapter, LoadOptions
from engine.families.hf.tokens import readable_tokens
from tests.zoo import DIM, GPT_CORPUS, HEADS, LAYERS, byte_level_tokenizer

CORPUS = list(GPT_CORPUS)
TEXT = "She sat on the river bank and watched the water."
SHORT = "The bank raised rates."
ARCHS = ("gpt2", "llama")


@pytest.fixture(params=ARCHS)
def causal_lm(zoo, request, model_dir: Path) -> str:
    return str(zoo.copy(f"causal:{request.param}", model_dir / request.param))


def checkpoint(path: str):
    """The checkpoint loaded directly through transformers: tokenizer, model (eager)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoTokenizer.from_pretrained(path),
            AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval())


def reference(path: str, text: str):
    """The checkpoint run directly through transformers: tokenizer, model, ids, outputs."""
    tok, model = checkpoint(path)
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        out = model(**ids, output_hidden_states=True)
    return tok, model, ids, out


def test_encoding_shapes_follow_the_config(causal_lm):
    engine = Engine(device="cpu")
    assert isinstance(engine.adapter(causal_lm), Adapter)
    enc, = engine.encode(causal_lm, [TEXT], attentions=True)
    n = len(enc.tokens)
    assert enc.family == "gpt"
    assert enc.hidden_states.shape == (LAYERS + 1, n, DIM)
    assert enc.attentions.shape == (LAYERS, HEADS, n, n)
    assert enc.layer_names == ("embeddings", "layer 1", "layer 2")


def test_each_model_keeps_its_own_bos_convention(zoo, model_dir):
    engine = Engine(device="cpu")
    gpt2, = engine.encode(str(zoo.copy("causal:gpt2", model_dir / "g")), [TEXT])
    llama, = engine.encode(str(zoo.copy("causal:llama", model_dir / "l")), [TEXT])
    assert (gpt2.token_to_word >= 0).all() and gpt2.token_to_word[0] == 0
    assert llama.tokens[0] == "<s>" and llama.token_to_word[0] == -1
    assert (llama.token_to_word[1:] >= 0).all()


def test_each_word_decodes_back_from_readable_tokens(causal_lm):
    enc, = Engine(device="cpu").encode(causal_lm, ["They were playing near the riverbanks!"])
    assert not any(("Ġ" in t or "\u2581" in t) for t in enc.tokens)
    assert any(t.startswith(" ") for t in enc.tokens)
    multi = 0
    for w, word in enumerate(enc.words):
        pieces = [enc.tokens[i] for i in enc.word_tokens(w)]
        assert "".join(pieces).strip() == word
        multi += len(pieces) > 1
    assert multi > 0       # the tiny vocabulary splits at least one word


def test_a_token_spanning_two_words_is_reported(zoo, model_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from engine.errors import EngineError

    path = zoo.copy("causal:llama", model_dir / "joined")
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()     # no split at punctuation: "▁water."
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=120,
                                                        special_tokens=["<unk>", "<s>", "</s>"]))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(path)
    with pytest.raises(EngineError, match="joins '.' with its neighbour into the one token"):
        Engine(device="cpu").encode(str(path), [TEXT])


def test_attention_is_causal_and_rows_sum_to_one(causal_lm):
    enc, = Engine(device="cpu").encode(causal_lm, [TEXT], attentions=True)
    np.testing.assert_allclose(enc.attentions.sum(-1), 1.0, atol=1e-5)
    upper = np.triu(np.ones(enc.attentions.shape[-2:], dtype=bool), k=1)
    assert np.abs(enc.attentions[..., upper]).max() == 0.0


def test_vectors_do_not_depend_on_the_rest_of_the_batch(causal_lm):
    alone, = Engine(device="cpu").encode(causal_lm, [SHORT], attentions=True)
    batched = Engine(device="cpu").encode(causal_lm, [CORPUS[1], CORPUS[2], SHORT],
                                          batch_size=8, attentions=True)[-1]
    assert len(batched.tokens) == len(alone.tokens)
    np.testing.assert_allclose(batched.hidden_states, alone.hidden_states, atol=1e-5)
    np.testing.assert_allclose(batched.attentions, alone.attentions, atol=1e-5)


def test_states_match_the_saved_model_and_the_last_one_has_the_final_norm(causal_lm):
    enc, = Engine(device="cpu").encode(causal_lm, [TEXT])
    tok, model, ids, out = reference(causal_lm, TEXT)
    blocks = model.base_model.h if hasattr(model.base_model, "h") else model.base_model.layers
    captured = []
    hook = blocks[-1].register_forward_hook(
        lambda mod, args, output: captured.append(output[0] if isinstance(output, tuple)
                                                  else output))
    with torch.no_grad():
        model(**ids)
        normed = gpt.final_norm(model)(captured[0])[0]
    hook.remove()
    np.testing.assert_allclose(enc.hidden_states, torch.stack(out.hidden_states)[:, 0].numpy(),
                               atol=1e-5)
    np.testing.assert_allclose(enc.hidden_states[-1], normed.numpy(), atol=1e-5)


def test_logit_lens_last_layer_is_the_models_own_output(causal_lm):
    lens = Engine(device="cpu").logit_lens(causal_lm, TEXT)
    tok, model, ids, out = reference(causal_lm, TEXT)
    probs = torch.softmax(out.logits[0], -1)
    assert lens.top_probs.shape == (LAYERS + 1, ids.input_ids.shape[1])
    assert lens.top_tokens[-1] == tuple(gpt._word_piece(t) for t in
                                        readable_tokens(tok, probs.argmax(-1).tolist()))
    np.testing.assert_allclose(lens.top_probs[-1], probs.max(-1).values.numpy(), rtol=1e-4)
    # an inner layer goes through the final norm, then the head
    with torch.no_grad():
        inner = torch.softmax(model.get_output_embeddings()(
            gpt.final_norm(model)(out.hidden_states[1]))[0], -1)
    np.testing.assert_allclose(lens.top_probs[1], inner.max(-1).values.numpy(), rtol=1e-4)
    assert lens.layer_names[-1] == f"layer {LAYERS}"


def test_next_word_prediction_is_the_softmax_at_the_last_position(causal_lm):
    pred = Engine(device="cpu").predict_next(causal_lm, "She sat on the river ", top_k=4)
    tok, _, _, out = reference(causal_lm, "She sat on the river")
    probs = torch.softmax(out.logits[0, -1], -1)
    got = [c.prob for c in pred.candidates]
    assert pred.kind == "next" and got == sorted(got, reverse=True) and sum(got) <= 1 + 1e-6
    assert pred.candidates[0].token == \
        gpt._word_piece(readable_tokens(tok, [int(probs.argmax())])[0])
    assert got[0] == pytest.approx(float(probs.max()), rel=1e-5)


def test_gpt_refuses_previous_word_prediction_and_names_the_models_that_can(causal_lm):
    engine = Engine(device="cpu")
    with pytest.raises(UnsupportedPrediction, match="cannot predict the previous word; models "
                                                    "that can: .*elmo-brown") as err:
        engine.predict_previous(causal_lm, "raised rates.")
    # only models whose family reads right to left and whose checkpoint ships its LM
    named = str(err.value).split("models that can: ")[1].split(", ")
    assert named == engine.models_that("previous_word")
    assert all(engine.registry[m].family == "elmo" for m in named)
    assert "elmo-original" not in named             # AllenNLP's file has no LM softmax


def _sentence_logprob(path: str, text: str) -> float:
    """log P(text) under the checkpoint, straight through transformers (tokens 2..n given the
    ones before; the first token is the same for every candidate)."""
    tok, _, ids, out = reference(path, text)
    logp = torch.log_softmax(out.logits[0, :-1].double(), -1)
    return float(logp.gather(-1, ids["input_ids"][0, 1:, None]).sum())


def test_gpt_fills_a_blank_by_reranking_with_the_whole_sentence(causal_lm):
    text = "The bank raised [MASK] rates today."
    pred = Engine(device="cpu").predict_masked(causal_lm, text, top_k=5)
    assert pred.kind == "masked" and "re-ranked by the whole sentence" in pred.method
    words = [c.token for c in pred.candidates]
    assert len(words) == 5 and all(w and " " not in w for w in words)
    scores = np.array([_sentence_logprob(causal_lm, text.replace("[MASK]", w)) for w in words])
    # best first by the whole sentence, and each share is a softmax over candidates' scores
    assert list(np.argsort(-scores, kind="stable")) == list(range(5))
    ratio = pred.candidates[0].prob / pred.candidates[1].prob
    assert np.log(ratio) == pytest.approx(scores[0] - scores[1], abs=1e-3)


def _logprobs_after_start(path: str, texts: list[str]) -> np.ndarray:
    """log P(text | start) for each text, straight through transformers: every token after a
    document-start token (the tokenizer's own BOS where it adds one, else <|endoftext|>)."""
    tok, model = checkpoint(path)
    out = []
    for text in texts:
        ids = tok(text)["input_ids"]
        if ids[0] not in tok.all_special_ids:
            ids = [tok.convert_tokens_to_ids("<|endoftext|>"), *ids]
        ids = torch.tensor([ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
        out.append(float(logp.gather(-1, ids[0, 1:, None]).sum()))
    return np.array(out)


@pytest.mark.parametrize("text", ["The [MASK] raised rates today.",
                                  "The bank [MASK] rates today."])
def test_a_blank_after_one_or_two_words_is_scored_after_the_start_token(causal_lm, text):
    """With gpt.fill.FILL_START_WORDS or fewer words before the blank the sentence is scored as the
    start of a document (<|endoftext|> first); "The bank raised [MASK] ..." above is not."""
    assert len(text.split("[MASK]")[0].split()) <= gpt.fill.FILL_START_WORDS
    pred = Engine(device="cpu").predict_masked(causal_lm, text, top_k=4)
    words = [c.token for c in pred.candidates]
    scores = _logprobs_after_start(causal_lm, [text.replace("[MASK]", w) for w in words])
    assert list(np.argsort(-scores, kind="stable")) == list(range(len(words)))
    for k in (1, 2, 3):
        ratio = pred.candidates[0].prob / pred.candidates[k].prob
        assert np.log(ratio) == pytest.approx(scores[0] - scores[k], abs=1e-3)


def test_the_start_token_is_looked_up_once_per_model_not_per_candidate(causal_lm):
    """Each candidate sentence of a blank near the start is tokenised after the start token;
    finding that token builds the whole vocabulary's dict, which per candidate (about 200 a
    blank) doubled a SmolLM2 fill on 2 cores."""
    engine = Engine(device="cpu", cache_size=0)
    tok = engine.adapter(causal_lm, progress=False).tokenizer
    calls = []
    real = tok.get_vocab
    tok.get_vocab = lambda: calls.append(1) or real()
    for text in ("The [MASK] raised rates today.", "The bank [MASK] rates today."):
        assert engine.predict_masked(causal_lm, text, top_k=4).candidates
    assert len(calls) <= 1


def test_the_fill_in_the_blank_prompt_proposes_words_the_left_context_does_not(causal_lm,
                                                                              monkeypatch):
    """Candidates come from the left context and from the prompt that reads the whole
    sentence; every one is still ranked by the sentence's own log-probability. (The tiny
    models take 64 positions: the real prompt does not fit, so a short one stands in, and the
    real one is left out with the left pool still answering.)"""
    from engine.families.gpt import fill as gpt_family
    from engine.text import split_words

    engine = Engine(device="cpu")
    adapter = engine.adapter(causal_lm)
    text = "The [MASK] raised rates today."
    wt = split_words(text)
    assert adapter._prompt_words(wt, at_start=False) == []          # too long for 64 positions
    monkeypatch.setattr(gpt_family, "FILL_PROMPT", "{sentence}\n")
    left_pool = adapter._candidate_words(adapter._ids("The", True),   # one word: after the start
                                         gpt_family.FILL_CANDIDATES)
    prompt_pool = adapter._prompt_words(wt, at_start=False)
    assert prompt_pool and set(prompt_pool) - set(left_pool)
    pred = engine.predict_masked(causal_lm, text, top_k=gpt_family.FILL_CANDIDATES)
    n_extra = len(set(prompt_pool) - set(left_pool))
    assert (f"top {len(left_pool)} words from the left context and {n_extra} more from a "
            "fill-in-the-blank prompt") in pred.method
    words = [c.token for c in pred.candidates]
    assert set(words) <= set(left_pool) | set(prompt_pool)
    top = words[:3]
    scores = list(_logprobs_after_start(causal_lm, [text.replace("[MASK]", w) for w in top]))
    assert scores == sorted(scores, reverse=True)
    adapter.prompt_candidates = 0               # the left pool alone, as before the prompt
    try:
        only_left = engine.predict_masked(causal_lm, text, top_k=gpt_family.FILL_CANDIDATES)
    finally:
        adapter.prompt_candidates = gpt_family.FILL_PROMPT_CANDIDATES
    assert {c.token for c in only_left.candidates} == set(left_pool)


def test_fill_probabilities_do_not_depend_on_how_many_are_listed(causal_lm, monkeypatch):
    """They are shares among a fixed pool of candidates: with top_k above FILL_CANDIDATES the
    pool grew and every listed word's probability fell (gpt-brown, "side": 0.229 at 10,
    0.143 at 1000). The tiny vocabulary is small: a pool of 6 here."""
    from engine.families.gpt import fill as gpt_family

    monkeypatch.setattr(gpt_family, "FILL_CANDIDATES", 6)
    engine = Engine(device="cpu")
    text = "The bank [MASK] rates today."
    few = engine.predict_masked(causal_lm, text, top_k=3)
    many = engine.predict_masked(causal_lm, text, top_k=15)
    assert few.candidates == many.candidates[:3]
    assert len(many.candidates) == 6 and "top 6 words" in many.method


def test_suffixes_scored_on_a_shared_left_cache_match_whole_sequences(causal_lm):
    """The fill-a-blank fast path runs the left context once and scores a batch of suffixes of
    different lengths on its key/value cache: the same log-probabilities as whole sequences."""
    adapter = Engine(device="cpu").adapter(causal_lm)
    left = adapter._ids("The bank raised", False)
    suffixes = [adapter._ids("The bank raised" + end, False)[len(left):]
                for end in (" rates.", " its rates today.", " a", " the river bank and the town.")]
    assert len({len(s) for s in suffixes}) > 2
    scores, after = adapter._after_left(left, suffixes, chunk=3)    # two chunks, padded
    full = adapter._token_logprobs([left + s for s in suffixes])
    for k, s in enumerate(suffixes):
        want = full[k, len(left) - 1: len(left) + len(s) - 1]
        np.testing.assert_allclose(scores[k], want.numpy(), atol=1e-4)
        with torch.inference_mode():
            logits = adapter.model(input_ids=torch.tensor([left + s])).logits
        assert after[k] == int(logits[0, -1].argmax())


def test_gpt_left_only_fill_ignores_the_right_side(causal_lm):
    engine = Engine(device="cpu")
    a = engine.predict_masked(causal_lm, "The bank raised [MASK] rates today.", sides="left")
    b = engine.predict_masked(causal_lm, "The bank raised [MASK] of the river.", sides="left")
    c = engine.predict_masked(causal_lm, "The bank raised [MASK] of the river.", sides="both")
    assert a.candidates == b.candidates and "left context alone" in a.method
    assert [x.token for x in c.candidates] != [x.token for x in b.candidates] or \
        [x.prob for x in c.candidates] != pytest.approx([x.prob for x in b.candidates])


# -- GGUF cache ---------------------------------------------------------------------------
@pytest.fixture
def fake_gguf(model_dir: Path, monkeypatch) -> Path:
    monkeypatch.setenv("CTXLENS_CACHE", str(model_dir / "cache"))
    f = model_dir / "tiny.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    return f


def counting_converter(zoo, calls: list):
    def convert(dest: Path) -> None:
        calls.append(dest)
        zoo.copy("causal:gpt2", dest)
    return convert


def test_gguf_conversion_is_cached_and_reused(zoo, fake_gguf):
    calls: list = []
    first, hit1 = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    second, hit2 = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    assert (hit1, hit2) == (False, True) and len(calls) == 1 and first == second
    assert (first / "model.safetensors").exists() and (first / "tokenizer.json").exists()
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".tmp-")]


def test_changed_gguf_file_converts_again_and_drops_the_old_copy(zoo, fake_gguf):
    calls: list = []
    old, _ = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    st = fake_gguf.stat()
    fake_gguf.write_bytes(b"GGUF" + bytes(59) + b"\x01")    # same size, other content
    os.utime(fake_gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))   # a coarse clock
    new, hit = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    assert not hit and new != old and len(calls) == 2
    assert new.exists() and not old.exists()


def test_the_same_gguf_installed_twice_shares_one_conversion(zoo, fake_gguf, tmp_path):
    # a second checkout or a CI clone installs the same wheel with its own file times: it must
    # find the first install's conversion, not convert again and evict it
    calls: list = []
    first, _ = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    other = tmp_path / "other-venv" / "tiny.gguf"
    other.parent.mkdir()
    other.write_bytes(fake_gguf.read_bytes())
    st = fake_gguf.stat()
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    second, hit = fetch.ensure_converted("tiny", other, counting_converter(zoo, calls), False)
    assert hit and second == first and len(calls) == 1 and first.exists()


def test_a_killed_conversion_s_leftovers_are_swept_but_a_running_one_is_kept(zoo, fake_gguf):
    parent = fetch.converted_dir("tiny", fake_gguf).parent
    parent.mkdir(parents=True)
    abandoned, running = parent / ".tmp-killed", parent / ".tmp-running"
    for d in (abandoned, running):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half")
    hours_ago = abandoned.stat().st_mtime - 2 * folders.STALE_TMP_S
    os.utime(abandoned, (hours_ago, hours_ago))
    fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, []), False)
    assert not abandoned.exists() and running.exists()


def test_failed_conversion_leaves_no_partial_cache(zoo, fake_gguf):
    def broken(dest: Path) -> None:
        (dest / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        fetch.ensure_converted("tiny", fake_gguf, broken, False)
    assert list(fetch.converted_dir("tiny", fake_gguf).parent.iterdir()) == []
    calls: list = []
    _, hit = fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, calls), False)
    assert not hit and len(calls) == 1


def test_loading_a_gguf_model_reads_the_converted_cache(zoo, fake_gguf):
    fetch.ensure_converted("tiny", fake_gguf, counting_converter(zoo, []), False)
    adapter = Engine(device="cpu")._load_dir("tiny", "gpt", fake_gguf.parent, fake_gguf.name,
                                              progress=False)
    assert adapter.gguf_cache_hit is True
    assert adapter.info.n_layers == LAYERS and adapter.info.has_logit_lens


def test_a_gguf_file_for_an_encoder_family_is_refused_in_one_line(fake_gguf):
    with pytest.raises(EngineError, match="GGUF files hold causal LMs"):
        Engine(device="cpu")._load_dir("tiny", "bert", fake_gguf.parent, fake_gguf.name,
                                       progress=False)


def write_tiny_gguf(path: Path) -> Path:
    """A 2-layer Llama GGUF with Q8_0 matrices and the byte-level tokenizer, written with `gguf`."""
    import json

    import gguf

    tok = byte_level_tokenizer()
    vocab = tok.backend_tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = [m if isinstance(m, str) else " ".join(m)
              for m in json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]]
    kv_heads, ffn, head_dim = 2, 64, DIM // HEADS
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(DIM)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(ffn)
    w.add_head_count(HEADS)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t == "<|endoftext|>" else gguf.TokenType.NORMAL
                       for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|endoftext|>"])
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> None:
        if len(shape) == 1:
            w.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        q = gguf.quants.quantize((0.1 * rng.standard_normal(shape)).astype(np.float32),
                                 gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    tensor("token_embd.weight", len(tokens), DIM)
    tensor("output_norm.weight", DIM)
    tensor("output.weight", len(tokens), DIM)
    for i in range(LAYERS):
        for name, shape in [("attn_norm", (DIM,)), ("attn_q", (DIM, DIM)),
                            ("attn_k", (kv_heads * head_dim, DIM)),
                            ("attn_v", (kv_heads * head_dim, DIM)),
                            ("attn_output", (DIM, DIM)), ("ffn_norm", (DIM,)),
                            ("ffn_gate", (ffn, DIM)), ("ffn_up", (ffn, DIM)),
                            ("ffn_down", (DIM, ffn))]:
            tensor(f"blk.{i}.{name}.weight", *shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_folder_is_dequantised_once_and_matches_transformers(model_dir, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("CTXLENS_CACHE", str(model_dir / "cache"))
    folder = model_dir / "tiny-gguf"
    folder.mkdir()
    write_tiny_gguf(folder / "tiny.gguf")
    first = Engine(device="cpu")
    pred = first.predict_next(str(folder), "She sat on the river", top_k=3)
    second = Engine(device="cpu").adapter(str(folder), progress=False)
    assert first.adapter(str(folder)).gguf_cache_hit is False and second.gguf_cache_hit is True
    cached = list((model_dir / "cache" / "converted").glob("*/tiny-*/model.safetensors"))
    assert len(cached) == 1

    tok = AutoTokenizer.from_pretrained(folder, gguf_file="tiny.gguf")
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file="tiny.gguf").eval()
    with torch.no_grad():
        logits = model(**tok("She sat on the river", return_tensors="pt")).logits[0, -1]
    probs = torch.softmax(logits, -1).topk(3)
    assert [c.token for c in pred.candidates] == \
        [gpt._word_piece(t) for t in readable_tokens(tok, probs.indices.tolist())]
    np.testing.assert_allclose([c.prob for c in pred.candidates], probs.values.numpy(), rtol=1e-5)


def test_next_word_pieces_read_as_words_or_marked_continuations(causal_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pred = Engine(device="cpu").predict_next(causal_lm, TEXT, top_k=40)
    tok = AutoTokenizer.from_pretrained(causal_lm)
    model = AutoModelForCausalLM.from_pretrained(causal_lm).eval()
    with torch.no_grad():
        logits = model(**tok(TEXT.rstrip(), return_tensors="pt")).logits[0, -1]
    ids = torch.topk(torch.softmax(logits, -1), 40).indices.tolist()
    checked = 0
    for cand, i in zip(pred.candidates, ids):
        raw = tok.convert_ids_to_tokens([i])[0]           # "Ġall" / "▁all": a word start
        body = raw.lstrip("Ġ▁")
        if not (body.isascii() and body.isalnum()):
            continue
        checked += 1
        assert cand.token == (body if raw[0] in "Ġ▁" else "…" + body)
    assert checked >= 5
    assert "'…x' continues the last word" in pred.method


def test_a_file_is_hashed_once_while_its_size_and_mtime_hold(fake_gguf, monkeypatch):
    first = fetch.content_digest(fake_gguf)
    fetch._digests.cache_clear()                 # a new process: only the file is left
    with monkeypatch.context() as m:
        m.setattr(fetch.hashlib, "file_digest", None)            # hashing again would fail
        assert fetch.content_digest(fake_gguf) == first
    st = fake_gguf.stat()
    fake_gguf.write_bytes(b"GGUF" + bytes(60) + b"\x02")
    os.utime(fake_gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert fetch.content_digest(fake_gguf) != first


def test_batches_bounded_in_bytes_score_as_one_batch(causal_lm, monkeypatch):
    """A pass batches as many rows as BATCH_BYTES holds (logits and key/value cache per row):
    one row at a time gives the same log-probabilities as all rows at once."""
    from engine.families import gpt

    adapter = Engine(device="cpu").adapter(causal_lm)
    left = adapter._ids("The bank raised", False)
    suffixes = [adapter._ids("The bank raised" + end, False)[len(left):]
                for end in (" rates.", " its rates today.", " a", " the river bank.")]
    whole = adapter._token_logprobs([left + s for s in suffixes])
    scores, after = adapter._after_left(left, suffixes)
    assert adapter._batch_rows(8, 8, 64) == 64          # a tiny model: every row at once
    monkeypatch.setattr(gpt.fill, "BATCH_BYTES", 1)
    assert adapter._batch_rows(8, 8, 64) == 1
    np.testing.assert_allclose(adapter._token_logprobs([left + s for s in suffixes]).numpy(),
                               whole.numpy(), atol=1e-5)
    one_scores, one_after = adapter._after_left(left, suffixes)
    assert one_after == after
    for a, b in zip(one_scores, scores):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_a_blank_is_re_ranked_by_at_most_fill_right_tokens_after_it(causal_lm, monkeypatch):
    """A long right side is cut for re-ranking (each candidate runs its own pass over it) and
    the method says so; what lies beyond the cut changes nothing (the candidates here come
    from the left context alone: the fill-in-the-blank prompt reads the whole sentence)."""
    from engine.families import gpt

    engine = Engine(device="cpu")
    engine.adapter(causal_lm).prompt_candidates = 0
    a = "The bank raised [MASK] rates today. A dog."
    b = "The bank raised [MASK] rates today. The sea."
    full_a, full_b = engine.predict_masked(causal_lm, a), engine.predict_masked(causal_lm, b)
    assert "re-ranked by the whole sentence" in full_a.method
    assert full_a.candidates != full_b.candidates
    monkeypatch.setattr(gpt.fill, "FILL_RIGHT_TOKENS", 3)
    engine = Engine(device="cpu")
    engine.adapter(causal_lm).prompt_candidates = 0
    cut_a, cut_b = engine.predict_masked(causal_lm, a), engine.predict_masked(causal_lm, b)
    assert "up to 3 tokens after the blank" in cut_a.method
    assert [c.token for c in cut_a.candidates] == [c.token for c in cut_b.candidates]
    assert [c.prob for c in cut_a.candidates] == pytest.approx([c.prob for c in cut_b.candidates])


def test_a_candidate_pool_runs_its_left_context_once(causal_lm, monkeypatch):
    """The first guess and every extension step share one pass over the left context: for
    the fill-in-the-blank prompt that context is the whole sentence (a 128-word Arabic one
    ran its ~600 tokens three times: 36 s of SmolLM2's 2-core fill, 27 s once)."""
    from engine.families import gpt

    adapter = Engine(device="cpu").adapter(causal_lm)
    left = adapter._ids("The bank raised its rates and the river", True)
    words = adapter._candidate_words(left, 6)
    widths = []
    real = adapter.model.forward
    monkeypatch.setattr(adapter.model, "forward",
                        lambda *a, **k: widths.append(k["input_ids"].shape[1]) or real(*a, **k))
    monkeypatch.setattr(gpt.fill, "FILL_EXTEND_STEPS", 2)
    assert adapter._candidate_words(left, 6) == words
    assert widths.count(len(left)) == 1 and len(widths) >= 2


def test_only_words_that_grew_are_extended_again_with_the_same_words(causal_lm, monkeypatch):
    """A word whose next token starts a new word would get the same token in every later
    step: each step runs only the words the step before extended, and ends with the words that
    extending every word every step gives (the prompt's 100 words over a 600-token sentence:
    9.3 -> 6.2 s of SmolLM2 on 2 cores). The reference reads the model and its tokenizer
    directly, one plain forward pass per word and step."""
    import re

    from engine.families import gpt

    monkeypatch.setattr(gpt.fill, "FILL_EXTEND_STEPS", 3)
    adapter = Engine(device="cpu").adapter(causal_lm)
    tok, model = adapter.tokenizer, adapter.model
    left = adapter._ids("The bank raised its rates and the river", True)
    rows = []
    real = adapter._after_left
    monkeypatch.setattr(adapter, "_after_left", lambda lft, suffixes, **k:
                        rows.append(len(suffixes)) or real(lft, suffixes, **k))
    got = adapter._candidate_words(left, 12)

    def next_token(ids: list[int]) -> int:
        with torch.inference_mode():
            return int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())

    def starts_word(tid: int) -> bool:       # byte-level 'Ġ' or SentencePiece '▁'
        return tok.convert_ids_to_tokens(tid)[:1] in ("\u0120", "\u2581")

    # the pool: the 12 likeliest distinct whole words that start after the left context
    with torch.inference_mode():
        probs = model(input_ids=torch.tensor([left])).logits[0, -1].softmax(-1)
    words, seen = [], set()
    for tid in torch.argsort(probs, descending=True)[:200].tolist():
        word = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(tid)]).strip()
        if starts_word(tid) and re.fullmatch(r"[^\W_]+(?:['’-][^\W_]+)*", word) \
                and word not in seen:
            seen.add(word)
            words.append([tid])
        if len(words) == 12:
            break
    # every word extended at every step while its likeliest next token continues it
    grew = []
    for _ in range(3):
        grew.append(0)
        for w in words:
            nxt = next_token(left + w)
            piece = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(nxt)])
            if not starts_word(nxt) and re.fullmatch(r"[^\W_]+", piece):
                w.append(nxt)
                grew[-1] += 1
    # some words grow and some do not, so which ones run again is tested
    assert 0 < grew[0] < len(words), grew
    assert got == list(dict.fromkeys(tok.decode(w).strip() for w in words))
    assert rows[0] == len(words)
    assert rows[1:] == grew[:len(rows) - 1]