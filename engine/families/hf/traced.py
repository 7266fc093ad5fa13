"""A traced graph of an encoder's hidden states, cached on disk, for batch work in a fresh process.

Without a graph, `ctxlens embed` in a fresh process spends longer importing transformers'
modelling code and building the model (about 3 s of 10 on 2 cores) than a plain Hugging Face
program saves by anything the engine does better. A frozen TorchScript trace of the same
encoder loads in a tenth of a second with torch alone, and its tokenizer is the very Rust
tokenizer transformers wraps, read back from its JSON; so a cached graph skips transformers
altogether.

A graph is built once, from the model loaded the usual way, and written to the engine's cache
(cache_dir()/traced) only after it has matched that model: the same token ids, tokens and
offsets on a set of probe texts, and the same hidden states to TOLERANCE on them in padded
batches. A graph folder is keyed by the model's files (names, sizes, modification times), the
torch, transformers and tokenizers versions and GRAPH_FORMAT, so any change builds a new one.

A model whose graph does not pass (gpt-brown: its large GPT-2 residual stream differs by
4.6e-5 between the padded trace and the model's unpadded causal path) gets a manifest that
records why, so later runs use the model at once instead of tracing again.

A TorchScript archive is code as well as weights, so the engine loads graphs only from folders
it wrote itself in its own cache, never from a model folder or a download.

Only CPU float32 is traced (the 1e-5 promise holds there); attention maps and predictions always
go through the model itself.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.families.hf import forward, pooling, tokens
from engine.families.base import check_layers
from engine.result import Encoding
from engine.text import MASK, WordText, to_word_text

GRAPH_FORMAT = 3
TOLERANCE = 1e-5
GRAPH_FILE, TOKENIZER_FILE, MANIFEST_FILE = "graph.pt", "tokenizer.json", "manifest.json"
# every id's token decoded alone, as hf.tokens.plain_tokens gives
VOCAB_FILE = "readable_tokens.json"

# Texts the graph and the tokenizer must reproduce before a graph is kept: lengths from 3 to
# ~120 tokens (a trace must not bake in one length or the all-ones mask of an unpadded batch),
# accents, digits, hyphens, quotes, CJK and an emoji (the tokenizer's normaliser and its
# unknown-token path), and a [MASK].
PROBE_TEXTS = (
    "Hi !",
    "He sat on the bank of the river .",
    "The judge sent the man to [MASK] for ten years .",
    "Café owners in São Paulo re-opened on 12 March , 2021 — didn't they ?",
    "東京 is big 🙂 and naïve coöperation isn't rare .",
    " ".join(["The committee , after a long and sometimes bitter debate about the budget ,"
              " finally agreed that the new library would open in the spring"] * 4) + " .",
)


def usable(device: str, dtype: str) -> bool:
    """Whether a graph may stand in for the model under these load options."""
    from engine.families.base import resolve_device

    return dtype == "float32" and resolve_device(device) == "cpu"


def key_parts() -> tuple[str, ...]:
    """What a graph's cache key holds besides its model's files: the graph format and the
    versions of the libraries that trace and tokenize."""
    import torch

    return (GRAPH_FORMAT, torch.__version__, metadata.version("transformers"),
            metadata.version("tokenizers"))


def graph_dir(model_id: str, key: str, root: Path) -> Path:
    """The cache folder of a model's graph: model id, then `key` (a digest of its files'
    contents and key_parts(), which the Engine's file hashing makes)."""
    safe_id = re.sub(r"[^\w.-]+", "_", model_id).strip("_") or "model"
    return root / "traced" / safe_id / key[:20]


def _stacked(encoder):
    """The encoder as one function of (ids, mask): every layer's hidden states stacked,
    [batch, layers+1, tokens, dim] (a trace takes tensors in and gives tensors out)."""
    import torch

    class Stacked(torch.nn.Module):
        def __init__(self, enc):
            super().__init__()
            self.enc = enc

        def forward(self, ids, mask):
            out = self.enc(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                           return_dict=True)
            return torch.stack(tuple(out.hidden_states), dim=1)

    return Stacked(encoder).eval()


