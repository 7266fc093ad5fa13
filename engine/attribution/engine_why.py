"""The Engine's methods for why a prediction came out and what a decoder goes on to say:
attributions (engine/attribution/) and generations (engine/generation.py), each checked
against the model's capabilities and kept in the Engine's result cache under its key. A mixin
of engine.api.Engine, which supplies resolved(), adapter(), encode_words(), cached() and
models_that()."""
from __future__ import annotations

from functools import partial

from engine import budget
from engine.errors import EngineError, UnsupportedPrediction
from engine.text import to_word_text


class WhyMixin:
    # the prediction each attribution kind explains, as the capability that gives it
    EXPLAINS = {"masked": "fill_blank", "next": "next_word", "previous": "previous_word"}

    def attribute(self, model_id: str, text: str, target: str, contrast: str | None = None,
                  method: str = "ig", kind: str = "masked", steps: int | None = None,
                  ablate: str | None = None, ablate_mode: str = "zero"):
        """Why `model_id` predicts `target` (rather than `contrast`) for the blank (kind
        "masked"), the next or the previous word of `text`: each word's attribution by
        `method`, with its faithfulness (engine.attribution.result.Attribution), cached."""
        from engine.attribution.explain import attribute
        from engine.attribution.objective import KINDS

        if kind not in KINDS:
            raise EngineError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        needed = self.EXPLAINS[kind]
        can = self.resolved(model_id).capabilities
        for capability in ("attribution", needed):
            if capability not in can:
                why = self.resolved(model_id).cannot.get(capability)
                raise UnsupportedPrediction(
                    f"{model_id} gives no {kind}-word prediction to explain"
                    + (f" ({why})" if why else "") + "; models that can: "
                    + ", ".join(m for m in self.models_that(needed)
                                if "attribution" in self.resolved(m).capabilities))
        key = self.attribute_key(model_id, text, target, contrast, method, kind, steps, ablate,
                                 ablate_mode)
        if not self.has_result(key):
            budget.check(*self.attribute_work(model_id, text, contrast, method, steps))

        def run():
            with self.ablated(model_id, ablate, ablate_mode):
                return attribute(self.adapter(model_id), to_word_text(text), target, contrast,
                                 method=method, kind=kind, steps=steps)
        return self.cached(key, run)

    def generate(self, model_id: str, prompt: str, max_tokens: int, sample: bool = False,
                 temperature: float = 1.0, seed: int | None = None, top_k: int = 5):
        """`model_id`'s continuation of `prompt` (engine.generation_result.Generation), one
        token at a time on its key/value cache. Greedy runs and seeded draws are cached; an
        unseeded draw is new each time (its seed is in the result)."""
        from engine.generation import generate

        if "generation" not in self.resolved(model_id).capabilities:
            raise UnsupportedPrediction(
                f"{model_id} does not continue a text left to right; models that can: "
                + ", ".join(self.models_that("generation")))
        if isinstance(max_tokens, int) and max_tokens > 0:
            adapter = self.adapter(model_id)
            # one token at a time on the key/value cache: about one pass over the whole text
            # an empty prompt starts from the model's start token (generation.generate)
            prompt_tokens = adapter.count_tokens(to_word_text(prompt)) if prompt.strip() else 1
            budget.check(budget.Work(
                f"writing {max_tokens} tokens", adapter.anatomy(), 1, prompt_tokens + max_tokens,
                shorter="use a shorter prompt or fewer tokens"))
        run = partial(generate, self.adapter(model_id), prompt, max_tokens, sample=sample,
                      temperature=temperature, seed=seed, top_k=top_k)
        if sample and seed is None:
            return run()
        return self.cached(self.generate_key(model_id, prompt, max_tokens, sample,
                                             temperature, seed, top_k), run)

    def rollout(self, model_id: str, text: str, kind: str):
        """Attention rollout of the top layer at the position `kind` explains, pooled onto
        words (engine.attribution.rollout.RolloutScores), read from the text's encoding with
        its attention maps, which the result cache keeps like every encoding;
        UnsupportedPrediction for a model without attention or a kind read at no one
        position."""
        from engine.attribution.rollout import rollout_scores

        return rollout_scores(self.adapter(model_id), to_word_text(text), kind,
                              lambda words: self.encode_words(model_id, [words],
                                                              attentions=True)[0])

    def generation_attention(self, gen):
        """Attention over the prompt and the tokens of a generation (generate()'s result),
        from one forward of the whole sequence
        (engine.generation_result.GenerationAttention)."""
        from engine.generation import generation_attention

        return generation_attention(self.adapter(gen.model_id), gen)

    def attribute_work(self, model_id: str, text: str, contrast: str | None, method: str,
                       steps: int | None) -> list[budget.Work]:
        """An attribution's work, before it runs: the method's passes (integrated gradients:
        every step of its ladder, as a map that does not converge climbs all of it) and the
        faithfulness measures' forward passes, each per reading (methods.Method.passes)."""
        from engine.attribution import faithfulness, methods

        adapter = self.adapter(model_id)
        words = to_word_text(text)
        tokens = adapter.count_tokens(words)
        readings = 2 if contrast else 1
        shape = adapter.anatomy()
        checks = (1 + faithfulness.RANDOM_ORDERS) * len(faithfulness.SHARES) * 2 + 2
        work = [budget.Work("measuring the map's faithfulness", shape, checks * readings,
                            tokens)]
        if method in methods.METHODS:     # an unknown one is refused by attribute() itself
            p = methods.METHODS[method].passes(len(words.words), tokens, steps)
            work.append(budget.Work(p.what, shape, p.count * readings, tokens,
                                    backward=p.backward, shorter=p.shorter))
        return work

    @staticmethod
    def attribute_key(model_id: str, text: str, target: str, contrast: str | None = None,
                      method: str = "ig", kind: str = "masked", steps: int | None = None,
                      ablate: str | None = None, ablate_mode: str = "zero"):
        """The key attribute() keeps its result under (the app asks has_result() with it)."""
        return ("attribute", model_id, text, target, contrast, method, kind, steps,
                ablate or None, ablate_mode if ablate else None)

    @staticmethod
    def generate_key(model_id: str, prompt: str, max_tokens: int, sample: bool = False,
                     temperature: float = 1.0, seed: int | None = None, top_k: int = 5):
        """The key generate() keeps a greedy run or a seeded draw under."""
        return ("generate", model_id, prompt, max_tokens, sample,
                temperature if sample else None, seed, top_k)
