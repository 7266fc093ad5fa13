"""The tests' tiny random real checkpoints, built on disk (no hub, no bundled weights), once a
session.

Builders: a WordPiece BERT with or without the masked-LM head (save_bert), a GPT-2 or Llama
with a non-trivial final norm (save_causal_lm), an AllenNLP-layout ELMo with an LM softmax
(save_elmo), and one checkpoint of each common encoder and decoder architecture, each with the
tokenizer kind its real checkpoints use (save_arch). Vocabularies are built from the sentences
a test passes, so its words are in them.

`Zoo` builds each (kind, options) once into a folder shared by the whole session, pytest-xdist's
workers included (tests/conftest.py's session-scoped `zoo` fixture): `zoo.path(kind, ...)` is
that folder, for a test that only reads it (an adapter's load, a tokenizer, a copy into a hub
cache); `zoo.copy(kind, dest, ...)` is a copy at `dest`, for a test that writes into the folder
or serves it from a configured model directory (CTXLENS_MODEL_DIRS: the zoo's own folder is
never configured, so what a page or command lists is what the test put there).

`python -m tests.zoo` runs tests/engine/test_architectures.py and writes the architecture x
view matrix it observes into docs/models.md.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import torch

DIM, LAYERS, HEADS, FFN, POS = 32, 2, 4, 64, 96

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


# -- tokenizers ---------------------------------------------------------------------------
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


def mlm_tokenizer(kind: str, corpus: Sequence[str] = GPT_CORPUS):
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


# -- BERT ---------------------------------------------------------------------------------
def save_bert(path: Path, masked_lm: bool = True,
              sentences: Sequence[str] = BERT_SENTENCES) -> Path:
    from transformers import BertConfig, BertForMaskedLM, BertModel

    torch.manual_seed(0)
    tok = wordpiece_tokenizer(sentences)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=DIM, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=FFN,
                     max_position_embeddings=64)
    model = (BertForMaskedLM if masked_lm else BertModel)(cfg).eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)


# -- GPT ----------------------------------------------------------------------------------
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
    elif arch == "llama":
        tok = sentencepiece_tokenizer(corpus)
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tok), hidden_size=DIM, intermediate_size=FFN,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
            max_position_embeddings=64, tie_word_embeddings=False))
        norm = model.model.norm
    else:
        raise KeyError(arch)
    with torch.no_grad():  # a non-trivial final norm, so applying it twice would show
        norm.weight.uniform_(0.5, 2.0)
        if getattr(norm, "bias", None) is not None:
            norm.bias.uniform_(-0.5, 0.5)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)


# -- ELMo ---------------------------------------------------------------------------------
ELMO_OPTIONS = {
    "lstm": {"dim": 12, "projection_dim": 6, "n_layers": 2, "cell_clip": 3, "proj_clip": 3,
             "use_skip_connections": True},
    "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 6], [3, 8]],
                 "n_highway": 2, "n_characters": 262, "max_characters_per_token": 50,
                 "activation": "relu"},
}
ELMO_VOCAB = ("<S>", "</S>", "<UNK>", "the", "bank", "river", "money", "of", "a", "is", ".")


def elmo_softmax(proj_dim: int, seed: int, vocab: Sequence[str] = ELMO_VOCAB):
    from engine.families.elmo.weights import Softmax

    gen = torch.Generator().manual_seed(seed + 1)
    return Softmax(torch.randn(len(vocab), proj_dim, generator=gen),
                   torch.randn(len(vocab), generator=gen), tuple(vocab))


def save_elmo(path: Path, seed: int = 0, sentences: Sequence[str] | None = None,
              with_softmax: bool = True) -> Path:
    """options.json + weights.hdf5 (+ lm_softmax.safetensors, vocab.txt) in AllenNLP's layout.
    The softmax's vocabulary is ELMO_VOCAB, or the words of `sentences` (so that forward and
    backward predictions name real words). The weights are uniform in +-0.5 (larger than the
    trainer's init) so that the LSTM gates and the clips are exercised rather than sitting
    near zero."""
    from engine.families.elmo.modules import ElmoBiLm
    from engine.families.elmo.weights import save_allennlp

    vocab = ELMO_VOCAB if sentences is None else ("<S>", "</S>", "<UNK>",
                                                  *sorted(_words(sentences)))
    model = ElmoBiLm.from_options(ELMO_OPTIONS, seed=seed, init_scale=0.5)
    softmax = (elmo_softmax(ELMO_OPTIONS["lstm"]["projection_dim"], seed, vocab)
               if with_softmax else None)
    return save_allennlp(model, Path(path), ELMO_OPTIONS, softmax=softmax)


# -- one of each common architecture --------------------------------------------------------
# name -> (model class name in transformers, tokenizer kind)
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


def arch_config(name: str, vocab: int, tok):
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


def arch_tokenizer(name: str):
    """The tokenizer save_arch gives `name`: its kind's, trained on GPT_CORPUS."""
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


def save_arch(path: Path, name: str) -> Path:
    """A tiny random `name` checkpoint (safetensors + fast tokenizer) in `path`."""
    import transformers as tf

    torch.manual_seed(0)
    tok = arch_tokenizer(name)
    cfg = arch_config(name, len(tok), tok)
    model = getattr(tf, ARCHITECTURES[name][0])(cfg).eval()
    with torch.no_grad():   # weights large enough that norms, caps and heads all matter
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)


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