@dataclass
class TracedEncoder:
    """Hidden states of every layer from a cached graph (a BERT encoder or a GPT decoder
    stack); what Adapter.encode gives for them."""

    model_id: str
    family: str
    graph: object               # torch.jit.ScriptModule
    tokenizer: object           # tokenizers.Tokenizer
    n_layers: int
    max_tokens: int
    pad_id: int
    mask_token: str
    folder: Path
    readable: tuple[str, ...]   # each id's token decoded alone (hf.tokens.plain_tokens)

    def tokenize(self, texts: Sequence[WordText]) -> list[tokens.TokenizedText]:
        from engine.families.hf.tokens import with_mask_token

        spelled = [with_mask_token(wt, self.mask_token) for wt in texts]
        from engine.text import align_many

        encs = self.tokenizer.encode_batch([wt.text for wt in spelled])
        t2ws = align_many(spelled, [e.offsets for e in encs])
        return [tokens.tokenized_from(wt, tuple(e.ids), e.offsets, self.max_tokens,
                                      tokens.name_byte_pieces(self.tokenizer.decode, e.ids,
                                                              [self.readable[i] for i in e.ids]),
                                      t2w)
                for wt, e, t2w in zip(spelled, encs, t2ws)]

    def encode(self, texts: Sequence[WordText], batch_size: int = 16,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[Encoding]:
        if attentions:
            raise EngineError("a traced graph gives hidden states only; attention maps come "
                              "from the model itself")
        check_layers(layers, self.n_layers)
        tokenized = self.tokenize(texts)
        names = forward.chosen_layer_names(self.n_layers, layers)
        out: list[Encoding | None] = [None] * len(texts)
        for group in forward.batches(tokenized, max(1, batch_size), 0):
            batch = [tokenized[i] for i in group]
            for i, outputs in zip(group, self._run(batch, layers)):
                out[i] = forward.encoding(self.model_id, self.family, texts[i], tokenized[i],
                                          outputs, names)
        return out

    def encode_pooled(self, texts: Sequence[WordText], batch_size: int = 16,
                      layers: Sequence[int] | None = None, pool: str = "mean") -> list:
        """Word vectors [layers, words, dim] per text, pooled inside each batch (see
        hf.pooling.pooled_words): no Encoding a text for batch work."""
        check_layers(layers, self.n_layers)
        keep = list(range(self.n_layers + 1)) if layers is None else [int(i) for i in layers]

        def states(batch):               # pooled_words runs it under inference_mode
            ids, mask = forward.pad_batch(batch, self.pad_id, "cpu")
            return self.graph(ids, mask)[:, keep].permute(0, 2, 1, 3)   # [B, T, layers, D]

        return pooling.pooled_words(self.tokenize(texts), batch_size, pool, states, "cpu")

    def _run(self, batch: Sequence[tokens.TokenizedText], layers) -> list[forward.LayerOutputs]:
        import torch

        ids, mask = forward.pad_batch(batch, self.pad_id, "cpu")
        with torch.inference_mode():
            hs = self.graph(ids, mask)
        hs = (hs if layers is None else hs[:, list(layers)]).numpy()
        return [forward.LayerOutputs(np.ascontiguousarray(hs[row, :, :len(t.input_ids)]), None)
                for row, t in enumerate(batch)]


def load(folder: Path, model_id: str, family: str) -> TracedEncoder | None:
    """The graph in `folder`, or None when there is none (or an unreadable one, which is
    removed so that it is built again)."""
    if not (folder / MANIFEST_FILE).is_file() or refused(folder):
        return None
    import torch
    from tokenizers import Tokenizer

    try:
        meta = json.loads((folder / MANIFEST_FILE).read_text())
        if meta.get("format") != GRAPH_FORMAT or meta.get("model_id") != model_id:
            raise ValueError("stale manifest")
        graph = torch.jit.load(str(folder / GRAPH_FILE), map_location="cpu")
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        readable = tuple(json.loads((folder / VOCAB_FILE).read_text()))
    except Exception:  # noqa: BLE001 - torch and tokenizers raise their own types on bad files
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return TracedEncoder(model_id, family, graph.eval(), tokenizer, int(meta["n_layers"]),
                         int(meta["max_tokens"]), int(meta["pad_id"]), meta["mask_token"],
                         folder, readable)


def refused(folder: Path) -> str | None:
    """Why this model's graph was not kept (recorded by build), or None: a refusal holds for
    the same files and versions, so the model is not traced again on every run."""
    try:
        meta = json.loads((folder / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    return meta.get("untraced") if meta.get("format") == GRAPH_FORMAT else None


def build(adapter, folder: Path, progress: bool = True) -> tuple[TracedEncoder | None, str]:
    """Trace `adapter`'s encoder into `folder` (atomically: a temporary folder renamed into
    place) once it reproduces the model on PROBE_TEXTS; (the graph, "") or (None, why not),
    the refusal then recorded in `folder` instead. Older graphs of the same model are
    removed."""
    if progress:
        print(f"ctxlens: tracing {adapter.model_id}'s encoder once for fast start-up, a few "
              f"seconds (cached in {folder})", file=sys.stderr, flush=True)
    graph, meta = _trace(adapter, folder)
    _write(folder, graph, meta)
    return graph, meta.get("untraced", "")


def _trace(adapter, folder: Path) -> tuple[TracedEncoder | None, dict]:
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(adapter.tokenizer.backend_tokenizer.to_str())
    tokenizer.no_padding()
    tokenizer.no_truncation()
    texts = []
    for t in PROBE_TEXTS:       # those the model takes (a small one has few positions)
        wt = to_word_text(t)
        try:
            tokens.tokenize(adapter.tokenizer, adapter.spell_mask(wt), adapter.max_tokens)
        except EngineError:
            continue
        texts.append(wt)
    meta = {"format": GRAPH_FORMAT, "model_id": adapter.model_id}
    if len(texts) < 3:
        return None, {**meta, "untraced": "too few probe texts fit the model to check a graph"}
    mask_token = adapter.tokenizer.mask_token or MASK
    cfg = adapter.encoder.config
    meta = {**meta, "n_layers": int(cfg.num_hidden_layers),
            "max_tokens": int(adapter.max_tokens), "pad_id": int(adapter.pad_id),
            "mask_token": mask_token}
    readable = tokens.plain_tokens(adapter.tokenizer, range(len(adapter.tokenizer)))
    draft = TracedEncoder(adapter.model_id, adapter.info.family, None, tokenizer,
                          meta["n_layers"], meta["max_tokens"], meta["pad_id"], mask_token,
                          folder, readable)
    mine = draft.tokenize(texts)
    theirs = tokens.tokenize_many(adapter.tokenizer, [adapter.spell_mask(wt) for wt in texts],
                                  adapter.max_tokens)
    for a, b in zip(mine, theirs):
        if a.input_ids != b.input_ids or a.tokens != b.tokens or \
                not np.array_equal(a.token_to_word, b.token_to_word):
            return None, {**meta, "untraced": f"its tokenizer read back from JSON splits "
                                              f"{a.text.text!r} differently"}
    # trace on a padded batch, so that the attention mask is applied as data in the graph
    ids, mask = forward.pad_batch(mine[:4], meta["pad_id"], "cpu")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")     # TracerWarnings about Python-side checks
        draft.graph = torch.jit.freeze(torch.jit.trace(_stacked(adapter.encoder), (ids, mask),
                                                       check_trace=False))
    worst = 0.0
    for batch_size in (1, 3, len(texts)):
        reference = adapter.encode(texts, batch_size=batch_size)
        for got, ref in zip(draft.encode(texts, batch_size=batch_size), reference):
            worst = max(worst, float(np.abs(got.hidden_states - ref.hidden_states).max()))
    if worst > TOLERANCE:
        return None, {**meta, "untraced": f"its traced graph differs from the model by "
                                          f"{worst:.1e} (> {TOLERANCE})"}
    meta["max_abs_diff"] = worst
    return draft, meta


def _write(folder: Path, graph: TracedEncoder | None, meta: dict) -> None:
    """The graph (or only the refusal in `meta`) into `folder`, published atomically."""
    import torch

    from engine.folders import publish

    def write(tmp: Path) -> None:
        if graph is not None:
            torch.jit.save(graph.graph, str(tmp / GRAPH_FILE))
            graph.tokenizer.save(str(tmp / TOKENIZER_FILE))
            (tmp / VOCAB_FILE).write_text(json.dumps(list(graph.readable),
                                                     ensure_ascii=False))
        (tmp / MANIFEST_FILE).write_text(json.dumps(meta, indent=1))

    publish(folder, write, MANIFEST_FILE)
