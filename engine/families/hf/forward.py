"""What the BERT and GPT adapters share: Hugging Face loading, token -> word alignment, batching.

Each text is tokenised on its ORIGINAL characters (WordText.text) with a fast tokenizer, and
its tokens are mapped back to the shared words through character offsets (engine.text), so
word *i* is the same word for every family. Texts are batched with right padding and an
attention mask; each text's rows are then sliced out, so a text's vectors do not depend on what
else shares its batch (position ids count from 0 for every text under right padding).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families.base import LoadOptions, check_layers, resolve_device, resolve_dtype
from engine.result import Encoding
from engine.text import WordText


@dataclass(frozen=True)
class TokenizedText:
    """One text as the model sees it: ids, readable tokens and the word of each token."""

    text: WordText
    input_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    token_to_word: np.ndarray   # [tokens], -1 for special tokens (CLS, SEP, BOS)


@dataclass(frozen=True)
class LayerOutputs:
    """One text's transformer outputs, CPU float32, padding removed."""

    hidden_states: np.ndarray        # [layers+1, tokens, dim]
    attentions: np.ndarray | None    # [layers, heads, tokens, tokens], when asked for


def folder_config(path: Path) -> dict | None:
    """A Hugging Face model folder's config.json (None without one), read without loading
    transformers."""
    import json

    cfg_file = path / "config.json"
    return json.loads(cfg_file.read_text()) if cfg_file.exists() else None


def causal_config(path: Path) -> bool | None:
    """Whether a Hugging Face model folder's config.json names a left-to-right LM (None: no
    config.json); a config ctxlens cannot show (custom code, encoder-decoder) raises why."""
    from engine.checkpoint import kind_of, read_config

    cfg = read_config(path)
    if cfg is None:
        return None
    return kind_of(cfg, str(path)).family == "gpt"


def layer_names(n_layers: int) -> tuple[str, ...]:
    return ("embeddings",) + tuple(f"layer {i}" for i in range(1, n_layers + 1))


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    from engine.checkpoint import check_tokenizer

    check_tokenizer(path)       # else transformers builds an empty one from the config alone
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                            trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelUnavailable(f"cannot load a tokenizer from {path}: {err}") from err
    if not tok.is_fast:
        # offsets (token -> character span) exist only in the Rust `tokenizers` backend
        raise ModelUnavailable(f"{path} has no fast tokenizer (tokenizer.json); ctxlens needs "
                               "one to map tokens to words")
    return tok


# transformers' own loading bars may show at all (the CLI turns them off for the process:
# its terminal shows the engine's progress lines and bars only)
LIBRARY_BARS = True


@contextmanager
def progress_bars(show: bool):
    """transformers' own loading bars, on or off for the duration of a load."""
    from transformers.utils import logging as hf_logging

    show = show and LIBRARY_BARS
    was_enabled = hf_logging.is_progress_bar_enabled()
    if not show:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled and not show:
            hf_logging.enable_progress_bar()


@contextmanager
def _quiet(on: bool):
    """transformers' load report, off while a base model loads under an overlay's config: its
    head is "missing" from the base by design and comes from the overlay right after."""
    from transformers.utils import logging as hf_logging

    before = hf_logging.get_verbosity()
    if on:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(before)


