"""The Engine's methods for what each part of a model does (engine/components/): knocking
parts out, head importance, activation patching and direct logit attribution, each checked
against the model's capabilities and its result kept in the Engine's result cache. A mixin of
engine.api.Engine, which supplies resolved(), adapter(), cached() and models_that()."""
from __future__ import annotations

from engine import budget
from engine.errors import UnsupportedPrediction
from engine.text import to_word_text


class PartsMixin:
    def _able(self, model_id: str, capability: str, doing: str) -> None:
        """UnsupportedPrediction naming the models that can, unless `model_id` can; the reason
        is its architecture's (entry.cannot), else its family's (Family.why_not)."""
        from engine.families import FAMILIES

        entry = self.resolved(model_id)
        if capability not in entry.capabilities:
            row = FAMILIES.get(entry.family)
            why = entry.cannot.get(capability) or (row.why_not.get(capability) if row else None)
            raise UnsupportedPrediction(
                f"{model_id} cannot {doing}" + (f" ({why})" if why else "")
                + "; models that can: " + ", ".join(self.models_that(capability)))

    def ablated(self, model_id: str, ablate: str | None, mode: str = "zero"):
        """A context in which `model_id` runs with the parts `ablate` names knocked out
        ("L.H" heads, "L.*" a layer's attention, "L.mlp" a feed-forward block, from 1, comma
        separated; engine.components.ablation), by zeroing them or (mode "mean") putting in
        their mean over the reference sentences. Nothing when `ablate` is empty."""
        from contextlib import nullcontext

        if not ablate:
            return nullcontext()
        from engine.components import ablation

        self._able(model_id, "ablation", "knock out heads or blocks")
        return ablation.ablated(self.adapter(model_id), ablation.parse(
            ablate, ablation.sites(self.adapter(model_id))), mode)

    def head_importance(self, model_id: str, text: str, target: str,
                        contrast: str | None = None, kind: str = "masked"):
        """How much f drops when each head alone is knocked out, and Michel et al.'s gradient
        estimate of it (engine.components.importance.HeadImportance), cached."""
        from engine.components.importance import head_importance

        self._able(model_id, "ablation", "knock out heads")
        key = self.head_importance_key(model_id, text, target, contrast, kind)
        if not self.has_result(key):
            budget.check(*self.head_importance_work(model_id, text, contrast))
        return self.cached(key,
                           lambda: head_importance(self.adapter(model_id), to_word_text(text),
                                                   target, contrast, kind))

    def patch(self, model_id: str, clean: str, corrupt: str | None, target: str,
              contrast: str | None = None, site: str = "residual", kind: str = "next",
              noise_words: str | None = None, seeds: int = 5):
        """Activation patching (engine.components.patching.Patching): f of the corrupted run
        with one layer × position cell of `site` taken from the clean run, for every cell. No
        `corrupt`: the clean text with the words `noise_words` noised (Meng et al. 2022)."""
        from engine.components.patching import patch

        self._able(model_id, "patching", "patch activations")
        key = self.patch_key(model_id, clean, corrupt, target, contrast, site, kind,
                             noise_words, seeds)
        if not self.has_result(key):
            budget.check(self.patch_work(model_id, clean, corrupt, contrast, site,
                                         noise_words, seeds))
        return self.cached(key, lambda: patch(self.adapter(model_id), clean, corrupt, target,
                                              contrast, site=site, kind=kind,
                                              noise_words=noise_words, seeds=seeds))

    def components(self, model_id: str, text: str, target: str, contrast: str | None = None):
        """Each component's direct effect on the next word's logit
        (engine.components.dla.Components), cached."""
        from engine.components.dla import components

        self._able(model_id, "direct_logit", "split its logit into its parts")
        key = self.components_key(model_id, text, target, contrast)
        if not self.has_result(key):
            adapter = self.adapter(model_id)
            budget.check(budget.Work(          # a forward pass per reading, and the check's
                "splitting the logit", adapter.anatomy(), 2 * _readings(contrast),
                adapter.count_tokens(to_word_text(text))))
        return self.cached(key,
                           lambda: components(self.adapter(model_id), to_word_text(text),
                                              target, contrast))

    def patch_work(self, model_id: str, clean: str, corrupt: str | None,
                   contrast: str | None, site: str, noise_words: str | None,
                   seeds: int) -> budget.Work:
        """Patching's work, before it runs: every layer × token cell a pass (an upper bound:
        cells the corruption leaves as they are are skipped), per reading and per seed, and
        the clean and corrupted runs recorded."""
        adapter = self.adapter(model_id)
        tokens = max(adapter.count_tokens(to_word_text(t)) for t in (clean, corrupt) if t)
        rows = adapter.info.n_layers + (1 if site == "residual" else 0)
        runs = 1 if corrupt is not None else max(1, seeds)
        return budget.Work(
            f"activation patching of {rows} × {tokens:,} cells"
            + (f" for {runs} seeds" if runs > 1 else ""), adapter.anatomy(),
            (rows * tokens + 2) * runs * _readings(contrast), tokens,
            shorter="use a shorter text (fewer tokens)" + (", fewer seeds" if runs > 1 else ""))

    def head_importance_work(self, model_id: str, text: str,
                             contrast: str | None) -> tuple[budget.Work, budget.Work]:
        """Head importance's work: a pass with each head knocked out, and one backward pass
        for the gradient estimate, per reading."""
        adapter = self.adapter(model_id)
        tokens = adapter.count_tokens(to_word_text(text))
        heads = adapter.info.n_layers * adapter.info.n_heads
        readings = _readings(contrast)
        return (budget.Work(f"knocking out each of {heads:,} heads", adapter.anatomy(),
                            (heads + 1) * readings, tokens),
                budget.Work("the gradient estimate", adapter.anatomy(), readings, tokens,
                            backward=True))

    @staticmethod
    def head_importance_key(model_id: str, text: str, target: str, contrast: str | None = None,
                            kind: str = "masked"):
        return ("head_importance", model_id, text, target, contrast, kind)

    @staticmethod
    def patch_key(model_id: str, clean: str, corrupt: str | None, target: str,
                  contrast: str | None = None, site: str = "residual", kind: str = "next",
                  noise_words: str | None = None, seeds: int = 5):
        return ("patch", model_id, clean, corrupt, target, contrast, site, kind, noise_words,
                seeds)

    @staticmethod
    def components_key(model_id: str, text: str, target: str, contrast: str | None = None):
        return ("components", model_id, text, target, contrast)


def _readings(contrast: str | None) -> int:
    """Forward passes one f takes: a contrast may be read in a pass of its own."""
    return 2 if contrast else 1
