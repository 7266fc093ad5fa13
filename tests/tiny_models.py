"""Tiny random real checkpoints, built on disk by the tests (no hub, no bundled weights).

One copy of each builder, shared by the engine tests (tests/engine/test_bert.py, test_gpt.py) and
the Streamlit app tests (tests/app/conftest.py): a WordPiece BERT (with or without the masked-LM
head), a byte-level GPT-2 or SentencePiece-style Llama, and an AllenNLP-layout ELMo with an LM
softmax. Vocabularies are built from the sentences a test passes, so its words are in them.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import torch

DIM, LAYERS, HEADS = 32, 2, 4

BERT_SENTENCES = (
    "The bank raised its interest rates.",
    "She sat on the river bank and watched the water.",
    "They were playing near the riverbank all day.",
)
# Pieces that are not whole words, so some words split: "riverbank" -> river ##bank.
SUFFIXES = ("##bank", "##ing", "##s", "##ed")
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

GPT_CORPUS = (
    "The bank raised its interest rates.",
    "She sat on the river bank and watched the water.",
    "They were playing near the riverbank all day!",
    "Money, money: the bank keeps it safe?",
) * 4


def _words(sentences: Sequence[str]) -> set[str]:
    return {w.lower() for s in sentences for w in re.findall(r"\w+|[^\w\s]", s)}


# -- BERT ---------------------------------------------------------------------------------
def wordpiece_tokenizer(sentences: Sequence[str] = BERT_SENTENCES):
    """A BERT-style fast tokenizer whose vocabulary is the words of `sentences` plus SUFFIXES
    ("riverbank" and "playing" are left out so that they split into pieces)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted(_words(sentences) - {"riverbank", "playing"} - {"play"}) + ["play"]
    vocab = {t: i for i, t in enumerate(list(SPECIALS) + words + list(SUFFIXES))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]),
                                                 ("[SEP]", vocab["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def save_bert(path: Path, masked_lm: bool = True,
              sentences: Sequence[str] = BERT_SENTENCES) -> Path:
    from transformers import BertConfig, BertForMaskedLM, BertModel

    torch.manual_seed(0)
    tok = wordpiece_tokenizer(sentences)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=DIM, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=64,
                     max_position_embeddings=64)
    model = (BertForMaskedLM if masked_lm else BertModel)(cfg).eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


# -- GPT ----------------------------------------------------------------------------------
def byte_level_tokenizer(corpus: Sequence[str] = GPT_CORPUS, vocab_size: int = 320):
    """GPT-2 style: byte-level BPE, no BOS added, spaces carried as 'Ġ'."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>")


def sentencepiece_tokenizer(corpus: Sequence[str] = GPT_CORPUS):
    """Llama style: BPE over '▁'-marked words, with a BOS token put first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(),
                                                 pre_tokenizers.Punctuation()])
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=120, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>")


def save_causal_lm(path: Path, arch: str, corpus: Sequence[str] = GPT_CORPUS,
                   vocab_size: int = 320) -> Path:
    """A tiny GPT-2 (arch "gpt2") or Llama (arch "llama") with a non-trivial final norm."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        tok = byte_level_tokenizer(corpus, vocab_size)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=DIM, n_layer=LAYERS,
                                           n_head=HEADS, n_positions=64,
                                           bos_token_id=tok.bos_token_id,
                                           eos_token_id=tok.eos_token_id))
        norm = model.transformer.ln_f
    else:
        tok = sentencepiece_tokenizer(corpus)
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tok), hidden_size=DIM, intermediate_size=64, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, num_key_value_heads=2, max_position_embeddings=64,
            tie_word_embeddings=False))
        norm = model.model.norm
    with torch.no_grad():  # a non-trivial final norm, so applying it twice would show
        norm.weight.uniform_(0.5, 2.0)
        if getattr(norm, "bias", None) is not None:
            norm.bias.uniform_(-0.5, 0.5)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


# -- ELMo ---------------------------------------------------------------------------------
def save_elmo(path: Path, sentences: Sequence[str], seed: int = 0) -> Path:
    """The tiny ELMo of tests/engine/elmo_tiny.py, with an LM softmax over the words of
    `sentences` (so forward and backward predictions name real words)."""
    from engine.families.elmo.modules import ElmoBiLm
    from engine.families.elmo.weights import save_allennlp
    from tests.engine.elmo_tiny import TINY_OPTIONS, tiny_softmax

    vocab = ("<S>", "</S>", "<UNK>", *sorted(_words(sentences)))
    model = ElmoBiLm.from_options(TINY_OPTIONS, seed=seed, init_scale=0.5)
    softmax = tiny_softmax(TINY_OPTIONS["lstm"]["projection_dim"], seed, vocab)
    return save_allennlp(model, Path(path), TINY_OPTIONS, softmax=softmax)