def load_hf_model(auto_cls, path: Path, options: LoadOptions, progress: bool = True,
                  config=None, supplied: dict[str, int] | None = None, name: str = ""):
    """A model in eval mode on the requested device and dtype, with transformers' default
    attention (SDPA where the architecture has it, else eager). SDPA never materialises the
    attention weights, so a call that asks for attention maps switches the model to eager for
    that call (run_layers). Safetensors only: a pickle is never read (engine/checkpoint.py
    refuses a folder without safetensors before this).

    Before the model is built, the parameters its config describes are counted on the meta
    device (nothing allocated) and checked against the weights present and the free memory;
    after, every tensor the model needs must have come from the weights: transformers fills a
    missing or mis-shaped one with random numbers, which would be shown as the model's.
    `supplied`: tensors (name -> element count) that another file puts in right after this
    load (an overlay's head), so the weights here may lack them. `name`: the model's id, for
    messages (else the folder)."""
    import engine.checkpoint as checkpoint
    from engine.families.base import dtype_name

    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    where = name or str(path)
    supplied = supplied or {}
    try:
        if config is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(str(path), local_files_only=True,
                                                trust_remote_code=False)
        expected = described_parameters(auto_cls, config)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ModelUnavailable(f"cannot read the model's config in {path}: "
                               f"{_first_line(err)}") from err
    stored = checkpoint.tensor_counts(checkpoint.weight_files(path))
    present = sum(stored.values()) + sum(supplied.values())
    checkpoint.check_present(where, sum(expected.values()), present,
                             _absent(expected, set(stored) | set(supplied),
                                     getattr(config, "model_type", "")))
    checkpoint.check_memory(path, dtype_name(options.dtype, device), device, where,
                            n_params=max(sum(expected.values()), present))
    try:
        with progress_bars(progress), _quiet(bool(supplied)):
            # mis-shaped tensors come back in the loading info (refused below, named) instead
            # of transformers' RuntimeError pointing at a report the CLI does not show
            model, info = auto_cls.from_pretrained(
                str(path), dtype=dtype, local_files_only=True, trust_remote_code=False,
                use_safetensors=True, output_loading_info=True, ignore_mismatched_sizes=True,
                config=config)
    except Exception as err:  # noqa: BLE001 - a library's failure on these files is one line
        if not _load_failure(err):
            raise
        raise ModelUnavailable(f"cannot load the model in {path}: {_first_line(err)}") from err
    check_loaded(model, info, where, set(supplied))
    model = model.to(device).eval()
    if options.compile:
        import torch

        # the base model's forward, compiled for encode_pooled alone: a function, not a module,
        # so it is no submodule of the model, and every other path (attention maps switch the
        # attention implementation; hidden_until stops by hooks) keeps running eagerly.
        # dynamic: batches differ in size and length, and each new shape must not recompile
        model.base_model._ctxlens_compiled = torch.compile(model.base_model.forward,
                                                           dynamic=True)
    return model


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def _load_failure(err: BaseException) -> bool:
    """Whether a from_pretrained failure is the files' (missing, unreadable, not matching the
    config, or the safetensors library refusing a file), not a bug of ours."""
    if isinstance(err, (OSError, ValueError, KeyError, TypeError, RuntimeError)):
        return True
    return type(err).__name__ == "SafetensorError"


def described_parameters(auto_cls, config) -> dict[str, int]:
    """Each parameter of the model `config` describes (name -> element count; a tied one once),
    counted on the meta device: the modules are built without allocating a byte, so a 70B
    config is counted in seconds on a laptop."""
    import torch

    with torch.device("meta"):
        # an Auto* class builds from a config; a model class is its own constructor
        build = getattr(auto_cls, "from_config", None)
        model = build(config, trust_remote_code=False) if build else auto_cls(config)
    return {n: p.numel() for n, p in model.named_parameters()}


def _absent(expected: dict[str, int], stored: set[str], model_type: str) -> list[str]:
    """The described parameters no stored tensor names, the largest first (for a message: a
    checkpoint may name a parameter with or without the base model's prefix)."""
    def there(n: str) -> bool:
        return (n in stored or n.partition(".")[2] in stored
                or any(f"{p}.{n}" in stored for p in prefixes))

    prefixes = {n.partition(".")[0] for n in stored} | {model_type}
    return sorted((n for n in expected if not there(n)), key=lambda n: -expected[n])


# parameters a checkpoint may lack because ctxlens never reads them: a BERT-like encoder's
# pooler (only a classifier reads its output; ctxlens reads hidden states and the LM heads)
UNREAD = ("pooler",)


