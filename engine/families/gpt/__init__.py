"""GPT family: any Hugging Face causal LM (GPT-2, Llama, SmolLM2, ...), safetensors or GGUF.

Radford et al. 2018/2019: a decoder-only Transformer with masked self-attention, so token t only
sees tokens <= t; it predicts the next token. Each model keeps its own tokenizer convention:
GPT-2 adds no BOS token (the first word then has no context at all), tokenizers whose
post-processor adds a BOS put it first (it maps to no word).

GGUF checkpoints (quantised llama.cpp files) are dequantised once by transformers and cached as
safetensors, because dequantising takes ~30 s and loading the cached copy takes a second.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from engine.budget import Anatomy
from engine.errors import EngineError, ModelUnavailable, UnsupportedPrediction
from engine.families import WITH_LM, Gives
from engine.families.base import LoadOptions, ModelInfo
from engine.families.gpt import fill
from engine.families.gpt.fill import FILL_PROMPT_CANDIDATES, BlankFill
from engine.families.gpt.generation import Generating
from engine.families.hf import cost, forward, loading, pooling, qk, tokens
from engine.families.hf.parts import final_norm
from engine.families.hf.transformer import HFTransformer
from engine.result import Candidate, Encoding, LogitLens, Prediction, QueryKey
from engine.text import WordText

NEXT_METHOD = ("next token from the left context: a byte-level piece, so '…x' continues the "
               "last word and a word may go on beyond its first piece")


def torch_tanh_cap(x, cap: float):
    import torch

    return torch.tanh(x / cap) * cap


def _word_piece(token: str) -> str:
    """A next-token piece as a reader should see it: a word start without its space ("Ġbank"
    -> "bank"), a piece glued to the last word marked ("sid" -> "…sid")."""
    if token.startswith(" "):
        return token[1:] or token
    return "…" + token if token[:1].isalnum() else token


class GPTAdapter(BlankFill, Generating, HFTransformer):
    # every causal LM with an output head: a decoder read at its last token (base.Transformer)
    own_kind = "next"

    def __init__(self, model_id: str, model, tokenizer, gguf_cache_hit: bool | None = None):
        self.model, self.tokenizer, self.model_id = model, tokenizer, model_id
        # None: not a GGUF model; True: loaded from the converted cache; False: converted by
        # this load
        self.gguf_cache_hit = gguf_cache_hit
        self.norm = final_norm(model)
        self.head = model.get_output_embeddings()
        cfg = model.config
        param = next(model.parameters())
        self.info = ModelInfo(model_id=model_id, family="gpt", n_layers=cfg.num_hidden_layers,
                              n_heads=cfg.num_attention_heads, dim=cfg.hidden_size,
                              has_logit_lens=self.norm is not None and self.head is not None,
                              device=param.device.type,
                              dtype=str(param.dtype).removeprefix("torch."))
        self.max_tokens = tokens.max_positions(cfg, tokenizer)
        self.pad_id = tokens.pad_token_id(tokenizer)
        # words proposed by the fill-in-the-blank prompt (0: the left context alone proposes)
        self.prompt_candidates = FILL_PROMPT_CANDIDATES

    def _logits(self, raw):
        """The head's output as the model's own logits: Gemma-2 soft-caps them to
        c·tanh(x / c) (final_logit_softcapping), which the lens must do too or it overstates
        every layer's top probability."""
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        raw = raw.float()
        return torch_tanh_cap(raw, cap) if cap else raw

    @property
    def device(self) -> str:
        return str(next(self.model.parameters()).device)

    @property
    def encoder(self):
        # the decoder stack without the vocabulary projection
        return self.model.base_model

    def anatomy(self) -> Anatomy:
        """What a pass costs (engine/budget.py)."""
        return cost.anatomy_of(self.model)

    def count_tokens(self, text: WordText) -> int:
        return cost.count_tokens(self.tokenizer, text)

    def check_explained(self, kind: str) -> None:
        if kind == "previous":
            raise UnsupportedPrediction("a left-to-right LM cannot predict the previous word")

    def objective(self, text: WordText, kind: str, blank: int | None, words: Sequence[str],
                  contrast: str | None):
        """The next word, or a blank filled as predict_masked fills it, as a function of the
        input embeddings (base.Explained)."""
        from engine.families.hf import objective

        if kind == "next":
            return objective.next_word(self, text, list(words), contrast)
        return objective.decoder_fill(self, text, blank, list(words), contrast,
                                      fill.FILL_START_WORDS, fill.FILL_RIGHT_TOKENS,
                                      fill.running_text)

    def spell_mask(self, wt: WordText) -> WordText:
        return wt                   # a GPT reads the text as it is (no mask token to spell)

    def encode(self, texts: Sequence[WordText], batch_size: int = 16,
               attentions: bool = False, layers: Sequence[int] | None = None
               ) -> list[Encoding]:
        return forward.encode_texts(self.model_id, "gpt", self.encoder, self.tokenizer,
                                    texts, batch_size, self.max_tokens, self.pad_id,
                                    attentions=attentions, layers=layers)

    def encode_pooled(self, texts: Sequence[WordText], batch_size: int = 16,
                      layers: Sequence[int] | None = None, pool: str = "mean") -> list:
        return pooling.encode_pooled(self.encoder, self.tokenizer, texts, batch_size,
                                     self.max_tokens, self.pad_id, pool, layers=layers)

    def query_key(self, text: WordText, layer: int) -> QueryKey:
        t = tokens.tokenize(self.tokenizer, text, self.max_tokens)
        return qk.query_key(self.model_id, self.model.base_model, t, layer, causal=True)

    def _input(self, text: WordText):
        # trailing spaces would become a lone space token the model rarely saw before a word
        wt = WordText(text.text.rstrip(), text.words, text.spans)
        t = tokens.tokenize(self.tokenizer, wt, self.max_tokens)
        return t, forward.pad_batch([t], self.pad_id, self.device)

    def predict_next(self, text: WordText, top_k: int = 10) -> Prediction:
        """Top-k next tokens after the whole text (softmax over the last position's logits)."""
        import torch

        _, (ids, mask) = self._input(text)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits[0, -1]
        cands = tokens.top_k_candidates(logits, self.tokenizer, top_k)
        return Prediction(self.model_id, "next", text.text,
                          tuple(Candidate(_word_piece(c.token), c.prob) for c in cands),
                          method=NEXT_METHOD)

    def logit_lens(self, text: WordText, top_k: int = 1) -> LogitLens:
        """The best next token and its probability read off every layer at every position.

        nostalgebraist 2020, "interpreting GPT: the logit lens": apply the final norm and the
        output head to each layer's hidden state. transformers already returns the LAST hidden
        state after the final norm (it ties hidden_states[-1] to last_hidden_state), so the norm
        is applied there only if that state is still the raw block output. Only the top token
        is kept per cell (top_k is accepted for the protocol).
        """
        import numpy as np
        import torch

        if not self.info.has_logit_lens:
            raise UnsupportedPrediction("cannot find this architecture's final norm or output "
                                        "head, so its logit lens is not available")
        t, (ids, mask) = self._input(text)
        with torch.inference_mode():
            out = self.model.base_model(input_ids=ids, attention_mask=mask,
                                        output_hidden_states=True, return_dict=True)
            states = out.hidden_states
            last_is_normed = torch.equal(states[-1], out.last_hidden_state)
            top_ids, top_probs = [], []
            for i, h in enumerate(states):
                x = h if (i == len(states) - 1 and last_is_normed) else self.norm(h)
                probs = torch.softmax(self._logits(self.head(x)[0]), dim=-1)   # (T, V)
                p, idx = probs.max(dim=-1)
                top_ids.append(idx.tolist())
                top_probs.append(p.cpu().numpy())
        top_tokens = tuple(tuple(_word_piece(t)
                                 for t in tokens.readable_tokens(self.tokenizer, row))
                           for row in top_ids)
        return LogitLens(self.model_id, t.tokens, top_tokens,
                         np.stack(top_probs).astype(np.float32),
                         layer_names=forward.layer_names(len(states) - 1))

    def predict_previous(self, text: WordText, top_k: int = 10) -> Prediction:
        raise UnsupportedPrediction("GPT models read left to right and cannot predict the "
                                    "previous word")


