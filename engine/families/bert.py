"""BERT family: any Hugging Face encoder or masked LM from a local directory.

Devlin et al. 2019: a bidirectional Transformer encoder; [CLS] before and [SEP] after the text;
pre-trained as a masked LM, so it predicts a masked word from both sides, never the next word.
Checkpoints without the MLM head (e.g. sentence-transformers MiniLM) still give every layer.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from engine.budget import Anatomy
from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families import Gives
from engine.families.base import LoadOptions, ModelInfo
from engine.families.hf import cost, forward, loading, pooling, qk, tokens
from engine.families.hf.tokens import with_mask_token
from engine.families.hf.transformer import HFTransformer
from engine.result import Encoding, LogitLens, Prediction, QueryKey
from engine.text import MASK, WordText


class BertAdapter(HFTransformer):
    # an encoder read at its blank (base.Transformer)
    own_kind = "masked"

    def __init__(self, model_id: str, model, tokenizer, has_mlm: bool):
        self.model, self.tokenizer, self.has_mlm = model, tokenizer, has_mlm
        self.model_id = model_id
        cfg = model.config
        param = next(model.parameters())
        self.info = ModelInfo(model_id=model_id, family="bert", n_layers=cfg.num_hidden_layers,
                              n_heads=cfg.num_attention_heads, dim=cfg.hidden_size,
                              device=param.device.type,
                              dtype=str(param.dtype).removeprefix("torch."))
        self.max_tokens = tokens.max_positions(cfg, tokenizer)
        self.pad_id = tokens.pad_token_id(tokenizer)
        self._word_rows = None      # built on the first re-scored blank

    @property
    def encoder(self):
        # the encoder without the MLM head: no vocabulary projection is computed for encode()
        return self.model.base_model if self.has_mlm else self.model

    def anatomy(self) -> Anatomy:
        """What a pass costs (engine/budget.py)."""
        return cost.anatomy_of(self.model)

    def count_tokens(self, text: WordText) -> int:
        return cost.count_tokens(self.tokenizer, text)

    def check_explained(self, kind: str) -> None:
        if kind != "masked":
            raise UnsupportedPrediction(f"a masked LM predicts no {kind} word; put [MASK] "
                                        "where the word goes and use kind 'masked'")

    def objective(self, text: WordText, kind: str, blank: int | None, words: Sequence[str],
                  contrast: str | None):
        """The blank's prediction as a function of the input embeddings (base.Explained)."""
        from engine.families.hf import objective

        return objective.masked_lm(self, text, blank, list(words), contrast)

    def spell_mask(self, wt: WordText) -> WordText:
        """The text with its [MASK] written as this tokenizer's own mask token (<mask>, ...)."""
        return with_mask_token(wt, self.tokenizer.mask_token or MASK)

    def encode(self, texts: Sequence[WordText], batch_size: int = 16,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[Encoding]:
        return forward.encode_texts(self.model_id, "bert", self.encoder, self.tokenizer,
                                    texts, batch_size, self.max_tokens, self.pad_id,
                                    [self.spell_mask(wt) for wt in texts], attentions=attentions,
                                    layers=layers)

    def encode_pooled(self, texts: Sequence[WordText], batch_size: int = 16,
                      layers: Sequence[int] | None = None, pool: str = "mean") -> list:
        return pooling.encode_pooled(self.encoder, self.tokenizer, texts, batch_size,
                                     self.max_tokens, self.pad_id, pool, self.spell_mask, layers)

    def query_key(self, text: WordText, layer: int) -> QueryKey:
        t = tokens.tokenize(self.tokenizer, self.spell_mask(text), self.max_tokens)
        return qk.query_key(self.model_id, self.encoder, t, layer, causal=False)

    def predict_masked(self, text: WordText, top_k: int = 10, sides: str = "both",
                       rescore: bool = False) -> Prediction:
        """Top-k words for the [MASK] position: softmax over the MLM head's logits there; with
        `rescore`, the head's likeliest whole words re-ranked by the sentence each makes."""
        import torch

        if sides != "both":
            raise EngineError("a masked LM reads both sides of the blank at once; "
                              "left-only filling is for GPT and ELMo models")
        if not self.has_mlm:
            raise UnsupportedPrediction("this model has no masked-LM head, so it cannot fill "
                                        "a blank")
        word = text.one_mask()
        t = tokens.tokenize(self.tokenizer, self.spell_mask(text), self.max_tokens)
        pos = [i for i, (tid, w) in enumerate(zip(t.input_ids, t.token_to_word))
               if w == word and tid == self.tokenizer.mask_token_id]
        if len(pos) != 1:
            raise EngineError(f"the tokenizer did not turn {MASK} into its mask token "
                              f"{self.tokenizer.mask_token!r}")
        device = str(next(self.model.parameters()).device)
        ids, mask = forward.pad_batch([t], self.pad_id, device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[0, pos[0]]
            if rescore:
                return self._rescored(text, ids[0], pos[0], logits, top_k)
        return Prediction(self.model_id, "masked", text.text,
                          tokens.top_k_candidates(logits, self.tokenizer, top_k),
                          method="MLM head")

    def _whole_words(self):
        """Vocabulary rows that are a whole alphabetic word: "bank" in WordPiece (not "##ing"),
        "Ġbank" / "▁bank" in byte-level BPE and SentencePiece (not a piece that continues a
        word), never "[SEP]" or ","."""
        if self._word_rows is None:
            import torch

            ids = list(range(len(self.tokenizer)))
            pieces = tokens.plain_tokens(self.tokenizer, ids)
            wordpiece = type(self.tokenizer.backend_tokenizer.model).__name__ == "WordPiece"
            self._word_rows = torch.tensor([
                p.isalpha() if wordpiece else (p.startswith(" ") and p[1:].isalpha())
                for p in pieces])
        return self._word_rows

    def _rescored(self, text: WordText, ids, pos: int, logits, top_k: int) -> Prediction:
        """Salazar et al. (2020): the head's RESCORE_CANDIDATES likeliest whole words, each
        put in the blank and scored by the pseudo-log-likelihood of the sentence it makes
        (every other token masked in turn, its log-probability summed; the candidate's own
        term is the head's score at the blank). The head alone reads the context to guess the
        blank; this also asks whether the context still reads well around each guess, which
        is what turns "He locked the door with a door" down."""
        import torch

        from engine.result import Candidate

        logp = torch.log_softmax(logits.float(), dim=-1)
        rows = self._whole_words().to(logp.device)
        # a fixed pool (as the GPT fill's): the shares do not move with top_k
        head = logp.masked_fill(~rows, float("-inf")).topk(
            min(RESCORE_CANDIDATES, int(rows.sum())))
        cands = head.indices
        specials = set(self.tokenizer.all_special_ids)
        others = [i for i, t in enumerate(ids.tolist()) if i != pos and t not in specials]
        context = torch.zeros(len(cands), dtype=torch.float32, device=logp.device)
        if others:
            filled = ids.repeat(len(cands), 1)
            filled[:, pos] = cands
            batch = filled.repeat_interleave(len(others), 0)
            cols = torch.tensor(others, device=batch.device).repeat(len(cands))
            at = torch.arange(len(batch), device=batch.device)
            target = batch[at, cols].clone()
            batch[at, cols] = self.tokenizer.mask_token_id
            scored = []
            for sl in self._chunks(len(batch), batch.shape[1]):
                lp = torch.log_softmax(self._head_at(batch[sl], at[sl] - sl.start, cols[sl]), -1)
                scored.append(lp.gather(1, target[sl, None])[:, 0])
            context = torch.cat(scored).view(len(cands), len(others)).sum(1)
        score = head.values + context
        share = torch.softmax(score.double(), dim=0)
        best = torch.argsort(share, descending=True)[:top_k]
        words = [w.strip()
                 for w in tokens.readable_tokens(self.tokenizer, cands[best].tolist())]
        return Prediction(self.model_id, "masked", text.text,
                          tuple(Candidate(w, float(share[k])) for w, k in zip(words, best.tolist())),
                          method=f"MLM head's top {len(cands)} words, re-ranked by the "
                                 "pseudo-log-likelihood of the sentence each makes",
                          ranked_among=len(cands))

    def _chunks(self, n: int, width: int) -> list[slice]:
        """Slices of the re-scoring batch: BERT's own head runs on the scored positions only;
        any other masked LM's runs on every position (its head is not one module), so fewer
        sequences go at once to keep [sequences, tokens, vocabulary] near RESCORE_BYTES."""
        fast = type(self.model).__name__ == "BertForMaskedLM"
        step = RESCORE_CHUNK if fast else max(
            1, min(RESCORE_CHUNK, RESCORE_BYTES // (4 * width * len(self.tokenizer))))
        return [slice(lo, min(n, lo + step)) for lo in range(0, n, step)]

    def _head_at(self, ids, rows, cols):
        """The masked-LM logits at (row, col) of each sequence of `ids`, float32."""
        if type(self.model).__name__ == "BertForMaskedLM":
            hidden = self.model.base_model(input_ids=ids).last_hidden_state
            return self.model.cls(hidden[rows, cols]).float()
        return self.model(input_ids=ids).logits[rows, cols].float()

    def predict_next(self, text: WordText, top_k: int = 10) -> Prediction:
        raise UnsupportedPrediction("BERT models are bidirectional and cannot predict the next "
                                    "word (put [MASK] where the word goes instead)")

    def predict_previous(self, text: WordText, top_k: int = 10) -> Prediction:
        raise UnsupportedPrediction("BERT models cannot predict the previous word (put [MASK] "
                                    "where the word goes instead)")

    def logit_lens(self, text: WordText, top_k: int = 1) -> LogitLens:
        raise UnsupportedPrediction("the logit lens reads next-token predictions off each "
                                    "layer; it needs a GPT (causal LM) model")


# Whole words the head proposes for re-scoring: on the 149 everyday cloze items the head's top 30
# holds an accepted answer on 78% (top 60: 79%), and re-ranking 60 instead of 30 moves top-5 by
# one item; each candidate costs one forward pass per token of the sentence
RESCORE_CANDIDATES = 30
RESCORE_CHUNK = 128          # sequences a forward pass
RESCORE_BYTES = 256 * 2**20  # logits held at once by a head that scores every position

OVERLAY_GLOB = "mlm_overlay*.safetensors"   # one or more shards (bundled files stay small)
# a tensor too big for one shard is stored as row slices "<name>@rows<first row>"
ROW_MARK = "@rows"
ROW_SLICE = "{}" + ROW_MARK + "{}"
# one trained row of an otherwise frozen base tensor ([MASK]'s input embedding):
# "<name>@row=<row>" replaces that row only
ROW_PATCH_MARK = "@row="
ROW_PATCH = "{}" + ROW_PATCH_MARK + "{}"


def claims_dir(path: Path) -> bool:
    """A local Hugging Face folder whose config is not a left-to-right LM's."""
    return loading.causal_config(path) is False


def gives_of_dir(path: Path) -> Gives:
    """What the folder's checkpoint gives, as its config declares it (engine.checkpoint)."""
    from engine.checkpoint import kind_of, read_config

    return kind_of(read_config(path) or {}, str(path)).gives


def load(model_id: str, path: Path, options: LoadOptions, progress: bool = True,
         overlay: Path | None = None) -> BertAdapter:
    """A BERT from `path`; with `overlay`, a folder holding a config and OVERLAY_GLOB files
    whose tensors (e.g. a trained MLM head and the blocks tuned with it) replace or complete the
    base model's (lab/training/mlm_head.py writes them)."""
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    try:
        config = AutoConfig.from_pretrained(str(overlay or path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise ModelUnavailable(f"{overlay or path} holds no readable config.json: {err}") from err
    from engine.checkpoint import kind_of

    # the config says whether the checkpoint ships an MLM head, as it did for the registry
    has_mlm = "masked_lm" in kind_of(config.to_dict(), model_id).gives.capabilities
    model = loading.load_hf_model(AutoModelForMaskedLM if has_mlm else AutoModel, path,
                                  options, progress, config=config if overlay else None,
                                  supplied=overlay_tensors(overlay) if overlay else None,
                                  name=model_id)
    if overlay is not None:
        apply_overlay(model, sorted(Path(overlay).glob(OVERLAY_GLOB)))
    return BertAdapter(model_id, model, loading.load_tokenizer(path), has_mlm)


def overlay_tensors(overlay: Path) -> dict[str, int]:
    """The whole tensors an overlay folder puts into its base (name -> element count), read
    from the headers: row slices count towards their tensor, a patched row replaces no tensor."""
    from engine.checkpoint import read_header

    out: dict[str, int] = {}
    for f in sorted(Path(overlay).glob(OVERLAY_GLOB)):
        for k, t in read_header(f).items():
            if ROW_PATCH_MARK in k:
                continue
            name = k.partition(ROW_MARK)[0]
            count = 1
            for d in t["shape"]:
                count *= d
            out[name] = out.get(name, 0) + count
    return out


def apply_overlay(model, files: list[Path], complete: bool = True) -> None:
    """Copy the overlay's tensors into the model. Every tensor must name a parameter of the
    same shape, and (with `complete`) every head parameter the base lacks must come from the
    overlay, so a stale or partial overlay fails loudly instead of leaving a random head."""
    import torch
    from safetensors.torch import load_file

    if not files:
        raise ModelUnavailable(f"the overlay has no {OVERLAY_GLOB} files")
    tensors, slices, patches = {}, {}, []
    for f in files:
        for k, t in load_file(str(f)).items():
            name, _, first = k.partition(ROW_MARK)
            pname, _, prow = k.partition(ROW_PATCH_MARK)
            if prow.isdigit():
                patches.append((pname, int(prow), t))
            elif first.isdigit():
                slices.setdefault(name, []).append((int(first), t))
            else:
                tensors[k] = t
    for name, parts in slices.items():
        tensors[name] = torch.cat([t for _, t in sorted(parts, key=lambda x: x[0])])
    params = dict(model.named_parameters())
    unknown = [k for k in tensors if k not in params or params[k].shape != tensors[k].shape]
    unknown += [f"{k}{ROW_PATCH_MARK}{r}" for k, r, t in patches
                if k not in params or not 0 <= r < params[k].shape[0]
                or params[k].shape[1:] != t.shape]
    if unknown:
        raise ModelUnavailable(f"{files[0].parent} does not fit the base model: {unknown[0]!r} "
                               f"(and {len(unknown) - 1} more)")
    tied = {id(model.get_input_embeddings().weight)}
    missing = [k for k, p in params.items()
               if k.startswith("cls.") and id(p) not in tied and k not in tensors]
    if missing and complete:
        raise ModelUnavailable(f"{files[0].parent} lacks the head tensor {missing[0]!r}")
    with torch.no_grad():
        for k, t in tensors.items():
            params[k].copy_(t.to(params[k].dtype))
        for k, r, t in patches:
            params[k][r].copy_(t.to(params[k].dtype))