def check_loaded(model, info: dict, where: str, supplied: set[str] = frozenset()) -> None:
    """Refuse a model that transformers completed with made-up tensors: one whose weights had
    another shape than the config makes (the config is another model's), or that the weights
    lack. A missing tensor is fine only where it is no weight of its own: a parameter tied to
    one that was loaded (an LM head tied to the input embeddings), a buffer the model computes
    when built (position ids, rotary frequencies), one ctxlens never reads (UNREAD), or one in
    `supplied` (an overlay puts it in right after)."""
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: m[0])
    if mismatched:
        key, got, want = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise ModelUnavailable(
            f"{where}: tensor {key!r} is {list(got)} in the weights but {list(want)} in the "
            f"model its config.json describes{more}; the config is not these weights' own: "
            "use the config.json saved with them")
    missing = set(info.get("missing_keys") or ())
    if not missing:
        return
    buffers = {n for n, _ in model.named_buffers()}
    params = dict(model.named_parameters(remove_duplicate=False))
    # a parameter shared under several names is there when any of its names was loaded or
    # is supplied (BERT's decoder bias is its head's bias under a second name)
    filled = {id(p) for n, p in params.items() if n not in missing or n in supplied}
    unexplained = sorted(
        k for k in missing
        if k not in supplied and k not in buffers
        and not (k in params and id(params[k]) in filled)
        and not any(part in UNREAD for part in k.split(".")))
    if unexplained:
        named = ", ".join(repr(k) for k in unexplained[:3])
        more = f" and {len(unexplained) - 3} more" if len(unexplained) > 3 else ""
        raise ModelUnavailable(
            f"{where}: its weights lack {named}{more}, which transformers would fill with "
            "random numbers; download or save the model again (or use the checkpoint with "
            "that head)")


# Forwards that need attention maps switch a shared model to eager attention and back; they
# take this lock so two of them never interleave. A forward without maps running meanwhile
# may go through eager too: same vectors (to float rounding), only slower.
_EAGER_LOCK = threading.Lock()


@contextmanager
def eager_attention(model):
    with _EAGER_LOCK:
        before = model.config._attn_implementation
        if before == "eager":
            yield
            return
        model.set_attn_implementation("eager")
        try:
            yield
        finally:
            model.set_attn_implementation(before)


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
    # the checks of tokenized_from (too long; a word with no token) for every text at once; a
    # text that fails one goes through tokenized_from for its one-line error
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
    ok = (n_tok <= max_tokens) & (whole == n_words)                 # [texts]
    return [TokenizedText(wt, tuple(ids), readable_tokens(tokenizer, ids, sequence=True)
                          if readable else (), t2w) if good else
            tokenized_from(wt, tuple(ids), offs, max_tokens,
                           readable_tokens(tokenizer, ids, sequence=True) if readable else (),
                           t2w)
            for wt, ids, offs, t2w, good in zip(wts, ids_of, offsets, t2ws, ok)]


def tokenized_from(wt: WordText, ids: tuple[int, ...], offsets, max_tokens: int,
                   tokens: tuple[str, ...], t2w: np.ndarray | None = None) -> TokenizedText:
    """A text's tokens (ids, offsets and readable `tokens` from any fast tokenizer) aligned to
    its words (`t2w` when align_many has done it), or a one-line error when it is too long or
    a word got no token."""
    from engine.text import align_offsets

    if len(ids) > max_tokens:
        raise EngineError(f"the text has {len(ids)} tokens for this model; its cap is "
                          f"{max_tokens}: shorten the text")
    if t2w is None:
        t2w = align_offsets(offsets, wt.spans, wt.text)
    covered = np.bincount(t2w[t2w >= 0], minlength=len(wt.words))
    if np.count_nonzero(covered) < len(covered):
        raise EngineError(_no_token_message(wt, int(np.argmin(covered)), offsets))
    return TokenizedText(wt, ids, tuple(tokens), t2w)


