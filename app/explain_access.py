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
from engine.attribution.methods import METHODS as _METHODS
from engine.attribution.result import Attribution
from engine.components.result import ABLATION_MODES, SITES, Components, HeadImportance, Patching
from engine.generation import MAX_GENERATED_TOKENS, TEMPERATURES
from engine.generation_result import PROB_CONVENTION, RANK_CONVENTION, Generation

# the attribution methods as the why view needs them: name -> label, note, whether signed, additive
# and run in many passes (engine/attribution/methods.py owns them)
METHODS = {name: {"label": m.label, "note": m.note, "signed": m.signed, "additive": m.additive,
                  "many_passes": m.many_passes} for name, m in _METHODS.items()}

__all__ = ["METHODS", "MAX_GENERATED_TOKENS", "TEMPERATURES", "PROB_CONVENTION", "RANK_CONVENTION",
           "Attribution", "Generation", "ABLATION_MODES", "SITES", "Components",
           "HeadImportance", "Patching"]

def _explaining(model_id: str, text: str, target: str, contrast: str | None = None,
                method: str = "gradxinput", kind: str = "masked", steps: int | None = None,
                ablate: str | None = None, ablate_mode: str = "zero") -> str:
    off = f" with {ablate} off" if ablate else ""
    return f"Explaining {model_id}'s {target!r} ({method}){off} …"


@engine_spinner(Engine.attribute_key, _explaining)
def attribute(model_id: str, text: str, target: str, contrast: str | None = None,
              method: str = "gradxinput", kind: str = "masked", steps: int | None = None,
              ablate: str | None = None, ablate_mode: str = "zero") -> Attribution:
    """Why `model_id` predicts `target` (rather than `contrast`) for the blank, the next or the
    previous word of `text` (engine.attribution.result.Attribution), with the parts `ablate`
    names knocked out."""
    return get_engine().attribute(model_id, text, target, contrast=contrast, method=method,
                                  kind=kind, steps=steps, ablate=ablate or None,
                                  ablate_mode=ablate_mode)


@engine_cached(lambda model_id, text, kind: f"Rolling out {model_id}'s attention …")
def rollout_words(model_id: str, text: str, kind: str):
    """Attention rollout of the top layer at the explained position, pooled onto words
    (engine.attribution.rollout.RolloutScores): for a masked LM's blank and a decoder's next
    word; UnsupportedPrediction for the rest."""
    return get_engine().rollout(model_id, text, kind)


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
    gen = generate(model_id, prompt, max_tokens, sample=sample, temperature=temperature,
                   seed=seed, top_k=top_k)
    return get_engine().generation_attention(gen)


@engine_spinner(Engine.head_importance_key, lambda model_id, text, target, contrast=None,
                kind="masked": f"Knocking out each of {model_id}'s heads in turn …")
def head_importance(model_id: str, text: str, target: str, contrast: str | None = None,
                    kind: str = "masked") -> HeadImportance:
    """Each head's importance for one prediction, knocked out and by gradient
    (engine.components.result.HeadImportance)."""
    return get_engine().head_importance(model_id, text, target, contrast, kind)


@engine_spinner(Engine.patch_key, lambda model_id, clean, corrupt, target, contrast=None,
                site="residual", kind="next", noise_words=None, seeds=5:
                f"Patching {model_id}'s {site} at every layer and position …")
def patch(model_id: str, clean: str, corrupt: str | None, target: str,
          contrast: str | None = None, site: str = "residual", kind: str = "next",
          noise_words: str | None = None, seeds: int = 5) -> Patching:
    """Activation patching of the clean run into the corrupted one, every layer × position
    (engine.components.result.Patching)."""
    return get_engine().patch(model_id, clean, corrupt, target, contrast, site=site, kind=kind,
                              noise_words=noise_words, seeds=seeds)


@engine_spinner(Engine.components_key, lambda model_id, text, target, contrast=None:
                f"Splitting {model_id}'s logit into its parts …")
def components(model_id: str, text: str, target: str, contrast: str | None = None) -> Components:
    """Each head's and block's direct effect on the next word's logit
    (engine.components.result.Components)."""
    return get_engine().components(model_id, text, target, contrast)


def explained_target(token: str) -> tuple[str, bool]:
    """A generated token as the word an attribution of kind "next" explains, and whether that
    is exact: the engine reads the target as a word that follows a space, so a token that
    starts with one is exact and one glued to the word before (",", "ing") is read spaced."""
    word = token.strip()
    return word, bool(word) and token.startswith(" ") and token[1:] == word
