"""A text as a Hugging Face model reads it: its tokens on the original characters, each mapped
to one of the shared words (engine.text), readable token strings (byte pieces named after what
they spell), the checks that every word got a token and the text fits, and the model's token
limits. Each text is tokenised on its ORIGINAL characters (WordText.text) with a fast
tokenizer, so word *i* is the same word for every family."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.families.base import NextPieces
from engine.text import MASK, WordText


@dataclass(frozen=True)
class TokenizedText:
    """One text as the model sees it: ids, readable tokens and the word of each token."""

    text: WordText
    input_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    token_to_word: np.ndarray   # [tokens], -1 for special tokens (CLS, SEP, BOS)


def readable_tokens(tokenizer, ids: Sequence[int], sequence: bool = False) -> tuple[str, ...]:
    """Token strings a reader can read.

    WordPiece tokens are kept as they are ("play", "##ing" shows the word continues); byte-level
    BPE and SentencePiece tokens go through the tokenizer's own decoder ("Ġbank" -> " bank").
    SentencePiece decoders strip the space of a text's first token, which alone is every
    token here, so a word-initial "▁" is put back as a space ("▁bank" -> " bank").
    A byte piece (a token that is part of a character) alone decodes to U+FFFD: in a text's
    tokens (`sequence`) it is named after the character it helps spell, among alternatives (a
    model's candidates) after its id, since four "\ufffd" candidates could not be told apart.
    """
    out = list(plain_tokens(tokenizer, ids))
    if sequence:
        return name_byte_pieces(tokenizer.backend_tokenizer.decode, ids, out)
    return tuple(f"{s} (byte piece, token {i})" if "\ufffd" in s else s
                 for s, i in zip(out, ids))


def plain_tokens(tokenizer, ids: Sequence[int]) -> tuple[str, ...]:
    """Each token decoded on its own (readable_tokens before its byte pieces are named)."""
    raw = tokenizer.convert_ids_to_tokens(list(ids))
    if type(tokenizer.backend_tokenizer.model).__name__ == "WordPiece":
        return tuple(raw)
    special = set(tokenizer.all_special_tokens)
    out = []
    for t in raw:
        s = t if t in special else tokenizer.convert_tokens_to_string([t])
        if t.startswith("\u2581") and not s.startswith(" "):
            s = " " + s
        out.append(s)
    return tuple(out)


def name_byte_pieces(decode, ids: Sequence[int], tokens: Sequence[str]) -> tuple[str, ...]:
    """Byte-level BPE splits a character outside its merges ("银" in SmolLM2) into tokens of a
    few bytes each, and each alone decodes to U+FFFD: a run of such tokens of a text is decoded
    together (`decode`: ids -> text, the tokenizers library's) and each piece named after what
    it spells, "银 (1/3)", "银 (2/3)", "银 (3/3)"."""
    ids, out = list(ids), list(tokens)
    i = 0
    while i < len(out):
        if "\ufffd" not in out[i]:
            i += 1
            continue
        j = i + 1
        # a piece that starts with a space starts another word: "银 银" is two runs, not one
        while j < len(out) and "\ufffd" in out[j] and not out[j].startswith(" "):
            j += 1
        whole = decode(ids[i:j]).strip()
        if whole and "\ufffd" not in whole:
            out[i:j] = [f"{whole} ({k}/{j - i})" for k in range(1, j - i + 1)]
        i = j
    return tuple(out)


def tokenize(tokenizer, wt: WordText, max_tokens: int) -> TokenizedText:
    """Tokenise the original text with the model's own special tokens, aligned to the words."""
    return tokenize_many(tokenizer, [wt], max_tokens)[0]


def tokenize_many(tokenizer, wts: Sequence[WordText], max_tokens: int,
                  readable: bool = True) -> list[TokenizedText]:
    """tokenize() for many texts through one call of the fast tokenizer (its batch encoder
    runs in Rust, a per-text call pays Python's overhead each time); the same results.
    `readable=False` leaves TokenizedText.tokens empty (pooled batch work never shows them)."""
    if not wts:
        return []
    from engine.text import align_many

    texts = [wt.text for wt in wts]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and backend.truncation is None and backend.padding is None:
        # the Rust encoder that tokenizer() calls, without its per-text conversion into
        # Python dicts (a third of batch tokenising); the same ids and offsets
        encs = backend.encode_batch(texts, add_special_tokens=True)
        ids_of, offsets = [e.ids for e in encs], [e.offsets for e in encs]
    else:
        enc = tokenizer(texts, return_offsets_mapping=True, add_special_tokens=True)
        ids_of, offsets = enc["input_ids"], enc["offset_mapping"]
    t2ws = align_many(wts, offsets)                 # per text: [tokens], word or -1
    fits = _fits(wts, t2ws, max_tokens)
    out = []
    for wt, ids, offs, t2w, good in zip(wts, ids_of, offsets, t2ws, fits):
        if not good:
            raise EngineError(_refusal(wt, offs, t2w, max_tokens))
        out.append(TokenizedText(wt, tuple(ids), readable_tokens(tokenizer, ids, sequence=True)
                                 if readable else (), t2w))
    return out


def tokenized_from(wt: WordText, ids: tuple[int, ...], offsets, max_tokens: int,
                   tokens: tuple[str, ...], t2w: np.ndarray | None = None) -> TokenizedText:
    """A text's tokens (ids, offsets and readable `tokens` from any fast tokenizer) aligned to
    its words (`t2w` when align_many has done it), or a one-line error when it is too long or
    a word got no token."""
    from engine.text import align_offsets

    if t2w is None:
        t2w = align_offsets(offsets, wt.spans, wt.text)
    if not _fits([wt], [t2w], max_tokens)[0]:
        raise EngineError(_refusal(wt, offsets, t2w, max_tokens))
    return TokenizedText(wt, ids, tuple(tokens), t2w)


def _fits(wts: Sequence[WordText], t2ws: Sequence[np.ndarray], max_tokens: int) -> np.ndarray:
    """The token checks, for every text at once ([texts] bool): at most max_tokens tokens, and
    every word with a token of its own."""
    n_tok = np.array([len(t) for t in t2ws], np.int64)              # [texts]
    n_words = np.array([len(wt.words) for wt in wts], np.int64)     # [texts]
    flat = np.concatenate(t2ws)                                     # [all tokens]
    text_of = np.repeat(np.arange(len(wts)), n_tok)                 # [all tokens]
    real = flat >= 0
    first = np.cumsum(n_words) - n_words            # [texts]: its first word among all words
    covered = np.bincount((flat + first[text_of])[real],
                          minlength=int(n_words.sum())) > 0         # [all words]
    whole = np.bincount(np.repeat(np.arange(len(wts)), n_words)[covered],
                        minlength=len(wts))                         # [texts]: words covered
    return (n_tok <= max_tokens) & (whole == n_words)


def _refusal(wt: WordText, offsets, t2w: np.ndarray, max_tokens: int) -> str:
    """Why a text failed _fits, in one line: too long, or which word got no token."""
    if len(t2w) > max_tokens:
        return (f"the text has {len(t2w)} tokens for this model; its cap is {max_tokens}: "
                "shorten the text")
    covered = np.bincount(t2w[t2w >= 0], minlength=len(wt.words))
    return _no_token_message(wt, int(np.argmin(covered)), offsets)


def _no_token_message(wt: WordText, word: int, offsets) -> str:
    """Why a word got no token of its own: a token spans it and a neighbour, or it was dropped."""
    s, e = wt.spans[word]
    for ts, te in offsets:
        if ts < e and s < te:
            return (f"this model's tokenizer joins {wt.words[word]!r} with its neighbour into "
                    f"the one token {wt.text[ts:te]!r}; put a space between them")
    return f"this model's tokenizer drops the word {wt.words[word]!r}; remove it from the text"


def check_spelled(tokenizer, ids, word: str) -> None:
    """EngineError when `word`'s pieces `ids` are none or hold the unknown token."""
    unk = tokenizer.unk_token_id
    if not ids or (unk is not None and unk in ids):
        raise EngineError(f"this model's vocabulary cannot spell {word!r} (it reads as the "
                          "unknown token)")


def spelled_after(tokenizer, wt: WordText, ids: tuple[int, ...], word: str) -> list[int]:
    """`word`'s pieces after the text `wt` (which the model reads as `ids`), as a decoder
    spells its next word: the text, a space, the word; EngineError when the tokenizer merges
    the word with the text's end or cannot spell it."""
    full = tokenizer(wt.text + " " + word)["input_ids"]
    n = len(ids)
    if tuple(full[:n]) != ids:
        raise EngineError(f"this model's tokenizer merges {word!r} with the end of the "
                          "text, so the text cannot end before it")
    out = full[n:]
    check_spelled(tokenizer, out, word)
    return out


def next_pieces(tokenizer, text: WordText, words: Sequence[str], max_tokens: int) -> NextPieces:
    """The text without its trailing space as the model reads it, and each word's pieces after
    it (base.Transformer.next_pieces); EngineError when a word cannot follow it or the text
    leaves no room for one more token."""
    wt = WordText(text.text.rstrip(), text.words, text.spans)
    t = tokenize(tokenizer, wt, max_tokens)
    spelled = [spelled_after(tokenizer, wt, t.input_ids, word) for word in words]
    n = len(t.input_ids)
    if n + 1 > max_tokens:
        raise EngineError(f"the text takes {n} tokens; this model reads at most {max_tokens}")
    return NextPieces(ids=t.input_ids, tokens=t.tokens,
                      spelled=tuple(tuple(ids) for ids in spelled),
                      spelled_tokens=tuple(readable_tokens(tokenizer, ids) for ids in spelled))


def max_positions(config, tokenizer) -> int:
    """The longest input the model takes (position embeddings, else the tokenizer's cap)."""
    n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    cap = tokenizer.model_max_length if tokenizer.model_max_length < 1e9 else None
    return int(min(x for x in (n, cap, 4096) if x))


def pad_token_id(tokenizer) -> int:
    # any id works: padded positions are masked out and sliced off
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if tid is not None:
            return int(tid)
    return 0


def top_k_candidates(logits, tokenizer, top_k: int):
    """Softmax over the vocabulary, best first, as (readable token, probability) pairs."""
    import torch

    from engine.result import Candidate

    probs = torch.softmax(logits.float(), dim=-1)
    k = max(1, min(top_k, probs.shape[-1]))
    values, indices = torch.topk(probs, k)
    tokens = readable_tokens(tokenizer, indices.tolist())
    return tuple(Candidate(tok, float(p)) for tok, p in zip(tokens, values.tolist()))


def with_mask_token(wt: WordText, mask_token: str) -> WordText:
    """The text with each [MASK] word written as the tokenizer's own mask token.

    The shared word splitter keeps "[MASK]" as one word; models spell the mask differently
    (RoBERTa: "<mask>"), so the word's span is rewritten and the later spans shifted.
    """
    if mask_token == MASK or MASK not in wt.words:
        return wt
    parts, spans, pos, shift = [], [], 0, 0
    for word, (s, e) in zip(wt.words, wt.spans):
        parts.append(wt.text[pos:s])
        piece = mask_token if word == MASK else wt.text[s:e]
        spans.append((s + shift, s + shift + len(piece)))
        shift += len(piece) - (e - s)
        parts.append(piece)
        pos = e
    parts.append(wt.text[pos:])
    return WordText("".join(parts), wt.words, tuple(spans))