def _no_token_message(wt: WordText, word: int, offsets) -> str:
    """Why a word got no token of its own: a token spans it and a neighbour, or it was dropped."""
    s, e = wt.spans[word]
    for ts, te in offsets:
        if ts < e and s < te:
            return (f"this model's tokenizer joins {wt.words[word]!r} with its neighbour into "
                    f"the one token {wt.text[ts:te]!r}; put a space between them")
    return f"this model's tokenizer drops the word {wt.words[word]!r}; remove it from the text"


def pad_batch(batch: Sequence[TokenizedText], pad_id: int, device: str):
    """Right-padded input_ids and attention_mask tensors for a batch."""
    import torch

    lengths = np.fromiter((len(t.input_ids) for t in batch), np.int64, len(batch))   # (B,)
    real = np.arange(int(lengths.max()))[None, :] < lengths[:, None]               # (B, T)
    ids = np.full(real.shape, pad_id, np.int64)                                     # (B, T)
    # one fill for the whole batch (a tensor per text costs as much as tokenising it)
    ids[real] = np.fromiter(chain.from_iterable(t.input_ids for t in batch), np.int64,
                            int(lengths.sum()))
    return (torch.from_numpy(ids).to(device),
            torch.from_numpy(real.astype(np.int64)).to(device))


def run_layers(base_model, batch: Sequence[TokenizedText], pad_id: int,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[LayerOutputs]:
    """Hidden states of every layer (or of `layers` only, in that order), and the attention
    maps only when asked (they force the eager attention path and cost tokens-squared
    memory), for each text of one batch. With `layers` and no maps, blocks above the highest
    layer asked are not run at all."""
    import torch

    device = next(base_model.parameters()).device
    ids, mask = pad_batch(batch, pad_id, str(device))
    n_blocks = base_model.config.num_hidden_layers
    keep = None if layers is None else list(layers)
    stop = max(keep) if keep and not attentions and max(keep) < n_blocks else None
    with torch.inference_mode(), (eager_attention(base_model) if attentions else nullcontext()):
        if stop is not None:
            hidden = hidden_until(base_model, ids, mask, stop)      # stop+1 x (B, T, D)
            out = None
        else:
            # hidden_states: layers+1 x (B, T, D); attentions: layers x (B, H, T, T)
            out = base_model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             output_attentions=attentions, return_dict=True)
            hidden = out.hidden_states
    if attentions and (not out.attentions or any(a is None for a in out.attentions)):
        raise EngineError("the model returned no attention weights (its attention "
                          "implementation cannot return them)")
    if keep is not None:
        hidden = [hidden[i] for i in keep]
    hs = torch.stack(tuple(hidden), dim=1).float().cpu().numpy()   # (B, layers, T, D)
    att = (torch.stack(out.attentions, dim=1).float().cpu().numpy()    # (B, L, H, T, T)
           if attentions else None)
    results = []
    for i, t in enumerate(batch):
        n = len(t.input_ids)
        # its own n tokens, the padding cut: (layers, n, D) and (L, H, n, n)
        results.append(LayerOutputs(
            np.ascontiguousarray(hs[i, :, :n]),
            None if att is None else np.ascontiguousarray(att[i, :, :, :n, :n])))
    return results


class _Stopped(Exception):
    """Raised by hidden_until's hook once the highest layer asked for has been computed."""


def hidden_until(base_model, ids, mask, last: int) -> list:
    """Hidden states 0..last of one batch (last < the number of blocks), running blocks 1..last
    only. They are read by hooks from block 1's input and each block's output: the tensors
    that output_hidden_states collects, except that a model with a final norm (GPT-2's ln_f,
    Llama's norm) applies it to its top layer only, which this path never stops at. Hooks
    act for the calling thread only, so another thread's forward on the same model is
    untouched."""
    blocks = _blocks(base_model)
    me = threading.get_ident()
    got: list = []

    def block_input(module, args, kwargs):
        if threading.get_ident() == me and not got:
            got.append(args[0] if args else kwargs["hidden_states"])
            if last == 0:
                raise _Stopped

    def block_output(module, args, output):
        if threading.get_ident() == me:
            got.append(output[0] if isinstance(output, tuple) else output)
            if len(got) == last + 1:
                raise _Stopped

    handles = [blocks[0].register_forward_pre_hook(block_input, with_kwargs=True)]
    handles += [b.register_forward_hook(block_output) for b in blocks[:last]]
    try:
        base_model(input_ids=ids, attention_mask=mask, return_dict=True)
    except _Stopped:
        pass
    finally:
        for h in handles:
            h.remove()
    if len(got) != last + 1:
        raise EngineError("this architecture's layers could not be read one by one")
    return got


