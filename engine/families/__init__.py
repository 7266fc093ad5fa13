"""The model families: one row each, and the only place that lists them.

A row names the module whose `load()` builds the family's Adapter (imported on first use, so
asking what a family can do loads no model code) and what the family's models can do at most.
One checkpoint may do less (a BERT without an MLM head cannot fill a blank): what it gives is
read once from its files or its registry entry (`Gives`, LIT's output_spec), and its entry's
`capabilities` (engine.registry.ModelEntry) is that set within this row, the one answer to
"can this model ...?" that the CLI, the app and the engine read. Adding a family is one module
plus one `register()` call; adding a capability is one line in CAPABILITIES, the set of the
checkpoints that give it below and the rows of the families that have it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Mapping

from engine.errors import EngineError

# What a family's models can give (the app shows a view only where a chosen model can):
CAPABILITIES = frozenset({
    "hidden_states",   # a vector per word at every layer
    "attention",       # attention maps per layer and head
    "masked_lm",       # an MLM head reads both sides of a [MASK] at once
    "fill_blank",      # fills one [MASK] from both sides, by any method
    "next_word",       # a left-to-right LM's guess at the next word
    "previous_word",   # a right-to-left LM's guess at the word before
    "scalar_mix",      # ELMo's learned mix of its layers
    "logit_lens",      # every layer read through the LM head
    "query_key",       # the query and key vectors behind each attention score (neuron view)
    "attribution",     # why a prediction came out: its words' attribution (engine/attribution)
    "generation",      # continues a prompt token by token on its key/value cache
    "ablation",        # heads and feed-forward blocks knocked out for any prediction
    "patching",        # a clean run's activations patched into a corrupted run's
    "direct_logit",    # each head's and block's direct effect on a logit (pre-norm decoders)
})

# What a checkpoint gives by what it ships, whichever family reads it (the row then keeps
# what the family has): every checkpoint its encoder's views, one with a masked-LM head also
# the masked word, one with a word-predicting LM (a GPT's head, ELMo's softmax) the LM's views.
ENCODER = frozenset({"hidden_states", "attention", "scalar_mix", "query_key"})
WITH_MLM_HEAD = ENCODER | {"masked_lm", "fill_blank", "attribution", "ablation", "patching"}
WITH_LM = ENCODER | {"fill_blank", "next_word", "previous_word", "logit_lens", "attribution",
                     "generation", "ablation", "patching", "direct_logit"}


@dataclass(frozen=True)
class Gives:
    """What one checkpoint says it gives, read from its files (engine.checkpoint.kind_of, a
    family's folder probe) or its registry entry before anything loads: the capabilities it
    ships, and those its architecture rules out with why (DeBERTa's relative-position scores
    are no query·key, so no neuron view)."""

    capabilities: frozenset[str] = ENCODER
    cannot: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    name: str                     # the id used in the registry and URLs ("gpt")
    label: str                    # how pages name it ("GPT")
    module: str                   # module with load(model_id, path, options, progress, ...)
    capabilities: frozenset[str]
    reads_gguf: bool = False      # module also has convert_gguf(src_dir, file, dest, progress)
    # the module that traces its encoders for batch work (usable, graph_dir, load, refused,
    # build: engine/families/hf/traced.py), or "": the trace is checked against the model
    # before it is kept, so a row says only "worth trying"
    tracer: str = ""
    # module with claims_dir(path) -> bool and gives_of_dir(path) -> Gives, which say whether
    # a local model folder is this family's and what its checkpoint gives (a light module: the
    # registry asks every family before any model loads); "" = `module`
    folder: str = ""
    # why its models lack a capability the row leaves out, where the family knows (said in
    # the refusal; a checkpoint's own `Gives.cannot` comes first)
    why_not: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        unknown = (set(self.capabilities) | set(self.why_not)) - CAPABILITIES
        if unknown:
            raise ValueError(f"unknown capabilities {sorted(unknown)}")

    def capabilities_of(self, gives: Gives) -> frozenset[str]:
        """What one checkpoint of this family can do: what it gives, within this row, less
        what its architecture rules out."""
        return (gives.capabilities & self.capabilities) - set(gives.cannot)

    @property
    def a_label(self) -> str:
        """The label with its article, for messages ("an ELMo", "a GPT")."""
        return ("an " if self.label[0] in "AEIOU" else "a ") + self.label

    @property
    def left_to_right(self) -> bool:
        """Its models read left to right only (a GPT; not ELMo, which reads both ways)."""
        return "next_word" in self.capabilities and "previous_word" not in self.capabilities

    def folder_probe(self):
        return importlib.import_module(self.folder or self.module)

    def module_object(self):
        return importlib.import_module(self.module)


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    FAMILIES[family.name] = family
    return family


def unregister(name: str) -> None:
    FAMILIES.pop(name, None)


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise EngineError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name]


register(Family("elmo", "ELMo", "engine.families.elmo.adapter",
                frozenset({"hidden_states", "fill_blank", "next_word", "previous_word",
                           "scalar_mix", "attribution"}), folder="engine.families.elmo.folder",
                why_not={"direct_logit": "ELMo's language model is a character CNN and "
                                         "biLSTM: no heads or residual sum"}))
register(Family("gpt", "GPT", "engine.families.gpt",
                frozenset({"hidden_states", "attention", "fill_blank", "next_word",
                           "logit_lens", "query_key", "attribution", "generation", "ablation",
                           "patching", "direct_logit"}),
                reads_gguf=True, tracer="engine.families.hf.traced"))
register(Family("bert", "BERT", "engine.families.bert",
                frozenset({"hidden_states", "attention", "masked_lm", "fill_blank",
                           "query_key", "attribution", "ablation", "patching"}),
                tracer="engine.families.hf.traced",
                why_not={"direct_logit": "a post-norm encoder normalises the residual stream "
                                         "after every attention and feed-forward addition, "
                                         "and its MLM head is dense + GELU + LayerNorm before "
                                         "the vocabulary, so its logit is no sum of its "
                                         "parts"}))