# -- GGUF: dequantise (the engine caches the result: engine/fetch.py) --------------------
def convert_gguf(src_dir: Path, gguf_file: str, dest: Path, progress: bool = True) -> None:
    """Dequantise a GGUF checkpoint with transformers and save it as safetensors + tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with loading.progress_bars(progress):
            tok = AutoTokenizer.from_pretrained(str(src_dir), gguf_file=gguf_file,
                                                local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(src_dir), gguf_file=gguf_file,
                                                         dtype=torch.float32,
                                                         local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelUnavailable(f"cannot read the GGUF file {src_dir / gguf_file}: {err}") from err
    if not all(p.dtype.is_floating_point for p in model.parameters()):
        raise ModelUnavailable(f"{gguf_file} was not fully dequantised; convert it to "
                               "safetensors with transformers first")
    # dequantised, the weights are plain float tensors; only the GGUF marker forbids
    # save_pretrained
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with loading.progress_bars(progress):
        model.save_pretrained(str(dest))
    tok.save_pretrained(str(dest))


def claims_dir(path: Path) -> bool:
    """A local folder of a left-to-right LM: a causal Hugging Face config, or GGUF files."""
    causal = loading.causal_config(path)
    return bool(list(path.glob("*.gguf"))) if causal is None else causal


def gives_of_dir(path: Path) -> Gives:
    """What the folder's checkpoint gives: a causal LM's head, as its config declares it, or a
    GGUF file's (a GGUF file always holds its LM head)."""
    from engine.checkpoint import kind_of, read_config

    cfg = read_config(path)
    return Gives(WITH_LM) if cfg is None else kind_of(cfg, str(path)).gives


def load(model_id: str, path: Path, options: LoadOptions, progress: bool = True,
         gguf_cache_hit: bool | None = None) -> GPTAdapter:
    """A causal LM from a transformers folder (a GGUF file arrives here already converted)."""
    from transformers import AutoModelForCausalLM

    model = loading.load_hf_model(AutoModelForCausalLM, path, options, progress, name=model_id)
    if model.get_output_embeddings() is None:
        raise EngineError(f"{path} is not a causal LM with an output head")
    return GPTAdapter(model_id, model, loading.load_tokenizer(path), gguf_cache_hit)