# Attention maps grow with tokens squared: a batch's maps (batch x layers x heads x T x T
# float32) are kept under this many bytes by making batches of long texts smaller.
ATTENTION_BUDGET_BYTES = 512 * 2**20


def batches(tokenized: Sequence[TokenizedText], batch_size: int,
            per_token_pair_bytes: int) -> list[list[int]]:
    """Indices of texts grouped into batches, shortest texts together (less padding).

    Reordering is safe because a text's vectors do not depend on its batch.
    """
    order = sorted(range(len(tokenized)), key=lambda i: len(tokenized[i].input_ids))
    groups: list[list[int]] = []
    for i in order:
        width = len(tokenized[i].input_ids)      # the longest so far: `order` is sorted
        if groups and len(groups[-1]) < batch_size and \
                (len(groups[-1]) + 1) * width * width * per_token_pair_bytes \
                <= ATTENTION_BUDGET_BYTES:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def encode_texts(model_id: str, family: str, base_model, tokenizer, texts: Sequence[WordText],
                 batch_size: int, max_tokens: int, pad_id: int,
                 model_texts: Sequence[WordText] | None = None, attentions: bool = False,
                 layers: Sequence[int] | None = None) -> list[Encoding]:
    """Encodings for texts, in their order. `model_texts`: the texts as the tokenizer reads
    them, word for word the same (a BERT spells [MASK] its own way); default `texts`.
    Attention maps only with `attentions` (else Encoding.attentions is None); hidden states of
    `layers` only when given (Encoding.layer_names says which)."""
    cfg = base_model.config
    check_layers(layers, cfg.num_hidden_layers)
    tokenized = tokenize_many(tokenizer, texts if model_texts is None else model_texts,
                              max_tokens)
    names = chosen_layer_names(cfg.num_hidden_layers, layers)
    # bytes of one (query, key) pair's maps, every layer and head: a batch of long texts
    # is made smaller so its maps fit ATTENTION_BUDGET_BYTES
    pair_bytes = 4 * cfg.num_hidden_layers * cfg.num_attention_heads if attentions else 0
    out: list[Encoding | None] = [None] * len(texts)
    for group in batches(tokenized, max(1, batch_size), pair_bytes):
        batch = [tokenized[i] for i in group]
        for i, outputs in zip(group, run_layers(base_model, batch, pad_id, attentions, layers)):
            out[i] = encoding(model_id, family, texts[i], tokenized[i], outputs, names)
    return out


def encode_pooled(base_model, tokenizer, texts: Sequence[WordText], batch_size: int,
                  max_tokens: int, pad_id: int, pool: str, prepare=lambda wt: wt,
                  layers: Sequence[int] | None = None) -> list[np.ndarray]:
    """Each text's word vectors [layers, words, dim] (float32): what
    encode_texts(...)[i].word_vectors(pool) gives, pooled where the model runs."""
    cfg = base_model.config
    check_layers(layers, cfg.num_hidden_layers)
    keep = list(range(cfg.num_hidden_layers + 1)) if layers is None else [int(i) for i in layers]
    tokenized = tokenize_many(tokenizer, [prepare(wt) for wt in texts], max_tokens,
                              readable=False)
    device = next(base_model.parameters()).device

    compiled = getattr(base_model, "_ctxlens_compiled", None)

    def states(batch):                   # pooled_words runs it under inference_mode
        import torch

        ids, mask = pad_batch(batch, pad_id, str(device))
        with _batch_attention(device):
            if compiled is not None:
                # every block runs (a compiled graph cannot stop part-way as hidden_until does)
                hidden = compiled(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                                  return_dict=True).hidden_states
            elif max(keep) < cfg.num_hidden_layers:
                hidden = hidden_until(base_model, ids, mask, max(keep))
            else:
                hidden = base_model(input_ids=ids, attention_mask=mask,
                                    output_hidden_states=True, return_dict=True).hidden_states
        return torch.stack([hidden[i] for i in keep], dim=2)      # [B, T, layers, D]

    return pooled_words(tokenized, batch_size, pool, states, device)


