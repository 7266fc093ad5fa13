"""The app's door to why a model predicts a word (engine/attribution/) and to what a decoder
writes (engine/generation.py): attributions, attention rollout onto words, generations and
the attention over them. A fourth door module (tests/test_layering.py's DOORS) so that
app/engine_access.py keeps to the models themselves.

Attributions and generations are kept by the Engine itself (Engine.attribute_key and
generate_key), so this door only shows a spinner while one is missing (engine_spinner); the
rollouts and the attention it derives are kept through engine_access.engine_cached, like every
other app result.
"""
from __future__ import annotations

from app.engine_access import engine_cached, engine_spinner, get_engine
from engine.api import Engine
from engine.attribution.result import METHODS, Attribution
from engine.generation import MAX_GENERATED_TOKENS
from engine.generation_result import PROB_CONVENTION, RANK_CONVENTION, Generation

__all__ = ["METHODS", "MAX_GENERATED_TOKENS", "PROB_CONVENTION", "RANK_CONVENTION",
           "Attribution", "Generation"]

def _explaining(model_id: str, text: str, target: str, contrast: str | None = None,
                method: str = "gradxinput", kind: str = "masked", steps: int | None = None) -> str:
    return f"Explaining {model_id}'s {target!r} ({method}) …"


@engine_spinner(Engine.attribute_key, _explaining)
def attribute(model_id: str, text: str, target: str, contrast: str | None = None,
              method: str = "gradxinput", kind: str = "masked",
              steps: int | None = None) -> Attribution:
    """Why `model_id` predicts `target` (rather than `contrast`) for the blank, the next or the
    previous word of `text` (engine.attribution.result.Attribution)."""
    return get_engine().attribute(model_id, text, target, contrast=contrast, method=method,
                                  kind=kind, steps=steps)


@engine_cached(lambda model_id, text, kind: f"Rolling out {model_id}'s attention …")
def rollout_words(model_id: str, text: str, kind: str):
    """Attention rollout of the top layer at the explained position, pooled onto words
    (engine.attribution.rollout.RolloutScores): for a masked LM's blank and a decoder's next
    word; UnsupportedPrediction for the rest."""
    from engine.attribution.rollout import rollout_scores
    from engine.text import to_word_text

    return rollout_scores(get_engine().adapter(model_id), to_word_text(text), kind)


def _generating(model_id: str, prompt: str, max_tokens: int, sample: bool = False,
                temperature: float = 1.0, seed: int | None = None, top_k: int = 5) -> str:
    return f"{model_id} is writing {max_tokens} tokens …"


@engine_spinner(Engine.generate_key, _generating)
def generate(model_id: str, prompt: str, max_tokens: int, sample: bool = False,
             temperature: float = 1.0, seed: int | None = None, top_k: int = 5) -> Generation:
    """`model_id`'s continuation of `prompt` (engine.generation_result.Generation). The page
    always passes a seed when sampling, so a rerun shows the same draw."""
    return get_engine().generate(model_id, prompt, max_tokens, sample=sample,
                                 temperature=temperature, seed=seed, top_k=top_k)


@engine_cached(lambda model_id, prompt, max_tokens, sample=False, temperature=1.0, seed=None,
               top_k=5: f"Reading {model_id}'s attention over the generated text …")
def generation_attention(model_id: str, prompt: str, max_tokens: int, sample: bool = False,
                         temperature: float = 1.0, seed: int | None = None, top_k: int = 5):
    """Attention over prompt + generated tokens of the generation with these arguments
    (engine.generation_result.GenerationAttention)."""
    from engine.generation import generation_attention as attention

    gen = generate(model_id, prompt, max_tokens, sample=sample, temperature=temperature,
                   seed=seed, top_k=top_k)
    return attention(get_engine().adapter(model_id), gen)


def explained_target(token: str) -> tuple[str, bool]:
    """A generated token as the word an attribution of kind "next" explains, and whether that
    is exact: the engine reads the target as a word that follows a space, so a token that
    starts with one is exact and one glued to the word before (",", "ing") is read spaced."""
    word = token.strip()
    return word, bool(word) and token.startswith(" ") and token[1:] == word
