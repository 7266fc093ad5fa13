"""Filling a blank with a left-to-right LM: the candidates' search and their ranking.

A causal LM reads only what precedes a token, so a [MASK] is filled by proposing whole words
(from the left context, and from the model reading the whole sentence through a fill-in-the-
blank prompt) and ranking each by the log-probability of the sentence it makes. The GPT adapter
(engine/families/gpt/__init__.py) takes this search as a mixin: it needs the adapter's model,
tokenizer, device, pad_id, head, max_tokens and prompt_candidates.
"""
from __future__ import annotations

import functools
import re

from engine.errors import EngineError
from engine.families.hf import tokens
from engine.result import Candidate, Prediction
from engine.text import WordText

# Filling a blank: how many left-context words a GPT re-ranks by the whole sentence, and how
# many greedy steps may extend a candidate that the tokenizer splits into pieces. On the cloze set
# (results/cloze.md, 149 items, 95% Wilson intervals) SmolLM2's top-5 from both sides with
# left-context candidates only is 59.7% [51.7, 67.3] with 30, 67.1% [59.2, 74.1] with 100,
# 69.8% [62.0, 76.6] with 200 and 71.1% [63.4, 77.8] with 300: 25 of the 32 answers missing at
# 300 have 0-1 words before the blank, where the left side cannot propose them ...
FILL_CANDIDATES = 100
FILL_EXTEND_STEPS = 2
# ... so a second pool comes from the model reading the whole sentence through a fill-in-the-
# blank prompt (two worked examples, none of them in the cloze set). The prompt only proposes
# words; every candidate is still ranked by the log-probability of the sentence itself. 100 +
# 100: 84.6% [77.9, 89.5] top-5 (+17.4 points [11.4, 24.2] over the left pool alone); 87.9%
# [81.7, 92.2] since the start token comes first after one or two words (FILL_START_WORDS).
FILL_PROMPT = ("Fill in the blank with one word.\n"
               "Sentence: I read a good ___ before I went to sleep.\nAnswer: book\n"
               "Sentence: He plays the ___ in a rock band.\nAnswer: guitar\n"
               "Sentence: {sentence}\nAnswer:")
FILL_BLANK = "___"
FILL_PROMPT_CANDIDATES = 100
FILL_SIDES = ("both", "left")
# The document-start token goes before the sentence when at most this many words precede the
# blank. With one or two words and nothing before them SmolLM2 reads the blank as a fragment
# ("The [MASK] slept all day ." -> have, that, was; after <|endoftext|>: cat, dog, baby); with
# a longer left context the start token hurts as often as it helps ("He locked the door with a
# [MASK] ." -> key 22% of the candidates' share without it, 7% with it). Chosen on 120 WordNet
# usage examples (bench.cloze.wordnet_items, not the everyday sets): top 5 17.5% never (besides
# a blank that opens the sentence), 22.5% always; the gain came from the blanks after one or
# two words (+5 of +6 items net), those after three or more were level (18 against 17 of 67),
# so the start token goes in only where it helped: 21.7% (26 of 120) on those examples.
FILL_START_WORDS = 2
# Re-ranking reads at most this many tokens of the right side: every candidate runs its own
# pass over what follows the blank, so a blank that opens a 128-word sentence (570 tokens) would
# take ~200 x 570 token passes (minutes on 2 cores); the words nearest the blank are the ones
# that pick between candidates. The method line says when the right side was cut.
FILL_RIGHT_TOKENS = 32
# Rows of one batched pass are bounded by what they hold, about 4 bytes x (logits: tokens x
# vocabulary + their copy of the key/value cache): 64 rows of a 574-token sentence in SmolLM2
# (49,152-token vocabulary) took 7.2 GB of logits and 7.2 GB more for their log-softmax.
BATCH_BYTES = 512 * 2**20
_WORDLIKE = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*", re.UNICODE)
_CONTINUES = re.compile(r"[^\W_]+", re.UNICODE)
_SPACE_BEFORE_PUNCT = re.compile(r"\s+(?=[.,;:!?%)\]}]|'s\b|n't\b)")