# SDPA's kernel choice is process-wide (torch.backends flags), and ctxlens embed runs two
# chunks at once on a GPU: the first batch in narrows it, the last one out restores it.
_SDPA_LOCK = threading.Lock()
_sdpa_state: dict = {"users": 0, "context": None}


@contextmanager
def _batch_attention(device):
    """SDPA's flash or memory-efficient kernels for batch work on a GPU, not cuDNN's: cuDNN
    builds a plan for every new (batch, length) shape, and a file of sentences brings dozens
    (measured on an H100, 32 batch shapes of BERT-base: 1.55 s on a first pass against 0.40 s
    with the memory-efficient kernel, which is as fast once cuDNN has its plans)."""
    if device.type != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with _SDPA_LOCK:
        if _sdpa_state["users"] == 0:
            _sdpa_state["context"] = sdpa_kernel([SDPBackend.FLASH_ATTENTION,
                                                  SDPBackend.EFFICIENT_ATTENTION,
                                                  SDPBackend.MATH])
            _sdpa_state["context"].__enter__()
        _sdpa_state["users"] += 1
    try:
        yield
    finally:
        with _SDPA_LOCK:
            _sdpa_state["users"] -= 1
            if _sdpa_state["users"] == 0:
                _sdpa_state["context"].__exit__(None, None, None)
                _sdpa_state["context"] = None


