"""The engine's numpy helpers a page applies to results it already holds (no model runs, no
torch): attention maps per word or without special tokens, rollout, coinciding points, the ELMo
mix's weights. Pages import them from here, so engine/ is reached through the app's modules only
(tests/test_layering.py)."""
from __future__ import annotations

from engine.analysis.attention import keep_tokens, rollout, word_attention, word_labels
from engine.analysis.projection import MIN_POINTS
from engine.analysis.senses import SplitQuality, softmax
from engine.analysis.vectors import identical_groups

__all__ = ["keep_tokens", "rollout", "word_attention", "word_labels", "MIN_POINTS",
           "SplitQuality", "softmax", "identical_groups"]