def running_text(text: str) -> str:
    """Text as people write it ("rates ." -> "rates."): the space-separated punctuation of
    typed examples is a token sequence these models rarely saw, and it would be scored too."""
    return _SPACE_BEFORE_PUNCT.sub("", text)


class BlankFill:
    """GPTAdapter.predict_masked and what it runs on."""

    @functools.cached_property
    def _start_id(self) -> int | None:
        """A document-start token to condition a first word on, when the tokenizer adds none
        (GPT-2 and SmolLM2 add no BOS; both trained with <|endoftext|> between documents).
        Kept: get_vocab() builds a dict of the whole vocabulary, and a fill asks this for each
        of its ~200 candidate sentences (5.4 s of a 9.7 s blank on 2 cores, uncached)."""
        probe = self.tokenizer("a")["input_ids"]
        if probe and probe[0] in self.tokenizer.all_special_ids:
            return None                                   # the tokenizer adds its own BOS
        vocab = self.tokenizer.get_vocab()
        for tid in (vocab.get("<|endoftext|>"), self.tokenizer.bos_token_id,
                    self.tokenizer.eos_token_id):
            if tid is not None:
                return int(tid)
        return None

    def _ids(self, text: str, with_start: bool) -> list[int]:
        """Token ids of running text, after the document-start token when `with_start`
        (predict_masked: when at most FILL_START_WORDS words precede the blank)."""
        start = self._start_id if with_start else None
        return ([start] if start is not None else []) + \
            self.tokenizer(running_text(text))["input_ids"]

    def _batch_rows(self, width: int, context: int, most: int) -> int:
        """How many rows one pass may batch within BATCH_BYTES: each row holds `width` tokens
        of logits and a key/value cache of `context` tokens."""
        cfg = self.model.config
        heads = cfg.num_attention_heads
        kv_dim = (getattr(cfg, "num_key_value_heads", None) or heads) * (
            getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
        vocab = self.head.weight.shape[0] if self.head is not None else cfg.vocab_size
        per_row = 4 * (width * vocab + 2 * cfg.num_hidden_layers * context * kv_dim)
        return max(1, min(most, BATCH_BYTES // per_row))

    def _token_logprobs(self, seqs: list[list[int]]):
        """log P(token t | tokens < t) for every t >= 1 of each sequence: [B, T-1] (0 past
        a sequence's end), in right-padded batches of _batch_rows rows."""
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for k, s in enumerate(seqs):
            ids[k, :len(s)] = torch.tensor(s)
            mask[k, :len(s)] = 1
        out = torch.zeros((len(seqs), width - 1))
        step = self._batch_rows(width, width, len(seqs))
        with torch.inference_mode():
            for c in range(0, len(seqs), step):
                part_ids = ids[c:c + step].to(self.device)
                logits = self.model(input_ids=part_ids,
                                    attention_mask=mask[c:c + step].to(self.device)).logits.float()
                # log-softmax of the tokens that came, without a second [rows, tokens,
                # vocabulary] tensor: the logit minus the log-sum-exp of its row
                got = logits[:, :-1].gather(-1, part_ids[:, 1:, None])[..., 0] \
                    - torch.logsumexp(logits[:, :-1], -1)
                out[c:c + step] = got.cpu() * mask[c:c + step, 1:]
        return out

    def _after_left(self, left_ids: list[int], suffixes: list[list[int]],
                    chunk: int = 64, left_pass=None) -> tuple[list[list[float]], list[int]]:
        """For each suffix (token ids that follow left_ids): log P of each of its tokens given
        the left context and its own earlier tokens, and the likeliest token after it.

        The left context runs once and its key/value cache is shared by a batch of suffixes:
        candidates and the right side are a few tokens each, the left side may be long, so this
        costs a fraction of scoring every whole sentence (same numbers to float rounding).
        `left_pass`: the model's output (with its cache) for left_ids, when the caller has it."""
        import torch

        import copy

        scores: list[list[float]] = []
        after: list[int] = []
        longest = max(len(s) for s in suffixes)
        chunk = self._batch_rows(longest, len(left_ids) + longest, chunk)
        with torch.inference_mode():
            out = left_pass if left_pass is not None else self._left_pass(left_ids)
            first = out.logits[0, -1].float().log_softmax(-1)                  # (V,)
            for c in range(0, len(suffixes), chunk):
                part = suffixes[c:c + chunk]
                cache = copy.deepcopy(out.cache)         # repeated in place, once per chunk
                cache.batch_repeat_interleave(len(part))
                width = max(len(s) for s in part)
                ids = torch.full((len(part), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(part), len(left_ids) + width), dtype=torch.long)
                mask[:, :len(left_ids)] = 1
                for k, s in enumerate(part):
                    ids[k, :len(s)] = torch.tensor(s)
                    mask[k, len(left_ids):len(left_ids) + len(s)] = 1
                logits = self.model(input_ids=ids.to(self.device),
                                    attention_mask=mask.to(self.device),
                                    cache=cache).logits.float()              # (B, W, V)
                lse = torch.logsumexp(logits, -1)     # log-softmax without a second (B, W, V)
                for k, s in enumerate(part):
                    rest = logits[k, :len(s) - 1].gather(
                        -1, ids[k, 1:len(s), None].to(logits.device))[:, 0] - lse[k, :len(s) - 1]
                    scores.append([float(first[s[0]]), *rest.tolist()])
                    after.append(int(logits[k, len(s) - 1].argmax()))
        return scores, after

    def _left_pass(self, left_ids: list[int]):
        """The model's output for left_ids alone, with its key/value cache."""
        import torch

        with torch.inference_mode():
            return self.model(input_ids=torch.tensor([left_ids], device=self.device),
                              use_cache=True)

    def _candidate_words(self, left_ids: list[int], n: int) -> list[str]:
        """The n likeliest whole words after the left context: word-starting tokens from the
        next-token distribution, each extended greedily while the model's likeliest next token
        continues the same word (so "key" + "board" is one candidate, not two)."""
        import torch

        # one pass over the left context serves the first guess and every extension step:
        # a fill-in-the-blank prompt holds the whole sentence, hundreds of tokens
        left_pass = self._left_pass(left_ids)
        probs = left_pass.logits[0, -1].float().softmax(-1)
        order = torch.argsort(probs, descending=True)[: max(20 * n, 200)].tolist()
        pieces = tokens.readable_tokens(self.tokenizer, order)
        words: list[list[int]] = []
        seen: set[str] = set()
        for tid, piece in zip(order, pieces):
            starts_word = piece.startswith(" ") or len(left_ids) == 1
            word = piece.strip()
            if starts_word and _WORDLIKE.fullmatch(word) and word not in seen:
                seen.add(word)
                words.append([tid])
            if len(words) == n:
                break
        # a word that did not grow in one step would get the same next token in the next:
        # only the words that grew run again
        growing = words
        for _ in range(FILL_EXTEND_STEPS):
            _, after = self._after_left(left_ids, growing, left_pass=left_pass)
            grew = []
            for w, nxt in zip(growing, after):
                piece = tokens.readable_tokens(self.tokenizer, [nxt])[0]
                if not piece.startswith(" ") and _CONTINUES.fullmatch(piece):
                    w.append(nxt)
                    grew.append(w)
            if not grew:
                break
            growing = grew
        return list(dict.fromkeys(self.tokenizer.decode(w).strip() for w in words))

    def _prompt_words(self, text: WordText, at_start: bool) -> list[str]:
        """Words the model proposes for the blank when it reads the whole sentence through
        FILL_PROMPT. A blank that opens the sentence gets capitalised proposals, as it is
        written there."""
        s, e = text.spans[text.mask_indices[0]]
        sentence = running_text(text.text[:s] + FILL_BLANK + text.text[e:]).strip()
        prompt_ids = self.tokenizer(FILL_PROMPT.format(sentence=sentence))["input_ids"]
        if len(prompt_ids) + 16 > self.max_tokens:
            return []                                  # the left pool alone still answers
        words = self._candidate_words(prompt_ids, self.prompt_candidates)
        return [w[:1].upper() + w[1:] if at_start else w for w in words]

    def predict_masked(self, text: WordText, top_k: int = 10, sides: str = "both") -> Prediction:
        """Fill the one [MASK] as a left-to-right LM honestly can. sides="both": candidates are
        its likeliest whole words from the left context plus the words it proposes after
        reading the whole sentence in a fill-in-the-blank prompt (a blank near the start leaves
        the left context nothing to go on), each ranked by the log-probability of the sentence
        left + word + right. sides="left": the left context's words ranked by their own
        probability. The probabilities shown are shares among the candidates, not over the
        whole vocabulary."""
        import torch

        if sides not in FILL_SIDES:
            raise EngineError(f"sides must be one of {FILL_SIDES}, not {sides!r}")
        s, e = text.spans[text.one_mask()]
        left, right = text.text[:s].rstrip(), text.text[e:].rstrip()
        at_start = not left
        with_start = len(left.split()) <= FILL_START_WORDS
        left_ids = self._ids(left, with_start)
        if not left_ids:
            raise EngineError("this model has no start token, so a blank at the very start "
                              "needs at least one word before it")
        if len(left_ids) + 16 > self.max_tokens:
            raise EngineError(f"the text is too long for this model (cap {self.max_tokens} "
                              "tokens)")
        # a fixed pool: the probabilities are shares among the candidates, so a pool that grew
        # with top_k would change every listed word's probability with how many are asked for
        words = self._candidate_words(left_ids, FILL_CANDIDATES)
        n_left_pool = len(words)
        if sides == "both" and self.prompt_candidates:
            words = list(dict.fromkeys(words + self._prompt_words(text, at_start)))
        joined = [(left + " " + w if left else w) for w in words]
        seqs = [self._ids(j + right, with_start) for j in joined]
        # sides="left": only the candidate's own tokens count, the right side is not run at all
        # (the same scores, since a token reads only those before it; a shorter batch)
        keep = 0 if sides == "left" else FILL_RIGHT_TOKENS
        ends = [len(self._ids(j, with_start)) for j in joined]
        cut = sides == "both" and any(len(seq) > end + keep for seq, end in zip(seqs, ends))
        seqs = [seq[:end + keep] for seq, end in zip(seqs, ends)]
        n_left = len(left_ids)
        # the left context tokenises the same in every sentence (its last word ends before a
        # space); a tokeniser that merges across it would be scored whole instead
        same_left = all(seq[:n_left] == left_ids for seq in seqs)
        if same_left:
            lp, _ = self._after_left(left_ids, [seq[n_left:] for seq in seqs])
        else:
            full = self._token_logprobs(seqs)
            lp = [full[k, n_left - 1: len(seq) - 1].tolist() for k, seq in enumerate(seqs)]
        scores = [float(sum(lp[k][:len(seq) - n_left])) for k, seq in enumerate(seqs)]
        share = torch.softmax(torch.tensor(scores, dtype=torch.float64), dim=0)
        best = torch.argsort(share, descending=True)[:top_k].tolist()
        if sides == "left":
            method = f"top {len(words)} words from the left context alone"
        else:
            by = (f"the sentence up to {FILL_RIGHT_TOKENS} tokens after the blank" if cut
                  else "the whole sentence")
            method = (f"top {n_left_pool} words from the left context and "
                      f"{len(words) - n_left_pool} more from a fill-in-the-blank prompt, "
                      f"re-ranked by {by}" if len(words) > n_left_pool else
                      f"top {len(words)} words from the left context, re-ranked by {by}")
        return Prediction(self.model_id, "masked", text.text,
                          tuple(Candidate(words[k], float(share[k])) for k in best),
                          method=method, ranked_among=len(words))