def pooled_words(tokenized: Sequence[TokenizedText], batch_size: int, pool: str, states,
                 device) -> list[np.ndarray]:
    """Each text's word vectors [layers, words, dim] (float32), pooled from `states(batch)`
    ([texts, tokens, layers, dim] on `device`) in Encoding.word_vectors' way. On a GPU only the
    words' vectors come back to the host (not every token's, nor the padding), and a batch's
    copy back overlaps the next batch's forward pass."""
    import torch

    from engine.result import POOLINGS

    if pool not in POOLINGS:
        raise EngineError(f"pool must be one of {POOLINGS}")
    device = torch.device(device)
    out: list[np.ndarray | None] = [None] * len(tokenized)

    def finish(group, batch, host, done):
        if done is not None:
            done.synchronize()
        # a copy, so the pinned buffer goes back to torch's host cache for the next batch
        arr = host.numpy().copy() if done is not None else host.numpy()
        start = 0
        for i, t in zip(group, batch):
            n = len(t.text.words)
            out[i] = arr[start:start + n].transpose(1, 0, 2)
            start += n

    pending = None
    for group in batches(tokenized, max(1, batch_size), 0):
        batch = [tokenized[i] for i in group]
        with torch.inference_mode():
            pooled = _pool(states(batch), batch, pool)
        done = None
        if device.type == "cuda":
            host = torch.empty(pooled.shape, dtype=pooled.dtype, pin_memory=True)
            host.copy_(pooled, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        else:
            host = pooled
        if pending is not None:
            finish(*pending)
        pending = (group, batch, host, done)
    if pending is not None:
        finish(*pending)
    return out


def _pool_index(batch: Sequence[TokenizedText], width: int, pool: str):
    """Rows of a batch's flattened (text x token) states and, for "mean", the word each row
    adds to and its weight (1 / the word's token count), in Encoding.word_vectors' terms;
    whole-batch array operations (a loop over texts takes 0.30 s of host time for 16,384
    sentences in batches of 512, these 0.02 s)."""
    lengths = np.array([len(t.token_to_word) for t in batch], np.int64)
    n_words = np.array([len(t.text.words) for t in batch], np.int64)
    t2w = np.concatenate([t.token_to_word for t in batch]).astype(np.int64, copy=False)
    text = np.repeat(np.arange(len(batch)), lengths)
    pos = np.arange(len(t2w)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    real = t2w >= 0
    rows = (text * width + pos)[real]
    words = (t2w + np.repeat(np.cumsum(n_words) - n_words, lengths))[real]
    total = int(n_words.sum())
    if pool == "mean":
        counts = np.bincount(words, minlength=total)
        return rows, words, (1.0 / counts[words]).astype(np.float32), total
    pick = np.empty(total, np.int64)
    if pool == "first":
        pick[words[::-1]] = rows[::-1]      # repeated indices: the last write wins
    else:
        pick[words] = rows
    return pick, None, None, total


def _pool(states, batch: Sequence[TokenizedText], pool: str):
    """[words, layers, dim] float32 on the states' device: one batch's word vectors."""
    import torch

    device = states.device
    width = states.shape[1]
    flat = states.reshape(len(batch) * width, states.shape[2], states.shape[3])
    rows, words, weights, n_words = _pool_index(batch, width, pool)
    picked = flat[torch.from_numpy(rows).to(device)].float()
    if pool != "mean":
        return picked
    pooled = torch.zeros((n_words,) + picked.shape[1:], dtype=torch.float32, device=device)
    scale = torch.from_numpy(weights).to(device)[:, None, None]
    return pooled.index_add_(0, torch.from_numpy(words).to(device), picked * scale)


def chosen_layer_names(n_layers: int, layers: Sequence[int] | None) -> tuple[str, ...]:
    names = layer_names(n_layers)
    return names if layers is None else tuple(names[i] for i in layers)


def encoding(model_id: str, family: str, text: WordText, tokenized: TokenizedText,
             outputs: LayerOutputs, names: tuple[str, ...]) -> Encoding:
    """One text's Encoding: its words as typed, its tokens as the model read them, and the
    model's outputs for them."""
    return Encoding(model_id=model_id, family=family, text=text.text, words=text.words,
                    tokens=tokenized.tokens, token_to_word=tokenized.token_to_word,
                    hidden_states=outputs.hidden_states, attentions=outputs.attentions,
                    layer_names=names)


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


def _blocks(base_model) -> list:
    """The modules whose outputs are the hidden states, in order: the class transformers itself
    records them from (`_can_record_outputs["hidden_states"]`), else the ModuleList of
    num_hidden_layers blocks. ALBERT shares one layer across its depth: a single module then
    runs once per layer, and callers count its calls."""
    import torch

    target = (getattr(type(base_model), "_can_record_outputs", None) or {}).get("hidden_states")
    cls = getattr(target, "target_class", target)
    if isinstance(cls, type):
        found = [m for m in base_model.modules() if isinstance(m, cls)]
        if found:
            return found
    n = base_model.config.num_hidden_layers
    for m in base_model.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n:
            return list(m)
    raise UnsupportedPrediction("this architecture's blocks could not be found")


# The neuron view reads queries and keys where transformers hands them to the attention
# function: every architecture written against transformers' AttentionInterface calls it with
# the queries and keys after rotary embeddings, before grouped-query keys are repeated, with the
# mask, scale and soft-cap it applies. This implementation records that call, then runs the
# architecture's own eager attention.
CAPTURE = "ctxlens_capture"
_capture = threading.local()


def _capturing_attention(module, query, key, value, attention_mask, **kwargs):
    import sys

    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward as eager
    out, weights = eager(module, query, key, value, attention_mask, **kwargs)
    calls = getattr(_capture, "calls", None)
    if calls is not None:
        calls.append((query.detach(), key.detach(), attention_mask, weights, kwargs,
                       getattr(module, "is_causal", False)))
    return out, weights


def _register_capture() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(CAPTURE, _capturing_attention)
    # an explicit additive mask at every call, as eager attention gets (sliding windows and
    # padding included), so the view knows where each token may look
    ALL_MASK_ATTENTION_FUNCTIONS.register(CAPTURE, eager_mask)


@contextmanager
def capturing(base_model):
    """The model's attention through _capturing_attention for one forward pass; the calls
    (one per layer, in order) are collected into the list yielded."""
    _register_capture()
    with _EAGER_LOCK:
        before = base_model.config._attn_implementation
        base_model.set_attn_implementation(CAPTURE)
        _capture.calls = []
        try:
            yield _capture.calls
        finally:
            _capture.calls = None
            base_model.set_attn_implementation(before)


def query_key(base_model, tokenized: TokenizedText, layer: int):
    """The query and key vectors of every head at one layer, as the attention scores use them:
    ([heads, T, d] queries, [heads, T, d] keys, scale, allowed [T, T] or None, softcap or
    None), read from the architecture's own call of its attention function. Checked against
    the attention weights that call computed: where a score is more than a scaled q·k (DeBERTa's
    relative positions, attention sinks) the view says so instead of showing wrong numbers."""
    import numpy as np
    import torch

    n_layers = base_model.config.num_hidden_layers
    if not 1 <= layer <= n_layers:
        raise EngineError(f"layer {layer} is not an attention layer of this model "
                          f"(1 to {n_layers})")
    device = next(base_model.parameters()).device
    ids, mask = pad_batch([tokenized], 0, str(device))
    with torch.inference_mode(), capturing(base_model) as calls:
        base_model(input_ids=ids, attention_mask=mask)
        calls = list(calls)
    arch = type(base_model).__name__.removesuffix("Model")
    if len(calls) != n_layers:
        raise UnsupportedPrediction(
            f"{arch} computes its attention scores its own way (not through transformers' "
            "attention interface: e.g. DeBERTa adds relative-position terms to query·key), so "
            "they cannot be split into query and key vectors")
    q, k, amask, weights, kwargs, causal = calls[layer - 1]
    extra = sorted(set(kwargs) & {"s_aux", "sinks", "alibi", "position_bias"})
    if extra:
        raise UnsupportedPrediction(f"{arch}'s attention scores carry {extra[0]} besides "
                                    "query·key, so the neuron view cannot decompose them")
    heads = q.shape[1]
    if k.shape[1] != heads:                                       # grouped-query attention
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
    d = q.shape[-1]
    scale = float(kwargs.get("scaling") or d ** -0.5)
    softcap = kwargs.get("softcap")
    t = q.shape[2]
    if amask is None:
        allowed = np.tril(np.ones((t, t), bool)) if causal else None
    elif amask.dtype == torch.bool:
        allowed = amask[0, 0, :, :t].cpu().numpy()
    else:
        allowed = (amask[0, 0, :, :t] > torch.finfo(amask.dtype).min / 2).cpu().numpy()
    q, k = q[0].float().cpu().numpy(), k[0].float().cpu().numpy()    # [H, T, d]
    rebuilt = q @ k.transpose(0, 2, 1) * scale
    if softcap:
        rebuilt = np.tanh(rebuilt / softcap) * softcap
    if allowed is not None:
        rebuilt = np.where(allowed[None], rebuilt, -np.inf)
    rebuilt = np.exp(rebuilt - rebuilt.max(-1, keepdims=True))
    rebuilt /= rebuilt.sum(-1, keepdims=True)
    if weights is not None and np.abs(rebuilt - weights[0].float().cpu().numpy()).max() > 1e-3:
        raise UnsupportedPrediction(f"{arch}'s attention is more than softmax(scaled "
                                    "query·key) here, so the neuron view cannot decompose it")
    return q, k, scale, allowed, (float(softcap) if softcap else None)