# -- the zoo: each checkpoint built once a session --------------------------------------------
# kind -> builder; "causal:llama" and "arch:gpt2" pass the part after the colon on
BUILDERS = {"bert": save_bert, "causal": save_causal_lm, "elmo": save_elmo, "arch": save_arch}


@contextmanager
def _no_progress_bars():
    # save_pretrained draws transformers' "Writing model shards" bar (utils.logging's switch,
    # which also turns huggingface_hub's off); put back as it was, for the tests of the bars
    from transformers.utils import logging

    was = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging.enable_progress_bar()


class Zoo:
    """Each checkpoint built once under `root`, however many tests and processes ask."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.builds = 0          # checkpoints this Zoo built (not those it found built)

    def path(self, kind: str, **options) -> Path:
        """The folder of checkpoint `kind` ("bert", "causal:gpt2", "elmo", "arch:<name>") built
        with `options` (its builder's arguments); shared: only read it."""
        family, _, name = kind.partition(":")
        builder = BUILDERS[family]
        bound = inspect.signature(builder).bind(None, *([name] if name else []), **options)
        bound.apply_defaults()   # a default spelt out or left out is the same checkpoint
        arguments = {k: v for k, v in bound.arguments.items() if k != "path"}
        recipe = json.dumps(arguments, sort_keys=True).encode()
        folder = self.root / f"{kind.replace(':', '-')}-{hashlib.sha1(recipe).hexdigest()[:10]}"
        if not folder.is_dir():
            from filelock import FileLock

            self.root.mkdir(parents=True, exist_ok=True)
            with FileLock(self.root / f".{folder.name}.lock"):
                if not folder.is_dir():      # not built by another worker while this one waited
                    self._build(folder, lambda into: builder(into, **arguments))
        return folder

    def copy(self, kind: str, dest: Path, **options) -> Path:
        """A copy of checkpoint `kind` at `dest` (made if absent), the test's own to change."""
        shutil.copytree(self.path(kind, **options), dest, dirs_exist_ok=True)
        return Path(dest)

    def _build(self, folder: Path, build) -> None:
        # built aside and renamed into place: a folder that exists is whole
        staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=self.root))
        try:
            with _no_progress_bars():
                build(staging)
            os.rename(staging, folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.builds += 1


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
# tests.zoo)
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
    import sys

    import pytest

    os.environ[WRITE_MATRIX_ENV] = "1"
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider",
                          str(Path(__file__).parent / "engine" / "test_architectures.py")]))
