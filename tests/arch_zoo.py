"""Tiny random checkpoints of the common encoder and decoder architectures, built by transformers
from a config at test time (no hub, no network), each with a tokenizer of the kind its real
checkpoints use: WordPiece (BERT, DistilBERT, ELECTRA), byte-level BPE with 'Ġ' (RoBERTa,
ModernBERT, GPT-2, GPT-NeoX, OPT, Qwen2) or SentencePiece-style '▁' pieces (XLM-R, ALBERT, DeBERTa-v2, Llama, Mistral, Phi-3,
Gemma-2).

`save_arch(name, folder)` writes one; `into_hub_cache(folder, cache, repo_id)` lays a folder out
as the Hugging Face cache holds a downloaded repo, so the same checkpoint is also served as a hub
id offline.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch

from tests.tiny_models import GPT_CORPUS, byte_level_tokenizer, sentencepiece_tokenizer, \
    wordpiece_tokenizer

DIM, LAYERS, HEADS, FFN, POS = 32, 2, 4, 64, 96

# name -> (model class name in transformers, tokenizer kind, masked LM?)
ENCODERS = {
    "bert": ("BertForMaskedLM", "wordpiece"),
    "roberta": ("RobertaForMaskedLM", "byte"),
    "xlm-roberta": ("XLMRobertaForMaskedLM", "meta"),
    "distilbert": ("DistilBertForMaskedLM", "wordpiece"),
    "albert": ("AlbertForMaskedLM", "meta"),
    "electra": ("ElectraForMaskedLM", "wordpiece"),
    "deberta-v2": ("DebertaV2ForMaskedLM", "meta"),
    "modernbert": ("ModernBertForMaskedLM", "byte"),
}
DECODERS = {
    "gpt2": ("GPT2LMHeadModel", "byte"),
    "gpt-neox": ("GPTNeoXForCausalLM", "byte"),
    "opt": ("OPTForCausalLM", "byte"),
    "llama": ("LlamaForCausalLM", "meta"),
    "qwen2": ("Qwen2ForCausalLM", "byte"),
    "mistral": ("MistralForCausalLM", "meta"),
    "phi3": ("Phi3ForCausalLM", "meta"),
    "gemma2": ("Gemma2ForCausalLM", "meta"),
}
ARCHITECTURES = {**ENCODERS, **DECODERS}
# Gemma-2's soft-caps, set low so that random weights reach them (its real ones: 50 and 30)
GEMMA_ATTN_SOFTCAP, GEMMA_FINAL_SOFTCAP = 2.0, 3.0


def _config(name: str, vocab: int, tok):
    import transformers as tf

    common = dict(vocab_size=vocab, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  hidden_size=DIM, intermediate_size=FFN, max_position_embeddings=POS)
    ids = dict(pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    if name == "bert":
        return tf.BertConfig(**common)
    if name == "roberta":
        return tf.RobertaConfig(**{**common, "max_position_embeddings": POS + 2}, **ids)
    if name == "xlm-roberta":
        return tf.XLMRobertaConfig(**{**common, "max_position_embeddings": POS + 2}, **ids)
    if name == "distilbert":
        return tf.DistilBertConfig(vocab_size=vocab, dim=DIM, n_layers=LAYERS, n_heads=HEADS,
                                   hidden_dim=FFN, max_position_embeddings=POS,
                                   pad_token_id=ids["pad_token_id"])
    if name == "albert":   # factorised embeddings: 16 wide, projected to the 32 of the blocks
        return tf.AlbertConfig(**common, embedding_size=16, **ids)
    if name == "electra":
        return tf.ElectraConfig(**common, embedding_size=16)
    if name == "deberta-v2":   # as DeBERTa-v3 ships: disentangled relative attention
        return tf.DebertaV2Config(**common, relative_attention=True, position_buckets=16,
                                  pos_att_type=["p2c", "c2p"], max_relative_positions=-1,
                                  position_biased_input=False, **ids)
    if name == "modernbert":
        return tf.ModernBertConfig(**common, global_attn_every_n_layers=2, local_attention=8,
                                   cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                                   **ids)
    if name == "gpt2":
        return tf.GPT2Config(vocab_size=vocab, n_embd=DIM, n_layer=LAYERS, n_head=HEADS,
                             n_positions=POS, **ids)
    if name == "gpt-neox":     # rotary on a quarter of each head, as Pythia
        return tf.GPTNeoXConfig(**common, rotary_pct=0.25, **ids)
    if name == "opt":
        return tf.OPTConfig(vocab_size=vocab, hidden_size=DIM, num_hidden_layers=LAYERS,
                            num_attention_heads=HEADS, ffn_dim=FFN, max_position_embeddings=POS,
                            word_embed_proj_dim=DIM, **ids)
    gqa = dict(num_key_value_heads=2, tie_word_embeddings=False)
    if name == "llama":
        return tf.LlamaConfig(**common, **gqa, **ids)
    if name == "qwen2":
        return tf.Qwen2Config(**common, **gqa, **ids)
    if name == "mistral":
        return tf.MistralConfig(**common, **gqa, sliding_window=8, **ids)
    if name == "phi3":
        return tf.Phi3Config(**common, num_key_value_heads=2, **ids)
    if name == "gemma2":
        return tf.Gemma2Config(**common, **gqa, head_dim=DIM // HEADS,
                               query_pre_attn_scalar=DIM // HEADS, sliding_window=8,
                               attn_logit_softcapping=GEMMA_ATTN_SOFTCAP,
                               final_logit_softcapping=GEMMA_FINAL_SOFTCAP, **ids)
    raise KeyError(name)


def mlm_tokenizer(kind: str, corpus=GPT_CORPUS):
    """A masked LM's BPE tokenizer: byte-level ('Ġ', RoBERTa) or '▁' pieces (XLM-R), with
    <s> text </s> around each text and a <mask> that takes the space before it."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, \
        trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if kind == "byte":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                     pre_tokenizers.Punctuation()])
        tok.decoder = decoders.Metaspace()
        alphabet = []
    tok.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=alphabet))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", cls_token="<s>", sep_token="</s>",
        mask_token=AddedToken("<mask>", lstrip=True, special=True))


def _tokenizer(name: str):
    kind = ARCHITECTURES[name][1]
    if name in ENCODERS:
        if kind == "wordpiece":
            return wordpiece_tokenizer(GPT_CORPUS)
        return mlm_tokenizer(kind)
    if kind == "byte":
        tok = byte_level_tokenizer(GPT_CORPUS, 320)
        tok.pad_token = tok.eos_token
        return tok
    tok = sentencepiece_tokenizer(GPT_CORPUS)
    tok.pad_token = tok.unk_token
    return tok


def save_arch(name: str, folder: Path) -> Path:
    """A tiny random `name` checkpoint (safetensors + fast tokenizer) in `folder`."""
    import transformers as tf

    torch.manual_seed(0)
    tok = _tokenizer(name)
    cfg = _config(name, len(tok), tok)
    model = getattr(tf, ARCHITECTURES[name][0])(cfg).eval()
    with torch.no_grad():   # weights large enough that norms, caps and heads all matter
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    folder = Path(folder)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def into_hub_cache(folder: Path, cache: Path, repo_id: str) -> Path:
    """The files of `folder` laid out as huggingface_hub caches a downloaded repo under `cache`
    (HF_HUB_CACHE): blobs named by content, a snapshot of links, refs/main naming it."""
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snap = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(Path(folder).iterdir()):
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        shutil.copyfile(f, blob)
        (snap / f.name).symlink_to(Path("../../blobs") / blob.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


# -- the architecture x view matrix (tests/engine/test_architectures.py observes each cell) ----
# Where the neuron view says why it cannot decompose the scores (the message it must match)
NEURON_VIEW_REFUSED = {"deberta-v2": "relative-position"}
LABELS = {"bert": "BERT", "roberta": "RoBERTa", "xlm-roberta": "XLM-R", "distilbert": "DistilBERT",
          "albert": "ALBERT", "electra": "ELECTRA", "deberta-v2": "DeBERTa-v2",
          "modernbert": "ModernBERT", "gpt2": "GPT-2", "gpt-neox": "GPT-NeoX", "opt": "OPT",
          "llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral", "phi3": "Phi-3",
          "gemma2": "Gemma-2"}
TOKENIZER_LABELS = {"wordpiece": "WordPiece", "byte": "byte-level BPE (Ġ)",
                    "meta": "SentencePiece-style (▁)"}
VIEWS = ("folder / hub id", "hidden states, `--layers`", "attention (tokens, words)",
         "neuron view", "masked fill, `--rescore`", "next word, logit lens")
# set to write the rendered matrix into docs/models.md instead of comparing (python -m
# tests.arch_zoo)
WRITE_MATRIX_ENV = "CTXLENS_WRITE_ARCH_MATRIX"
MATRIX_HEAD = "| architecture | checkpoint, tokenizer | "


def matrix_rows(observed: dict[str, dict[str, str]]) -> list[tuple[str, ...]]:
    """One row per architecture from what the tests observed: the model class and tokenizer
    the engine loaded, and each view's cell."""
    return [(LABELS[name], f"`{cells['checkpoint']}`, "
                           f"{TOKENIZER_LABELS.get(cells['tokenizer'], cells['tokenizer'])}",
             *(cells[view] for view in VIEWS))
            for name, cells in ((n, observed[n]) for n in ARCHITECTURES)]


def matrix_markdown(observed: dict[str, dict[str, str]]) -> str:
    head = (MATRIX_HEAD + " | ".join(VIEWS) + " |\n" + "|---" * (len(VIEWS) + 2) + "|\n")
    return head + "".join("| " + " | ".join(r) + " |\n" for r in matrix_rows(observed))


def write_matrix(page: Path, observed: dict[str, dict[str, str]]) -> None:
    """Replace the matrix in `page` (from its head row to the first line that is not a table
    row) with the one rendered from `observed`."""
    lines = page.read_text().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith(MATRIX_HEAD))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")),
               len(lines))
    page.write_text("".join(lines[:start]) + matrix_markdown(observed) + "".join(lines[end:]))


if __name__ == "__main__":
    # the matrix is what the tests saw: run them, and let the last one write the table
    import os
    import sys

    import pytest

    os.environ[WRITE_MATRIX_ENV] = "1"
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider",
                          str(Path(__file__).parent / "engine" / "test_architectures.py")]))
